"""The runner's ordering guarantees with in-memory clients (the broker tests are integration)."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from consumers.decoding.events import Record
from consumers.engine import Engine
from consumers.kafka_clients import RunnerSettings
from consumers.runner import ConsumerRunner
from consumers.runner_health import _disconnection_reason
from consumers.state.checkpoint import CheckpointStore
from learning import BoundTracker, DenseEncoder, LabelMap, Perceptron
from tests.unit.consumers.fakes import FakeConsumer, FakeProducer

TIMEOUT_S = 10.0


def ev(x: float, label: int) -> bytes:
    return orjson.dumps({"features": [x], "label": label})


def new_engine() -> Engine:
    return Engine(Perceptron(LabelMap({"1": 1, "-1": -1}), encoder=DenseEncoder(1)), BoundTracker())


def settings(**overrides: Any) -> RunnerSettings:
    values: dict[str, Any] = {
        "topic": "t",
        "consumer_config": {
            "bootstrap_servers": "fake:9092",
            "group_id": "g",
            "max_poll_records": 50,
        },
        "poll_timeout_ms": 10,
        "checkpoint_every_events": 100,
        "checkpoint_every_seconds": 3600.0,
        "backoff_seconds": 0.05,
        "backoff_max_seconds": 0.2,
        **overrides,
    }
    return RunnerSettings(**values)


def wait_until(condition: Any) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


class SpyStore(CheckpointStore):
    """Records saves in the consumer's event log, to check commits come after them."""

    def __init__(self, directory: Path, events: list[str]) -> None:
        super().__init__(directory)
        self.events = events

    def save(self, payload: bytes) -> Any:
        info = super().save(payload)
        self.events.append("save")
        return info


def start(
    engine: Engine,
    store: CheckpointStore,
    consumer: FakeConsumer,
    producer: FakeProducer | None = None,
    **overrides: Any,
) -> ConsumerRunner:
    runner = ConsumerRunner(
        engine,
        store,
        settings(**overrides),
        consumer_factory=lambda s: consumer,
        producer_factory=lambda s: producer or FakeProducer(),
    )
    runner.start()
    return runner


def test_learns_checkpoints_then_commits_and_stops_cleanly(tmp_path: Path) -> None:
    log = [ev(0.5, 1), b"junk", *[ev(float(i % 7) - 3, 1 if i % 2 else -1) for i in range(248)]]
    consumer = FakeConsumer({("t", 0): log})
    store = SpyStore(tmp_path, consumer.events)
    engine = new_engine()
    producer = FakeProducer()
    runner = start(engine, store, consumer, producer)
    wait_until(lambda: engine.next_offset("t", 0) == len(log))
    assert runner.connected and runner.not_ready_reason is None
    assert runner.stop(timeout=TIMEOUT_S)
    assert consumer.closed
    assert consumer.metadata_before_join == ["t"], "topic metadata between subscribe and join"
    assert consumer.events[0] == "beginning t/0"
    # every commit follows a save, and commits exactly the saved offsets
    for i, event in enumerate(consumer.events):
        if event.startswith("commit"):
            assert "save" in consumer.events[:i]
    assert consumer.commits[-1] == {("t", 0): len(log)}
    restored = new_engine()
    restored.restore(CheckpointStore(tmp_path))
    assert restored.next_offset("t", 0) == len(log)
    assert restored.snapshot.seen == len(log) - 1
    assert [sent["value"] for sent in producer.sent] == [b"junk"]


def test_periodic_commits_do_not_wait_and_the_last_one_does(tmp_path: Path) -> None:
    log = [ev(float(i % 5) - 2, 1 if i % 3 else -1) for i in range(250)]
    consumer = FakeConsumer({("t", 0): log})
    store = SpyStore(tmp_path, consumer.events)
    engine = new_engine()
    runner = start(engine, store, consumer)
    wait_until(lambda: engine.next_offset("t", 0) == len(log))
    assert runner.stop(timeout=TIMEOUT_S)
    # Checkpoints every 100 events commit asynchronously; the shutdown's commit waits.
    commits = [event for event in consumer.events if event.startswith("commit")]
    assert commits == ["commit_async", "commit_async", "commit"]
    assert [commit[("t", 0)] for commit in consumer.commits] == [100, 200, 250]
    for i, event in enumerate(consumer.events):
        if event.startswith("commit"):
            assert consumer.events[i - 1] == "save", consumer.events


def test_assignment_seeks_to_the_checkpointed_offset(tmp_path: Path) -> None:
    log = [ev(1.0, 1)] * 30
    store = CheckpointStore(tmp_path)
    first = new_engine()
    first.apply(first.decoder.decode_batch([Record("t", 0, i, v) for i, v in enumerate(log[:12])]))
    first.checkpoint(store)
    engine = new_engine()
    engine.restore(store)
    consumer = FakeConsumer({("t", 0): log})
    runner = start(engine, store, consumer)
    wait_until(lambda: engine.next_offset("t", 0) == 30)
    assert runner.stop(timeout=TIMEOUT_S)
    assert consumer.events[0] == "seek t/0@12"
    assert engine.snapshot.partitions[0].applied == ((0, 30),)
    assert engine.snapshot.seen == 30


