"""The owner's transactional producer: dead letters and state records in one transaction.

:class:`TransactionalProducer` is the dead-letter writer's producer and the checkpoint's: the
first send after a commit begins the next transaction, :meth:`~TransactionalProducer.commit`
adds the state record and the group's offsets and commits, and any failure aborts and drops the
producer (:class:`TransactionError`): it must be registered again
(:meth:`~TransactionalProducer.activate`, whose ``init_transactions`` fences every
predecessor). Its waits are bounded (:mod:`consumers.transactional_client`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from kafka import KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.errors import MessageSizeTooLargeError
from kafka.record.default_records import DefaultRecordBatchBuilder

from consumers.dlq import ProducerFuture
from consumers.state.chunks import DEFAULT_MAX_RECORD_BYTES, split_state_value
from consumers.state.follower import MS_PER_S
from consumers.state.topic import encode_state_record
from consumers.transactional_client import KAFKA_PYTHON_MAX_BLOCK_MS, BoundedTransactions

logger = logging.getLogger(__name__)

ABORT_TIMEOUT_S = 5.0
DEAD_LETTER_MAX_BYTES = 1_048_576
"""kafka-python's default ``max_request_size``: dead letters are bounded as a default producer
bounds them (client side, before anything joins the transaction), while state records may be up
to :data:`consumers.state.topic.STATE_RECORD_MAX_BYTES`."""


class TransactionError(RuntimeError):
    """A transaction could not be committed; everything since the last commit is discarded."""


ProducerBuilder = Callable[[Mapping[str, Any]], Any]


def kafka_transactional_producer(config: Mapping[str, Any]) -> Any:
    """A kafka-python producer with the given (transactional) configuration, its transactional
    waits bounded by ``max_block_ms`` (see :mod:`consumers.transactional_client`)."""
    wait_ms = int(config.get("max_block_ms", KAFKA_PYTHON_MAX_BLOCK_MS))
    return BoundedTransactions(KafkaProducer(**config), wait_ms)


class TransactionalProducer:
    """The owner's transactional producer: dead letters and state records, one transaction.

    It is the dead-letter writer's producer too (``send``/``flush``; ``close`` is left to
    the runner, which owns it): the first send after a commit begins the next transaction.

    Parameters
    ----------
    config
        ``KafkaProducer`` keyword arguments (connection, ``transactional_id``, timeouts).
    build
        Makes the producer (kafka-python by default; tests may pass their own).
    """

    def __init__(
        self, config: Mapping[str, Any], build: ProducerBuilder = kafka_transactional_producer
    ) -> None:
        self._config = dict(config)
        self._build = build
        self._producer: Any = None
        self._open = False
        self._deadline: float | None = None

    @property
    def transactional_id(self) -> str:
        return str(self._config["transactional_id"])

    @property
    def active(self) -> bool:
        """Whether :meth:`activate` succeeded and nothing failed since."""
        return self._producer is not None

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open (something was sent since the last commit)."""
        return self._open

    def activate(self) -> None:
        """A new producer, registered with ``init_transactions``: fences every predecessor.

        The broker aborts any transaction a previous producer of this ``transactional_id`` left
        open, so its records never become visible.
        """
        self.close()
        producer = self._build(self._config)
        self._limit(producer)
        try:
            producer.init_transactions()
        except BaseException:
            producer.close(timeout=0)
            raise
        self._producer = producer
        logger.info("transactional producer %s registered", self.transactional_id)

    def begin(self) -> None:
        """Begin a transaction unless one is open."""
        if self._producer is None:
            raise TransactionError("the transactional producer is not active")
        if not self._open:
            self._producer.begin_transaction()
            self._open = True

    # Producer protocol (consumers.dlq): dead letters join the open transaction.
    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> ProducerFuture:
        size = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, headers or [])
        if size > DEAD_LETTER_MAX_BYTES:
            # Refused here, as a default producer refuses it, so the open transaction is not
            # failed by the broker; the dead-letter writer then sends a truncated copy.
            raise MessageSizeTooLargeError(
                f"The message is {size} bytes when serialized which is larger than the "
                f"{DEAD_LETTER_MAX_BYTES} bytes a dead letter may have"
            )
        self.begin()
        future: ProducerFuture = self._producer.send(topic, value=value, key=key, headers=headers)
        return future

    def flush(self, timeout: float | None = None) -> None:
        if self._producer is not None:
            self._producer.flush(timeout=timeout)

    def limit_waits(self, wait_ms: int) -> None:
        """End every wait of this producer, and of any it registers later, within ``wait_ms``
        (a shutdown's share; callable from any thread)."""
        deadline = time.monotonic() + wait_ms / MS_PER_S
        if self._deadline is None or deadline < self._deadline:
            self._deadline = deadline
        self._limit(self._producer)

    def _limit(self, producer: Any) -> None:
        """Hand the :meth:`limit_waits` deadline, if any, to ``producer``."""
        limit = getattr(producer, "limit_waits", None)
        if self._deadline is not None and limit is not None:
            limit(max(0, int((self._deadline - time.monotonic()) * MS_PER_S)))

    def commit(
        self,
        state_topic: str,
        *,
        key: bytes,
        payload: bytes,
        sequence: int,
        offsets: Mapping[tuple[str, int], int],
        group_metadata: Any,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    ) -> None:
        """Send the state record and the offsets, then commit the open transaction.

        Raises
        ------
        TransactionError
            When anything fails (fenced by a newer owner, broker away...): the transaction is
            aborted when that is still possible, and the producer must be activated again.
        """

        def records() -> Iterator[tuple[str, bytes, bytes]]:
            value = encode_state_record(payload, sequence)
            for record_key, record in split_state_value(key, value, max_record_bytes):
                yield state_topic, record_key, record

        self.commit_records(records(), offsets, group_metadata)

    def commit_records(
        self,
        records: Iterable[tuple[str, bytes | None, bytes]],
        offsets: Mapping[tuple[str, int], int],
        group_metadata: Any,
    ) -> None:
        """Send ``records`` (topic, key, value) and the offsets, then commit the open transaction.

        Raises
        ------
        TransactionError
            As :meth:`commit`.
        """
        try:
            self.begin()
            for topic, record_key, value in records:
                self._producer.send(topic, value=value, key=record_key)
            if offsets:
                self._producer.send_offsets_to_transaction(
                    {
                        TopicPartition(topic, partition): OffsetAndMetadata(offset, "", -1)
                        for (topic, partition), offset in offsets.items()
                    },
                    group_metadata,
                )
            self._producer.commit_transaction()
        except Exception as exc:
            self.abort()
            raise TransactionError(f"transaction not committed: {exc!r}") from exc
        self._open = False

    def abort(self) -> None:
        """Abort the open transaction if the producer still can, then drop the producer."""
        producer, self._producer = self._producer, None
        was_open, self._open = self._open, False
        if producer is None:
            return
        abort_and_close(producer, was_open)

    def close(self, timeout: float | None = None) -> None:
        """Close the producer (an open transaction is aborted by the broker or a successor)."""
        producer, self._producer = self._producer, None
        self._open = False
        if producer is not None:
            close_quietly(producer, timeout if timeout is not None else ABORT_TIMEOUT_S)


def abort_and_close(producer: Any, in_transaction: bool = True) -> None:
    """Abort ``producer``'s open transaction when it still can, then close it at once.

    A fenced producer cannot abort; its successor's ``init_transactions`` already did, and a
    producer that cannot reach the broker leaves the transaction to time out there.
    """
    if in_transaction:
        try:
            producer.abort_transaction()
        except Exception as exc:
            logger.warning("transaction not aborted by this producer: %r", exc)
    close_quietly(producer, 0)


def close_quietly(producer: Any, timeout: float | None) -> None:
    """Close a transactional producer, logging (not raising) a failure to close cleanly."""
    try:
        producer.close(timeout=timeout)
    except Exception as exc:
        logger.warning("transactional producer did not close cleanly: %r", exc)
