"""An upstream transactional producer's aborted records are never learned in exactly-once mode.

A transactional producer writes three transactions to the events topic: the first and the last
commit, the middle one aborts. A :class:`ConsumerRunner` in exactly-once mode (the default
``[kafka] transactions = true``) reads ``read_committed``: it learns exactly the committed events
and its model equals an offline learner's over them. Control: the at-least-once mode keeps Kafka's
consumer default (``read_uncommitted``) and learns the aborted events too, which the same count
check catches.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import numpy as np
import orjson
import pytest
from kafka import KafkaProducer

from consumers.engine import Engine
from consumers.kafka_clients import RunnerSettings
from consumers.runner import ConsumerRunner
from consumers.state.checkpoint import CheckpointStore
from consumers.transactions import TransactionSettings
from learning import BoundTracker, DenseEncoder, LabelMap, Perceptron
from service.settings import load_settings
from service.topics import ensure_state_topic, ensure_topics
from tests.support.running_service import TEST_GROUP_TIMING

pytestmark = pytest.mark.integration

DIM = 2
PER_TRANSACTION = 50
SEND_TIMEOUT_S = 30.0
LEARN_TIMEOUT_S = 60.0
WAIT_STEP_S = 0.05
STOP_DEADLINE_S = 20.0
LABELS = {"1": 1, "-1": -1}


def _events(seed: int) -> list[tuple[list[float], int]]:
    rng = np.random.default_rng(seed)
    points = rng.uniform(-1.0, 1.0, size=(PER_TRANSACTION, DIM))
    return [([float(v) for v in x], 1 if x[0] + 0.3 * x[1] > 0 else -1) for x in points]


def _publish_transactions(bootstrap: str, topic: str) -> tuple[list[tuple[list[float], int]], int]:
    """Commit, abort, commit; returns (the committed events in order, the last record's offset)."""
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=f"upstream-{uuid.uuid4().hex[:8]}"
    )
    committed: list[tuple[list[float], int]] = []
    last_offset = -1
    try:
        producer.init_transactions()
        for seed, commit in ((1, True), (2, False), (3, True)):
            producer.begin_transaction()
            events = _events(seed)
            futures = [
                producer.send(topic, value=orjson.dumps({"features": x, "label": y}), partition=0)
                for x, y in events
            ]
            producer.flush(timeout=SEND_TIMEOUT_S)
            if commit:
                producer.commit_transaction()
                committed.extend(events)
                last_offset = futures[-1].get(timeout=SEND_TIMEOUT_S).offset
            else:
                producer.abort_transaction()
    finally:
        producer.close()
    return committed, last_offset


def _learner() -> Perceptron:
    return Perceptron(LabelMap(LABELS), encoder=DenseEncoder(DIM), predictor="averaged")


@pytest.mark.parametrize("exactly_once", [True, False], ids=["transactions", "control-none"])
def test_aborted_upstream_records_are_not_learned(
    exactly_once: bool, kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    kafka = load_settings(kafka={"bootstrap_servers": kafka_bootstrap, "topic": topic_name}).kafka
    ensure_topics(kafka, [topic_name, f"{topic_name}.dlq"])
    committed, last_offset = _publish_transactions(kafka_bootstrap, topic_name)
    engine = Engine(_learner(), BoundTracker([]))
    store = CheckpointStore(tmp_path / "state")
    engine.restore(store)
    transactions = (
        TransactionSettings(state_topic=kafka.state_topic_name, model_id=topic_name)
        if exactly_once
        else None
    )
    settings = RunnerSettings(
        topic=topic_name,
        consumer_config={
            "bootstrap_servers": kafka_bootstrap,
            "group_id": f"novikoff-test-{uuid.uuid4().hex[:8]}",
            **TEST_GROUP_TIMING,
        },
        poll_timeout_ms=100,
        transactions=transactions,
    )
    runner = ConsumerRunner(
        engine, store, settings, ensure_state_topic=lambda: ensure_state_topic(kafka)
    )
    runner.start()
    try:
        deadline = time.monotonic() + LEARN_TIMEOUT_S
        while not any(p.next_offset > last_offset for p in engine.snapshot.partitions):
            assert time.monotonic() < deadline, f"not learned up to offset {last_offset}"
            time.sleep(WAIT_STEP_S)
        learned = sum(p.learned for p in engine.snapshot.partitions)
    finally:
        assert runner.stop(timeout=STOP_DEADLINE_S), "runner did not stop in time"
    if not exactly_once:
        # The control reads the aborted transaction too: the count check below would fail.
        assert learned == len(committed) + PER_TRANSACTION
        return
    assert learned == len(committed)
    offline = _learner()
    for x, y in committed:
        offline.learn_one(x, str(y))
    assert np.array_equal(engine.learner.weights, offline.weights)