def test_a_failed_dead_letter_write_holds_the_offset(tmp_path: Path) -> None:
    log = [ev(1.0, 1), ev(2.0, -1), b"poison", ev(3.0, 1), ev(4.0, -1)]
    healthy = threading.Event()
    producer = FakeProducer(
        fail=lambda topic, value: None if healthy.is_set() else ConnectionError("dlq down")
    )
    consumer = FakeConsumer({("t", 0): log})
    engine = new_engine()
    runner = start(engine, CheckpointStore(tmp_path), consumer, producer)
    wait_until(lambda: "seek t/0@2" in consumer.events)
    assert engine.next_offset("t", 0) == 2
    wait_until(lambda: engine.snapshot.seen == 2)  # published after the offsets advance
    assert not runner.connected and "dead-letter" in (runner.not_ready_reason or "")
    healthy.set()
    wait_until(lambda: engine.next_offset("t", 0) == 5)
    wait_until(lambda: engine.snapshot.partitions[0].applied == ((0, 5),))
    assert engine.snapshot.seen == 4
    assert [sent["value"] for sent in producer.sent] == [b"poison"]
    assert runner.stop(timeout=TIMEOUT_S)


def test_unreachable_broker_backs_off_and_reports(tmp_path: Path) -> None:
    attempts: list[float] = []

    def broken(s: RunnerSettings) -> FakeConsumer:
        attempts.append(time.monotonic())
        raise ConnectionError("NoBrokersAvailable")

    runner = ConsumerRunner(
        new_engine(), CheckpointStore(tmp_path), settings(), consumer_factory=broken
    )
    runner.start()
    time.sleep(1.0)
    assert not runner.connected
    assert "cannot reach Kafka" in (runner.not_ready_reason or "")
    assert runner.running
    assert 2 <= len(attempts) <= 12  # 0.05 s doubling up to 0.2 s: no busy loop
    assert runner.stop(timeout=TIMEOUT_S)


def test_settings_validation() -> None:
    with pytest.raises(ValueError, match="group_id"):
        RunnerSettings(topic="t", consumer_config={"bootstrap_servers": "x"})
    with pytest.raises(ValueError, match="positive"):
        settings(poll_timeout_ms=0)
    with pytest.raises(ValueError, match="auto_offset_reset"):
        settings(
            consumer_config={"bootstrap_servers": "x", "group_id": "g", "auto_offset_reset": "none"}
        )
    config = settings(
        consumer_config={
            "bootstrap_servers": "x",
            "group_id": "g",
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": "u",
            "sasl_plain_password": "p",
            "enable_auto_commit": True,
        }
    )
    assert config.kafka_consumer_config()["enable_auto_commit"] is False
    assert config.kafka_consumer_config()["auto_offset_reset"] == "earliest"
    producer = config.kafka_producer_config()
    assert producer["security_protocol"] == "SASL_SSL" and producer["sasl_plain_password"] == "p"
    assert producer["acks"] == "all" and "group_id" not in producer


class _Coordinator:
    def __init__(self, *, known: bool, generation: object | None) -> None:
        self._known = known
        self._generation = generation

    def coordinator_unknown(self) -> bool:
        return not self._known

    def generation_if_stable(self) -> object | None:
        return self._generation


class _ClientWithCoordinator:
    def __init__(self, coordinator: _Coordinator) -> None:
        self._coordinator = coordinator


@pytest.mark.parametrize(
    ("known", "generation", "expected"),
    [
        (False, None, "the group coordinator is unreachable (broker down or restarting?)"),
        (True, None, "joining the consumer group (rebalance in progress)"),
        (True, object(), None),
    ],
)
def test_readiness_needs_a_reachable_coordinator_and_a_stable_group(
    known: bool, generation: object | None, expected: str | None
) -> None:
    client = _ClientWithCoordinator(_Coordinator(known=known, generation=generation))
    assert _disconnection_reason(client) == expected


def test_notable_events_get_one_structured_line_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = [ev(1.0, 1), b"junk", ev(2.0, -1), b"[1]", *[ev(1.0, 1)] * 20]
    consumer = FakeConsumer({("t", 0): log})
    engine = new_engine()
    caplog.set_level(logging.INFO, logger="consumers.runner")
    runner = start(engine, CheckpointStore(tmp_path), consumer)
    wait_until(lambda: engine.next_offset("t", 0) == len(log))
    assert runner.stop(timeout=TIMEOUT_S)
    dead = [r for r in caplog.records if r.getMessage().startswith("event dead-lettered")]
    assert [(r.reason, r.source_partition, r.source_offset) for r in dead] == [  # type: ignore[attr-defined]
        ("not_json", 0, 1),
        ("not_object", 0, 3),
    ]
    written = [r for r in caplog.records if " written (" in r.getMessage()]
    assert written, "the final checkpoint is logged"
    assert written[-1].next_offsets == {"t/0": len(log)}  # type: ignore[attr-defined]
    # Valid events never get a line of their own.
    assert len(caplog.records) < len(log)
