"""Loopback ports and broker processes: what every broker kind needs to start and stop."""

from __future__ import annotations

import socket
import subprocess
import time

LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 15.0
CONNECT_TIMEOUT_S = 0.5
PORT_POLL_S = 0.05


def free_port() -> int:
    """A loopback TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def accepts(host: str, port: int) -> bool:
    """Whether something accepts a TCP connection on ``host:port`` right now."""
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return True
    except OSError:
        return False


def wait_for_port(host: str, port: int, timeout_s: float = START_TIMEOUT_S) -> None:
    """Return once something accepts connections on ``host:port``; ``TimeoutError`` otherwise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if accepts(host, port):
            return
        time.sleep(PORT_POLL_S)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout_s}s")


def terminate_process(proc: subprocess.Popen[bytes], timeout_s: float) -> int:
    """SIGTERM ``proc``, SIGKILL it if it has not exited within ``timeout_s``; its exit code."""
    proc.terminate()
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()
