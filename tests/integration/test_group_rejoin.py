"""A group join that ends while the consumer thread is away from ``poll()`` (Apache Kafka).

kafka-python 3.0.12 runs each JoinGroup/SyncGroup round on its IO thread and completes it only in
a later ``poll()`` that still finds ``need_rejoin()`` true. A round the group leader starts
because its topic's metadata changed clears that trigger itself, so a round that ends while the
consumer thread is busy elsewhere (committing a transaction, restoring the state: the exactly-once
owner does both between polls) used to be left unfinished: heartbeats off, no assignment, the
owner never learned again (the "stall after a rebalance").
:func:`consumers.kafka_compat.resume_stranded_join` makes the next ``poll()`` finish it.

The test reproduces that sequence deterministically: the owner is learning; a partition is added
to its topic (its metadata changes, so it rejoins as leader); the consumer thread starts that
round with a ``poll(timeout_ms=0)`` and stays away until the round has ended. The owner must then
learn the records produced afterwards on both partitions. Control: without
``resume_stranded_join`` it never does (the runner stays "joining the consumer group").
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewPartitions

from consumers.engine import Engine
from consumers.kafka_clients import Consumer, RunnerSettings, kafka_consumer
from consumers.runner import ConsumerRunner
from consumers.state.checkpoint import CheckpointStore
from consumers.transactions import TransactionSettings
from learning import BoundTracker, DenseEncoder, LabelMap, Perceptron
from service.settings import load_settings
from service.topics import ensure_state_topic, ensure_topics
from tests.support.running_service import TEST_GROUP_TIMING

pytestmark = pytest.mark.integration

EVENTS = 200
DIM = 2
METADATA_MAX_AGE_MS = 300
"""The owner refreshes its topic metadata this often, so it sees the new partition quickly."""
LEARN_TIMEOUT_S = 60.0
AWAY_TIMEOUT_S = 30.0
WAIT_STEP_S = 0.05
STOP_DEADLINE_S = 20.0


class AwayDuringRejoin:
    """A real kafka-python consumer whose thread, once armed, steps away during one rejoin.

    Armed, it polls with ``timeout_ms=0`` (sleeping the poll timeout between polls), so a join
    round always starts in a poll that returns at once; this thread then waits, without polling,
    until the round has ended on the IO thread: what a transaction commit or a restore between
    two polls does by chance.
    """

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer
        self.armed = threading.Event()
        self.stepped_away = threading.Event()

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> Mapping[Any, Any]:
        if not self.armed.is_set():
            polled: Mapping[Any, Any] = self._consumer.poll(timeout_ms, max_records)
            return polled
        polled = self._consumer.poll(0, max_records)
        coordinator = self._consumer._coordinator
        if not coordinator.rejoining:
            time.sleep(timeout_ms / 1000)
            return polled
        self.armed.clear()
        deadline = time.monotonic() + AWAY_TIMEOUT_S
        while coordinator._join_task is not None and not coordinator._join_task.is_done:
            if time.monotonic() > deadline:
                raise AssertionError("the join round did not end while the thread was away")
            time.sleep(WAIT_STEP_S)
        self.stepped_away.set()
        return polled

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


def _produce(bootstrap: str, topic: str, partition: int, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        for n in range(count):
            value = orjson.dumps({"features": [float(n % 7) - 3.0, 1.0], "label": 1 - 2 * (n % 2)})
            producer.send(topic, value=value, partition=partition)
        producer.flush(timeout=30)
    finally:
        producer.close()


def _wait(what: str, condition: Callable[[], bool], runner: ConsumerRunner, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what}: not after {timeout}s (connected={runner.connected}, "
                f"reason={runner.not_ready_reason})"
            )
        time.sleep(WAIT_STEP_S)


def test_a_rejoin_that_ends_while_the_owner_is_away_from_poll_is_finished(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    kafka = load_settings(kafka={"bootstrap_servers": kafka_bootstrap, "topic": topic_name}).kafka
    ensure_topics(kafka, [topic_name, f"{topic_name}.dlq"])
    wrappers: list[AwayDuringRejoin] = []

    def consumer_factory(settings: RunnerSettings) -> Consumer:
        wrapper = AwayDuringRejoin(kafka_consumer(settings))
        wrappers.append(wrapper)
        return wrapper  # type: ignore[return-value]

    engine = Engine(
        Perceptron(LabelMap({"1": 1, "-1": -1}), encoder=DenseEncoder(DIM)), BoundTracker([])
    )
    store = CheckpointStore(tmp_path / "state")
    engine.restore(store)
    settings = RunnerSettings(
        topic=topic_name,
        consumer_config={
            "bootstrap_servers": kafka_bootstrap,
            "group_id": f"novikoff-test-{uuid.uuid4().hex[:8]}",
            "metadata_max_age_ms": METADATA_MAX_AGE_MS,
            **TEST_GROUP_TIMING,
        },
        poll_timeout_ms=100,
        transactions=TransactionSettings(state_topic=kafka.state_topic_name, model_id=topic_name),
    )
    runner = ConsumerRunner(
        engine,
        store,
        settings,
        consumer_factory=consumer_factory,
        ensure_state_topic=lambda: ensure_state_topic(kafka),
    )
    _produce(kafka_bootstrap, topic_name, 0, EVENTS)
    runner.start()
    try:
        _wait("learning", lambda: engine.applied >= EVENTS, runner, LEARN_TIMEOUT_S)
        assert len(wrappers) == 1  # one consumer so far: the rejoin below is the only one
        wrappers[0].armed.set()
        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        try:
            admin.create_partitions({topic_name: NewPartitions(total_count=2)})
        finally:
            admin.close()
        _wait("away during the rejoin", wrappers[0].stepped_away.is_set, runner, AWAY_TIMEOUT_S)
        _produce(kafka_bootstrap, topic_name, 0, EVENTS)
        _produce(kafka_bootstrap, topic_name, 1, EVENTS)
        _wait("learning after it", lambda: engine.applied >= 3 * EVENTS, runner, LEARN_TIMEOUT_S)
        partitions = {(p.topic, p.partition) for p in engine.snapshot.partitions}
        assert partitions == {(topic_name, 0), (topic_name, 1)}
    finally:
        assert runner.stop(timeout=STOP_DEADLINE_S), "runner did not stop in time"
