"""kafka-python's transactional producer with bounded waits, as the Java client has them.

kafka-python 3.0.12 waits without a limit in ``send_offsets_to_transaction``,
``commit_transaction`` and ``abort_transaction``. When the broker dies while such a request is in
flight, the request can be lost and the caller's thread waits for good (seen: a broker SIGKILL
during a checkpoint's ``send_offsets_to_transaction`` left the consumer thread blocked after the
broker was back). The Java producer bounds these calls by ``max.block.ms`` and throws a timeout;
:class:`BoundedTransactions` does the same with the producer's ``max_block_ms``, raising
:class:`kafka.errors.KafkaTimeoutError`, so the caller aborts, drops the producer and registers a
new one (whose ``init_transactions`` fences the old epoch and aborts what it left open).

A stop bounds them more tightly: :meth:`BoundedTransactions.limit_waits` sets one deadline for
all waits, including one already under way (each wait is made of short slices), so a SIGTERM
while the broker is away ends a checkpoint's transaction within the shutdown's share of time.
kafka-python 3.0.12 has no ``wakeup()`` to interrupt a blocked call; its own ``max_block_ms``
waits (``send``'s metadata and buffer waits, ``init_transactions``) are sliced by setting
``max_block_ms``, which it reads from ``config`` at every call, to one slice and calling again
after each timeout (a timed-out send has appended nothing; a repeated ``init_transactions`` goes on
waiting for the same request).

It reaches the request results through kafka-python's transaction manager, the only place they
are exposed; every other attribute is the wrapped producer's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kafka.errors import KafkaTimeoutError

from consumers.state.follower import MS_PER_S

KAFKA_PYTHON_MAX_BLOCK_MS = 60_000
"""kafka-python's (and the Java client's) default ``max_block_ms``."""
WAIT_SLICE_MS = 100
"""Every wait is made of slices this long: a :meth:`BoundedTransactions.limit_waits` deadline set
from another thread (a SIGTERM) ends a wait already under way within one slice."""


class BoundedTransactions:
    """Wraps a transactional ``KafkaProducer``; each of its waits ends after ``wait_ms``, and
    all of them by the deadline :meth:`limit_waits` sets.

    Invariant: no call of this wrapper waits longer than ``wait_ms``, nor more than one
    :data:`WAIT_SLICE_MS` past the :meth:`limit_waits` deadline, even when that deadline is set
    while the call is waiting.

    Parameters
    ----------
    producer
        A kafka-python ``KafkaProducer`` with a ``transactional_id``.
    wait_ms
        The longest wait for the broker's answer to one request (its ``max_block_ms``).
    clock
        Seconds, monotonic (tests may pass their own).
    """

    def __init__(
        self,
        producer: Any,
        wait_ms: int = KAFKA_PYTHON_MAX_BLOCK_MS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._producer = producer
        self._wait_ms = wait_ms
        self._clock = clock
        self._deadline: float | None = None

    def limit_waits(self, wait_ms: int) -> None:
        """From now on, all waits together end within ``wait_ms`` (a shutdown's share).

        Safe to call from any thread: one deadline, shared by the calls under way and those to
        come (the final transaction's sends, its commit and the abort of a failed one).
        """
        deadline = self._clock() + max(0, wait_ms) / MS_PER_S
        if self._deadline is None or deadline < self._deadline:
            self._deadline = deadline

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)

    def init_transactions(self) -> None:
        """As kafka-python's; a retry after its timeout goes on waiting for the same request."""
        self._in_slices(self._producer.init_transactions, "init_transactions")

    def send(self, *args: Any, **kwargs: Any) -> Any:
        """As kafka-python's, its waits (the topic's metadata, buffer space) bounded.

        A send that times out has appended nothing, so it is tried again, slice by slice.
        """
        return self._in_slices(lambda: self._producer.send(*args, **kwargs), "send")

    def send_offsets_to_transaction(self, offsets: Any, group_metadata: Any) -> None:
        """As kafka-python's, its wait for the coordinator bounded."""
        manager = self._producer._transaction_manager
        self._await(manager.send_offsets_to_transaction(offsets, group_metadata), "send_offsets")

    def commit_transaction(self) -> None:
        """As kafka-python's, its wait for the commit to complete bounded."""
        self._await(self._producer._transaction_manager.begin_commit(), "commit")

    def abort_transaction(self) -> None:
        """As kafka-python's, its wait for the abort to complete bounded."""
        self._await(self._producer._transaction_manager.begin_abort(), "abort")

    def _in_slices(self, call: Callable[[], Any], what: str) -> Any:
        """``call`` with kafka-python's ``max_block_ms`` (read from ``config`` at every call) one
        slice long, again after each timeout until the wait's budget is spent."""
        config = getattr(self._producer, "config", None)
        if not isinstance(config, dict):
            return call()  # not kafka-python's producer: nothing to bound
        own = config["max_block_ms"]
        started = self._clock()
        try:
            while True:
                config["max_block_ms"] = min(self._budget_ms(started), WAIT_SLICE_MS)
                try:
                    return call()
                except KafkaTimeoutError as exc:
                    if self._budget_ms(started) <= 0:
                        raise KafkaTimeoutError(
                            f"{what} not done within {self._waited_ms(started)} ms: {exc}"
                        ) from exc
        finally:
            config["max_block_ms"] = own

    def _await(self, result: Any, what: str) -> None:
        self._producer._sender.wakeup()
        started = self._clock()
        while not result.wait(timeout_ms=min(self._budget_ms(started), WAIT_SLICE_MS)):
            if self._budget_ms(started) <= 0:
                raise KafkaTimeoutError(
                    f"transactional {what} not answered within {self._waited_ms(started)} ms "
                    "(max_block_ms or the shutdown's limit)"
                )

    def _budget_ms(self, started: float) -> int:
        """What is left of a wait begun at ``started``: ``wait_ms``, or less by the deadline."""
        now = self._clock()
        end = started + self._wait_ms / MS_PER_S
        if self._deadline is not None:
            end = min(end, self._deadline)
        return max(0, round((end - now) * MS_PER_S))

    def _waited_ms(self, started: float) -> int:
        return round((self._clock() - started) * MS_PER_S)
