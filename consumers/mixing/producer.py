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

from consumers.decoding.events import Rejection
from consumers.dlq import DeadLetterWriter
from consumers.mixing.contribution import Contribution
from consumers.transactional_producer import (
    ProducerBuilder,
    TransactionalProducer,
    TransactionError,
    kafka_transactional_producer,
)
from consumers.transactions import TRANSACTION_RETRY_BACKOFF_MS, TRANSACTIONAL_ID_PREFIX

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
        self._transactions = TransactionalProducer(
            {
                **config,
                "acks": "all",
                "max_request_size": CONTRIBUTION_MAX_REQUEST_BYTES,
                "transactional_id": transactional_id,
                "retry_backoff_ms": TRANSACTION_RETRY_BACKOFF_MS,
            },
            build,
        )

    @property
    def active(self) -> bool:
        """Whether :meth:`activate` succeeded and nothing failed since."""
        return self._transactions.active

    def activate(self) -> None:
        """A new producer registered with ``init_transactions``: fences the previous owner."""
        self.close(timeout=0)
        self._transactions.activate()

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
        transactions = self._transactions
        if not transactions.active:
            raise TransactionError("the shard producer is not active")
        if rejections:
            # The writer's producer is the shard's: its dead letters join the open transaction.
            try:
                DeadLetterWriter(
                    lambda: transactions,
                    dlq_topic,
                    flush_timeout_seconds=DEAD_LETTER_FLUSH_SECONDS,
                ).write(rejections)
            except Exception as exc:
                transactions.abort()
                raise TransactionError(f"round not committed: {exc!r}") from exc
        transactions.commit_records(
            [(contributions_topic, contribution.key, contribution.encode())],
            offsets,
            group_metadata,
        )

    def abort(self) -> None:
        """Abort the open transaction if possible and drop the producer."""
        self._transactions.abort()

    def close(self, timeout: float | None = CLOSE_TIMEOUT_S) -> None:
        """Close the producer (a transaction left open is aborted by the next owner)."""
        self._transactions.close(timeout)
