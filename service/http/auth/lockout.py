"""Per-client-address lockout after repeated wrong tokens, in bounded memory."""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class _Client:
    failures: deque[float] = field(default_factory=deque)
    locked_until: float = float("-inf")


class FailureLimiter:
    """Locks out a client address that fails ``limit`` times within ``window_s``.

    Invariants: a client holds at most ``limit`` failure times, all within the window; the
    table holds at most ``max_clients`` addresses, the least recently failing one evicted first
    (so its memory is bounded whatever the number of addresses seen).

    Parameters
    ----------
    limit
        Failures within the window that trigger a lockout.
    window_s
        The sliding window, in seconds.
    lockout_s
        How long a locked-out address is refused.
    max_clients
        Most addresses tracked at once.
    clock
        Monotonic seconds.

    Examples
    --------
    >>> now = [0.0]
    >>> limiter = FailureLimiter(2, 60.0, 30.0, 100, clock=lambda: now[0])
    >>> limiter.record_failure("10.0.0.1"), limiter.record_failure("10.0.0.1")
    (False, True)
    >>> limiter.retry_after("10.0.0.1")
    30.0
    >>> now[0] = 30.0
    >>> limiter.retry_after("10.0.0.1")
    """

    def __init__(
        self,
        limit: int,
        window_s: float,
        lockout_s: float,
        max_clients: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.window_s = window_s
        self.lockout_s = lockout_s
        self.max_clients = max_clients
        self._clock = clock
        self._clients: OrderedDict[str, _Client] = OrderedDict()

    def __len__(self) -> int:
        return len(self._clients)

    def retry_after(self, address: str) -> float | None:
        """Seconds until ``address`` may try again, or None when it is not locked out."""
        client = self._clients.get(address)
        if client is None:
            return None
        remaining = client.locked_until - self._clock()
        return remaining if remaining > 0 else None

    def record_failure(self, address: str) -> bool:
        """Count a wrong token from ``address``; return whether this locked it out."""
        now = self._clock()
        client = self._clients.pop(address, None) or _Client()
        self._clients[address] = client
        while len(self._clients) > self.max_clients:
            self._clients.popitem(last=False)
        failures = client.failures
        failures.append(now)
        while failures and failures[0] <= now - self.window_s:
            failures.popleft()
        if len(failures) < self.limit:
            return False
        failures.clear()
        client.locked_until = now + self.lockout_s
        return True
