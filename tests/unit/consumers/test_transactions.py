"""The owner's pieces without a broker: the single-owner assignor and the transactional producer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from kafka.errors import MessageSizeTooLargeError, ProducerFencedError

from consumers.ownership import NOT_OWNER, SingleOwnerAssignor
from consumers.state.topic import decode_state_record
from consumers.transactional_producer import (
    DEAD_LETTER_MAX_BYTES,
    TransactionalProducer,
    TransactionError,
)

TOPIC = "events"


@dataclass
class Member:
    member_id: str
    metadata: Any


class Cluster:
    def __init__(self, partitions: int) -> None:
        self._partitions = set(range(partitions))

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self._partitions if topic == TOPIC else None


def member(member_id: str, generation: int) -> Member:
    assignor = SingleOwnerAssignor()
    if generation != NOT_OWNER:
        assignor.on_assignment(Assigned([(TOPIC, [0])]), generation)
    return Member(member_id, assignor.metadata({TOPIC}))


@dataclass
class Assigned:
    owned: list[tuple[str, list[int]]]

    def partitions(self) -> list[tuple[str, int]]:
        return [(topic, p) for topic, parts in self.owned for p in parts]


def owners(assignment: dict[str, Any]) -> dict[str, list[Any]]:
    return {m: list(a.assigned_partitions) for m, a in assignment.items()}


def test_every_partition_goes_to_the_member_owning_the_newest_generation() -> None:
    members = [member("a", 3), member("b", 7), member("c", NOT_OWNER)]
    assigned = owners(SingleOwnerAssignor().assign(Cluster(3), members))
    assert assigned == {"a": [], "b": [(TOPIC, [0, 1, 2])], "c": []}


def test_without_an_owner_the_first_member_id_gets_everything() -> None:
    members = [member("b", NOT_OWNER), member("a", NOT_OWNER)]
    assigned = owners(SingleOwnerAssignor().assign(Cluster(2), members))
    assert assigned == {"a": [(TOPIC, [0, 1])], "b": []}


def test_a_disowned_member_announces_nothing() -> None:
    assignor = SingleOwnerAssignor()
    assignor.on_assignment(Assigned([(TOPIC, [0])]), 9)
    assignor.disown()
    members = [Member("a", assignor.metadata({TOPIC})), member("b", 2)]
    assigned = owners(SingleOwnerAssignor().assign(Cluster(1), members))
    assert assigned == {"a": [], "b": [(TOPIC, [0])]}


@dataclass
class FakeProducer:
    fail_commit: bool = False
    calls: list[str] = field(default_factory=list)
    sent: list[tuple[str, bytes | None, bytes | None]] = field(default_factory=list)
    offsets: dict[Any, Any] = field(default_factory=dict)

    def init_transactions(self) -> None:
        self.calls.append("init")

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, **_: Any
    ) -> Any:
        self.sent.append((topic, key, value))
        return None

    def flush(self, timeout: float | None = None) -> None:
        self.calls.append("flush")

    def send_offsets_to_transaction(self, offsets: dict[Any, Any], metadata: Any) -> None:
        self.offsets.update(offsets)

    def commit_transaction(self) -> None:
        if self.fail_commit:
            raise ProducerFencedError()
        self.calls.append("commit")

    def abort_transaction(self) -> None:
        self.calls.append("abort")

    def close(self, timeout: float | None = None) -> None:
        self.calls.append("close")


def producer(fake: FakeProducer) -> TransactionalProducer:
    made = TransactionalProducer({"transactional_id": "t"}, lambda config: fake)
    made.activate()
    return made


def commit(made: TransactionalProducer) -> None:
    made.commit(
        "events.state",
        key=b"k",
        payload=b"state",
        sequence=4,
        offsets={(TOPIC, 0): 12},
        group_metadata=None,
    )


def test_dead_letters_state_and_offsets_commit_in_one_transaction() -> None:
    fake = FakeProducer()
    made = producer(fake)
    made.send("events.dlq", value=b"bad", key=b"id")
    assert made.in_transaction
    commit(made)
    assert fake.calls == ["init", "begin", "commit"]
    assert [topic for topic, _, _ in fake.sent] == ["events.dlq", "events.state"]
    assert decode_state_record(fake.sent[-1][2]) == b"state"
    assert [(tp.topic, tp.partition, om.offset) for tp, om in fake.offsets.items()] == [
        (TOPIC, 0, 12)
    ]
    assert not made.in_transaction


def test_a_failed_commit_aborts_and_raises() -> None:
    fake = FakeProducer(fail_commit=True)
    made = producer(fake)
    made.send("events.dlq", value=b"bad", key=b"id")
    with pytest.raises(TransactionError, match="ProducerFenced"):
        commit(made)
    assert fake.calls[-2:] == ["abort", "close"]
    with pytest.raises(TransactionError, match="not active"):
        made.begin()


def test_an_oversized_dead_letter_is_refused_before_it_joins_the_transaction() -> None:
    fake = FakeProducer()
    made = producer(fake)
    made.send("events.dlq", value=b"x" * (DEAD_LETTER_MAX_BYTES // 2))  # control: accepted
    fake.sent.clear()
    with pytest.raises(MessageSizeTooLargeError):
        made.send("events.dlq", value=b"x" * DEAD_LETTER_MAX_BYTES)
    assert fake.sent == []
