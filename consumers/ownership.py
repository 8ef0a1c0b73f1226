"""One owner per group: a kafka-python partition assignor giving every partition to one member.

The model is one state, so one member of the consumer group learns every partition and the others
stand by (:mod:`consumers.transactions`). Ownership sticks: a standby joining never moves the
model, and a member that was replaced while paused (a zombie) cannot take it back by rejoining.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from kafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

logger = logging.getLogger(__name__)

ASSIGNOR_NAME = "novikoff-single-owner"
ASSIGNOR_VERSION = 0
NOT_OWNER = -1
"""The generation a member that owns nothing announces."""
GENERATION_BYTES = 8


class SingleOwnerAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """Every subscribed partition to one member: the current owner, else the first member.

    Each member announces, in its subscription's user data, the generation of its newest
    non-empty assignment (:data:`NOT_OWNER` when it owns nothing). The member announcing the
    highest generation keeps everything, so a standby joining never moves the model, and a
    zombie that was replaced announces an older generation than its successor.
    """

    name = ASSIGNOR_NAME
    version = ASSIGNOR_VERSION

    def __init__(self) -> None:
        self._owned_generation = NOT_OWNER

    def disown(self) -> None:
        """Forget ownership (the partitions were lost or revoked for good)."""
        self._owned_generation = NOT_OWNER

    def metadata(self, topics: Any) -> Any:
        user_data = self._owned_generation.to_bytes(GENERATION_BYTES, "big", signed=True)
        return ConsumerProtocolSubscription(self.version, sorted(topics), user_data)

    def on_assignment(self, assignment: Any, generation: int) -> None:
        self._owned_generation = generation if assignment.partitions() else NOT_OWNER

    def assign(self, cluster: Any, members: Sequence[Any]) -> dict[str, Any]:
        owner = min(members, key=lambda m: (-_announced_generation(m), m.member_id)).member_id
        topics = sorted({topic for member in members for topic in member.metadata.topics})
        owned = []
        for topic in topics:
            partitions = cluster.partitions_for_topic(topic)
            if partitions is None:
                logger.warning("no partition metadata for topic %s", topic)
                continue
            owned.append((topic, sorted(partitions)))
        return {
            member.member_id: ConsumerProtocolAssignment(
                self.version, owned if member.member_id == owner else [], b""
            )
            for member in members
        }


def _announced_generation(member: Any) -> int:
    data = getattr(member.metadata, "user_data", b"") or b""
    if len(data) != GENERATION_BYTES:
        return NOT_OWNER
    return int.from_bytes(data, "big", signed=True)
