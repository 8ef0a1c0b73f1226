"""The transactional producer of one shard: a round's dead letters, contribution and offset.

Each partition has its own ``transactional.id`` (:func:`shard_transactional_id`), so whoever owns
partition p next fences whoever owned it before (``init_transactions`` aborts a round transaction a
killed owner left open, at once rather than after the transaction timeout). One transaction per
round holds, in this order, the round's dead letters, its contribution and the group offset of p
at the round's end (with the consumer's group metadata, KIP-447): all visible to
``read_committed`` readers together, or none.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kafka import OffsetAndMetadata, TopicPartition

from consumers.decoding.events import Rejection
from consumers.dlq import DeadLetterWriter, ProducerFuture
from consumers.mixing.contribution import Contribution
from consumers.transactions import (
    TRANSACTION_RETRY_BACKOFF_MS,
    TRANSACTIONAL_ID_PREFIX,
    ProducerBuilder,
    TransactionError,
    abort_and_close,
    close_quietly,
    kafka_transactional_producer,
)

logger = logging.getLogger(__name__)

CONTRIBUTION_MAX_REQUEST_BYTES = 16 * 1024 * 1024
"""A contribution holds two weight matrices: larger than a default producer request allows."""
DEAD_LETTER_FLUSH_SECONDS = 10.0
CLOSE_TIMEOUT_S = 5.0


def shard_transactional_id(group: str, topic: str, partition: int) -> str:
    """The ``transactional.id`` of partition ``partition``'s rounds in ``group``.

    >>> shard_transactional_id("g", "events", 3)
    'novikoff-g-events-mix-3'
    """
    return f"{TRANSACTIONAL_ID_PREFIX}-{group}-{topic}-mix-{partition}"


class _InTransaction:
    """The dead-letter writer's view of the open transaction (the shard producer owns it)."""

    def __init__(self, producer: Any) -> None:
        self._producer = producer

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> ProducerFuture:
        future: ProducerFuture = self._producer.send(topic, value=value, key=key, headers=headers)
        return future

    def flush(self, timeout: float | None = None) -> None:
        self._producer.flush(timeout=timeout)

    def close(self, timeout: float | None = None) -> None:
        """Nothing: the shard producer outlives the writer."""


class ShardProducer:
    """Commits a shard's rounds, one transaction each.

    Parameters
    ----------
    config
        Connection and security options of the producer.
    transactional_id
        :func:`shard_transactional_id`.
    build
        Makes the kafka-python producer (tests may pass their own).
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        transactional_id: str,
        build: ProducerBuilder = kafka_transactional_producer,
    ) -> None:
        self._config = {
            **config,
            "acks": "all",
            "max_request_size": CONTRIBUTION_MAX_REQUEST_BYTES,
            "transactional_id": transactional_id,
            "retry_backoff_ms": TRANSACTION_RETRY_BACKOFF_MS,
        }
        self._build = build
        self._producer: Any = None

    @property
    def active(self) -> bool:
        """Whether :meth:`activate` succeeded and nothing failed since."""
        return self._producer is not None

    def activate(self) -> None:
        """A new producer registered with ``init_transactions``: fences the previous owner."""
        self.close(timeout=0)
        producer = self._build(self._config)
        try:
            producer.init_transactions()
        except BaseException:
            producer.close(timeout=0)
            raise
        self._producer = producer

    def commit_round(
        self,
        contribution: Contribution,
        rejections: Sequence[Rejection],
        *,
        contributions_topic: str,
        dlq_topic: str | None,
        offsets: Mapping[tuple[str, int], int],
        group_metadata: Any,
    ) -> None:
        """Dead letters, contribution and offsets in one transaction.

        Raises
        ------
        TransactionError
            When anything failed; the transaction is aborted and the producer dropped.
        """
        producer = self._producer
        if producer is None:
            raise TransactionError("the shard producer is not active")
        try:
            producer.begin_transaction()
            if rejections:
                DeadLetterWriter(
                    lambda: _InTransaction(producer),
                    dlq_topic,
                    flush_timeout_seconds=DEAD_LETTER_FLUSH_SECONDS,
                ).write(rejections)
            producer.send(contributions_topic, value=contribution.encode(), key=contribution.key)
            producer.send_offsets_to_transaction(
                {
                    TopicPartition(topic, partition): OffsetAndMetadata(offset, "", -1)
                    for (topic, partition), offset in offsets.items()
                },
                group_metadata,
            )
            producer.commit_transaction()
        except Exception as exc:
            self.abort()
            raise TransactionError(f"round not committed: {exc!r}") from exc

    def abort(self) -> None:
        """Abort the open transaction if possible and drop the producer."""
        producer, self._producer = self._producer, None
        if producer is not None:
            abort_and_close(producer)

    def close(self, timeout: float | None = CLOSE_TIMEOUT_S) -> None:
        """Close the producer (a transaction left open is aborted by the next owner)."""
        producer, self._producer = self._producer, None
        if producer is not None:
            close_quietly(producer, timeout)
