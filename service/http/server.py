"""uvicorn inside the service process, on a thread, stoppable on demand.

The process owns its signals (see :mod:`service.assembly`), so uvicorn must not install its own
handlers or re-raise a captured signal after shutdown: that would end the process before the
consumer writes its final checkpoint.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import socket
import threading
import time
from collections.abc import Generator, Mapping
from typing import Any

import uvicorn

logger = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 15.0
STARTUP_POLL_S = 0.01
LISTEN_BACKLOG = 2048


class _QuietSignalsServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to its owner."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0 picks a free one).

    Raises
    ------
    OSError
        With the address in the message, e.g. when the port is taken.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(LISTEN_BACKLOG)
    sock.set_inheritable(True)
    return sock


def fastest(module: str, preferred: str, fallback: str) -> str:
    """``preferred`` when ``module`` is importable, else ``fallback``."""
    return preferred if importlib.util.find_spec(module) is not None else fallback


class HttpServer:
    """An ASGI app served by uvicorn on a background thread.

    Parameters
    ----------
    app
        The ASGI application.
    host, port
        Where to listen; port 0 picks a free port (see :attr:`port` after :meth:`start`).
    graceful_timeout_s
        How long in-flight requests may take to finish on :meth:`stop`.
    access_log
        One log line per request (off by default: latency is in the metrics).
    ssl_options
        uvicorn's ``ssl_*`` keyword arguments (``HttpSettings.uvicorn_ssl_options``); HTTPS
        when they name a certificate.
    """

    def __init__(
        self,
        app: Any,
        host: str,
        port: int,
        graceful_timeout_s: float,
        *,
        access_log: bool = False,
        ssl_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._socket = bind_socket(host, port)
        self.host = host
        self.port = int(self._socket.getsockname()[1])
        config = uvicorn.Config(
            app,
            loop=fastest("uvloop", "uvloop", "asyncio"),
            http=fastest("httptools", "httptools", "h11"),
            lifespan="on",
            access_log=access_log,
            log_config=None,
            server_header=False,
            timeout_graceful_shutdown=max(1, int(graceful_timeout_s)),
            **dict(ssl_options or {}),
        )
        self._scheme = "https" if config.is_ssl else "http"
        self._server = _QuietSignalsServer(config)
        self._thread: threading.Thread | None = None
        self._failed = threading.Event()

    @property
    def url(self) -> str:
        """Base URL of the running server."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self._scheme}://{host}:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the server thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Serve on a thread; return once the app has started.

        Raises
        ------
        RuntimeError
            When the server does not start within ``timeout_s`` (e.g. the app's startup failed).
        """
        self._thread = threading.Thread(target=self._run, name="novikoff-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if self._failed.is_set() or not self._thread.is_alive():
                raise RuntimeError("the HTTP server failed to start; see the log above")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the HTTP server did not start within {timeout_s}s")
            time.sleep(STARTUP_POLL_S)
        logger.info("HTTP API listening on %s", self.url)

    def _run(self) -> None:
        try:
            self._server.run(sockets=[self._socket])
        except BaseException:
            self._failed.set()
            logger.exception("the HTTP server stopped with an error")
            raise
        finally:
            self._socket.close()

    def request_stop(self) -> None:
        """Ask the server to finish in-flight requests and stop (returns at once)."""
        self._server.should_exit = True

    def join(self, timeout_s: float) -> bool:
        """Wait for the server thread; return whether it ended in time."""
        if self._thread is None:
            self._socket.close()
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def stop(self, timeout_s: float) -> bool:
        """Stop and wait; return whether the server ended within ``timeout_s``."""
        self.request_stop()
        return self.join(timeout_s)
