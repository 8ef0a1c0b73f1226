"""A TCP proxy that can cut the network path to the broker, for outage tests.

Tansu keeps its data in memory, so stopping it would lose the topic. Clients instead reach the
broker through this proxy (the broker advertises the proxy's port), and ``cut()`` makes the broker
unreachable exactly as a dead broker looks to a client: live connections are reset and new ones
refused. ``restore()`` listens again on the same port.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

CHUNK_BYTES = 65536
ACCEPT_POLL_S = 0.2


@dataclass
class FaultProxy:
    listen_port: int
    target_port: int
    host: str = "127.0.0.1"
    _server: socket.socket | None = None
    _accept_thread: threading.Thread | None = None
    _connections: set[socket.socket] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _running: threading.Event = field(default_factory=threading.Event)

    def start(self) -> FaultProxy:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((self.host, self.listen_port))
        server.listen()
        server.settimeout(ACCEPT_POLL_S)
        self._server = server
        self._running.set()
        self._accept_thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._accept_thread.start()
        return self

    def cut(self) -> None:
        """Refuse new connections and reset every live one."""
        self._running.clear()
        if self._accept_thread is not None:
            self._accept_thread.join()
        if self._server is not None:
            self._server.close()
            self._server = None
        with self._lock:
            connections = list(self._connections)
            self._connections.clear()
        for conn in connections:
            _reset(conn)

    def restore(self) -> None:
        self.start()

    def stop(self) -> None:
        self.cut()

    def _accept_loop(self) -> None:
        assert self._server is not None
        server = self._server
        while self._running.is_set():
            try:
                client, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection((self.host, self.target_port))
            except OSError:
                _reset(client)
                continue
            with self._lock:
                self._connections.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(CHUNK_BYTES):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for conn in (src, dst):
                with self._lock:
                    self._connections.discard(conn)
                _reset(conn)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _reset(conn: socket.socket) -> None:
    """Close with RST, as a crashed peer would, rather than an orderly FIN."""
    with contextlib.suppress(OSError):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with contextlib.suppress(OSError):
        conn.close()
