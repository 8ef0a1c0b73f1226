"""The runner's guards around group rejoins under exactly-once: stranded joins, paused
partitions until the takeover, kept records.

The real sequence (a join kafka-python leaves unfinished) runs against Apache Kafka in
``tests/integration/test_group_rejoin.py``; these pin the two decisions on stand-ins.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from consumers.decoding.events import Record
from consumers.engine import Engine
from consumers.kafka_compat import resume_stranded_join
from consumers.runner_commits import _resuming
from learning import BoundTracker, DenseEncoder, LabelMap, Perceptron
from tests.unit.consumers.fakes import FakeConsumer, TopicPartition
from tests.unit.consumers.test_background_commit import (
    EVENTS,
    HeldProducer,
    events_log,
    runner_over,
)
from tests.unit.consumers.test_runner import TIMEOUT_S, wait_until


class _Coordinator:
    """kafka-python's group coordinator, reduced to the join state the runner reads."""

    def __init__(self, *, rejoining: bool, need_rejoin: bool) -> None:
        self.rejoining = rejoining
        self.rejoin_needed = need_rejoin

    def need_rejoin(self) -> bool:
        return self.rejoin_needed

    def request_rejoin(self) -> None:
        self.rejoin_needed = True


class _Client:
    def __init__(self, coordinator: _Coordinator) -> None:
        self._coordinator = coordinator


@pytest.mark.parametrize(
    ("rejoining", "need_rejoin", "stranded"),
    [(True, False, True), (True, True, False), (False, False, False)],
    ids=["join-left-unfinished", "join-under-way", "stable"],
)
def test_a_join_left_unfinished_is_asked_again(
    rejoining: bool, need_rejoin: bool, stranded: bool, caplog: pytest.LogCaptureFixture
) -> None:
    coordinator = _Coordinator(rejoining=rejoining, need_rejoin=need_rejoin)
    caplog.set_level(logging.WARNING, logger="consumers.runner")
    assert resume_stranded_join(_Client(coordinator)) is stranded  # type: ignore[arg-type]
    # The invariant afterwards: a member in the middle of a join has need_rejoin() true.
    assert coordinator.need_rejoin() is (need_rejoin or rejoining)
    warned = [r for r in caplog.records if "left a group join unfinished" in r.getMessage()]
    assert len(warned) == int(stranded)


def test_a_client_without_a_coordinator_is_left_alone() -> None:
    assert resume_stranded_join(object()) is False  # type: ignore[arg-type]


def _engine() -> Engine:
    return Engine(Perceptron(LabelMap({"1": 1, "-1": -1}), encoder=DenseEncoder(1)), BoundTracker())


def _records(partition: int, first: int, count: int) -> list[Record]:
    return [Record("t", partition, first + i, b"{}") for i in range(count)]


def test_only_records_starting_at_the_restored_offset_are_kept() -> None:
    engine = _engine()
    engine.track_partition("t", 0, 5)
    engine.track_partition("t", 1, 5)
    at, past, unknown, revoked = (TopicPartition("t", p) for p in range(4))
    polled = {
        at: _records(0, 5, 3),
        past: _records(1, 8, 3),  # the position moved past records the restore discarded
        unknown: _records(2, 200, 3),  # no committed offset: it may have moved as well
        revoked: _records(3, 0, 3),
    }
    kept = _resuming(engine, polled, {at, past, unknown})
    assert kept == {at: polled[at]}


class _Watched(FakeConsumer):
    """Notes, for every poll that returned records, whether the owner had fenced by then."""

    def __init__(self, producer: HeldProducer) -> None:
        super().__init__({("t", 0): events_log()})
        self._producer = producer
        self.fenced_before: list[bool] = []

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[Any, list[Record]]:
        polled = super().poll(timeout_ms, max_records)
        if polled:
            self.fenced_before.append("init" in self._producer.calls)
        return polled


@pytest.mark.parametrize("pausing", [True, False], ids=["paused-until-restored", "control"])
def test_no_record_is_fetched_before_the_takeover_restored_its_partition(
    pausing: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    producer = HeldProducer()
    producer.gate.set()
    consumer = _Watched(producer)
    if not pausing:
        monkeypatch.setattr(consumer, "pause", lambda *partitions: None)
    runner, engine = runner_over(monkeypatch, tmp_path, producer, consumer)
    runner.start()
    try:
        wait_until(lambda: engine.applied >= EVENTS)
    finally:
        assert runner.stop(timeout=TIMEOUT_S)
    assert engine.snapshot.seen == engine.applied == EVENTS
    if pausing:
        # The first fetch waits for the takeover, and no record is read twice.
        assert consumer.events[0] == "pause t/0"
        assert all(consumer.fenced_before)
        assert consumer.delivered == EVENTS
    else:
        # The first batch, fetched before the restore, is dropped and read again.
        assert consumer.fenced_before[0] is False
        assert consumer.delivered > EVENTS
