"""kafka-python's transactional producer with bounded waits, as the Java client has them.

kafka-python 3.0.12 waits without a limit in ``send_offsets_to_transaction``,
``commit_transaction`` and ``abort_transaction``. When the broker dies while such a request is in
flight, the request can be lost and the caller's thread waits for good (seen: a broker SIGKILL
during a checkpoint's ``send_offsets_to_transaction`` left the consumer thread blocked after the
broker was back). The Java producer bounds these calls by ``max.block.ms`` and throws a timeout;
:class:`BoundedTransactions` does the same with the producer's ``max_block_ms``, raising
:class:`kafka.errors.KafkaTimeoutError`, so the caller aborts, drops the producer and registers a
new one (whose ``init_transactions`` fences the old epoch and aborts what it left open).

It reaches the request results through kafka-python's transaction manager, the only place they
are exposed; every other attribute is the wrapped producer's.
"""

from __future__ import annotations

from typing import Any

from kafka.errors import KafkaTimeoutError

KAFKA_PYTHON_MAX_BLOCK_MS = 60_000
"""kafka-python's (and the Java client's) default ``max_block_ms``."""


class BoundedTransactions:
    """Wraps a transactional ``KafkaProducer``; its three unbounded waits end after ``wait_ms``.

    Parameters
    ----------
    producer
        A kafka-python ``KafkaProducer`` with a ``transactional_id``.
    wait_ms
        The longest wait for the broker's answer to one transactional request.
    """

    def __init__(self, producer: Any, wait_ms: int = KAFKA_PYTHON_MAX_BLOCK_MS) -> None:
        self._producer = producer
        self._wait_ms = wait_ms

    def limit_waits(self, wait_ms: int) -> None:
        """Wait at most ``wait_ms`` from now on (a shutdown's remaining time)."""
        self._wait_ms = max(0, min(self._wait_ms, wait_ms))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)

    def send_offsets_to_transaction(self, offsets: Any, group_metadata: Any) -> None:
        """As kafka-python's, waiting at most ``wait_ms`` for the coordinator."""
        manager = self._producer._transaction_manager
        self._await(manager.send_offsets_to_transaction(offsets, group_metadata), "send_offsets")

    def commit_transaction(self) -> None:
        """As kafka-python's, waiting at most ``wait_ms`` for the commit to complete."""
        self._await(self._producer._transaction_manager.begin_commit(), "commit")

    def abort_transaction(self) -> None:
        """As kafka-python's, waiting at most ``wait_ms`` for the abort to complete."""
        self._await(self._producer._transaction_manager.begin_abort(), "abort")

    def _await(self, result: Any, what: str) -> None:
        self._producer._sender.wakeup()
        if not result.wait(timeout_ms=self._wait_ms):
            raise KafkaTimeoutError(
                f"transactional {what} not answered within {self._wait_ms} ms (max_block_ms)"
            )
