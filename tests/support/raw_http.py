"""HTTP/1.1 requests written by hand on a socket, and the memory of the process answering them.

What a client library hides is the point here: how many body bytes the client had sent when the
answer came, and the server's peak resident memory (``VmHWM``) while it refused a body.
"""

from __future__ import annotations

import select
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

RESET_PEAK_RSS = "5"
"""Written to ``/proc/PID/clear_refs``: resets ``VmHWM`` to the current resident size."""
RECV_BYTES = 65_536
RAW_TIMEOUT_S = 10.0
LAST_PAYLOAD = b""
"""The empty chunk ends a chunked body."""


def rss_bytes(pid: int, field_name: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field_name}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field_name}")


def reset_peak_rss(pid: int) -> None:
    """Set the process's peak resident size (``VmHWM``) to its current one (proc(5), clear_refs)."""
    Path(f"/proc/{pid}/clear_refs").write_text(RESET_PEAK_RSS)


def transient_buffer_shows_in_peak_rss(size: int) -> bool:
    """The control of the memory measure: in a fresh process, a buffer of ``size`` bytes that is
    filled and freed again raises the peak resident size (reset just before, as for the service)
    by at least half of ``size``. A fresh process, because the test process's allocator may
    serve the buffer from memory it already holds resident; a 4 MB bound on a 50 MB body needs
    far less than half to be meaningful."""
    script = (
        "import os, sys\n"
        "from tests.support.raw_http import reset_peak_rss, rss_bytes\n"
        "pid = os.getpid()\n"
        "reset_peak_rss(pid)\n"
        "baseline = rss_bytes(pid, 'VmHWM')\n"
        f"buffer = bytearray({size})\n"
        f"buffer[:] = b'x' * {size}\n"
        "del buffer\n"
        "print(rss_bytes(pid, 'VmHWM') - baseline)\n"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, check=True
    )
    return int(result.stdout.strip()) >= size // 2


@dataclass
class RawExchange:
    """One request written by hand: how many body bytes the client sent, and the answer."""

    body_bytes_sent: int
    answer: bytes

    @property
    def status_line(self) -> bytes:
        return self.answer.split(b"\r\n", 1)[0]


def read_head(sock: socket.socket) -> bytes:
    """Read until the end of the response head (or until the server hangs up)."""
    answer = b""
    try:
        while b"\r\n\r\n" not in answer:
            data = sock.recv(RECV_BYTES)
            if not data:
                break
            answer += data
    except OSError:
        pass
    return answer


def flood(port: int, head: bytes, pieces: Iterator[bytes]) -> RawExchange:
    """Send ``head`` then ``pieces`` until the server answers or hangs up; count what was sent.

    The client keeps pushing body bytes while no answer is readable, so the server has every
    chance to read (and buffer) the body: this is the memory test's load.
    """
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=RAW_TIMEOUT_S) as sock:
        sock.sendall(head)
        for piece in pieces:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                break
            try:
                sock.sendall(piece)
            except OSError:
                break
            sent += len(piece)
        return RawExchange(sent, read_head(sock))


def send_then_wait(
    port: int, head: bytes, payloads: list[bytes], wire: Callable[[bytes], bytes] = bytes
) -> RawExchange:
    """Send ``head`` and exactly ``payloads`` (each framed by ``wire``), then nothing more, and
    wait for the answer; ``body_bytes_sent`` counts the payload bytes.

    Unless ``payloads`` completes the request, it stays incomplete (no final chunk, or fewer bytes
    than the declared length), so an answer can only have been decided on what was sent.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=RAW_TIMEOUT_S) as sock:
        sock.sendall(head)
        for payload in payloads:
            sock.sendall(wire(payload))
        return RawExchange(sum(len(p) for p in payloads), read_head(sock))


def chunk(payload: bytes) -> bytes:
    """``payload`` framed as one chunk of a chunked body."""
    return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"


def chunked(total: int, size: int) -> Iterator[bytes]:
    """A chunked body of ``total`` spaces in chunks of ``size`` bytes, final chunk included."""
    for _ in range(total // size):
        yield chunk(b" " * size)
    yield chunk(LAST_PAYLOAD)


POST_HEAD = b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
CHUNKED_HEAD = POST_HEAD + b"Transfer-Encoding: chunked\r\n\r\n"


def declared_head(length: int) -> bytes:
    return POST_HEAD + f"Content-Length: {length}\r\n\r\n".encode()
