"""The state topic read back: damaged records skipped, another model refused, isolation per broker.

* A state record that fails verification (a damaged frame), or that verifies but that
  ``learning.load_state`` refuses, is skipped with an ERROR and the previous good record of the
  key is used. Control: without the damaged record the newest good one is used.
* A service whose model settings differ from the state topic's refuses to start (exit code 1, a
  clear error). Control: the same settings start.
* Apache Kafka hides an aborted transaction's records from ``read_committed`` readers; the demo's
  Tansu does not, which is why the demo runs without transactions (README, "Exactly once").
"""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from consumers.engine import Engine
from consumers.engine_state import IncompatibleCheckpointError
from consumers.restoring import state_topic_candidate
from consumers.state.checkpoint import frame
from consumers.state.topic import encode_state_record, state_key
from consumers.transactions import TransactionSettings
from learning import BoundTracker, DenseEncoder, LabelMap, Perceptron
from service.settings import load_settings
from service.topics import ensure_state_topic, ensure_topics
from tests.support.faults import ConfiguredStream, FaultyService
from tests.support.ledger import EventPlan, publish

pytestmark = pytest.mark.integration

GROUP = "state-records"
READ_TIMEOUT_S = 10.0
EXIT_TIMEOUT_S = 60.0
POLL_MS = 500
EVENTS = 200
TRANSACTIONS_ENV = "NOVIKOFF_KAFKA__TRANSACTIONS"
COMMITTED_LOG = "committed"
"""Logged once a state record is committed (``state record N committed ...``)."""


def _engine(dim: int = 2) -> Engine:
    return Engine(
        Perceptron(LabelMap({"1": 1, "-1": -1}), encoder=DenseEncoder(dim)), BoundTracker()
    )


def _state(engine: Engine, events: int) -> bytes:
    for i in range(events):
        engine.learner.learn_one([1.0, float(i % 3) - 1.0], "1" if i % 2 else "-1")
    return engine.checkpoint_bytes()[0]


def _publish(bootstrap: str, topic: str, key: bytes, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for value in values:
            producer.send(topic, value=value, key=key).get(timeout=READ_TIMEOUT_S)
    finally:
        producer.close()


def _settings(bootstrap: str, model: str) -> tuple[TransactionSettings, dict[str, object]]:
    kafka = load_settings(kafka={"bootstrap_servers": bootstrap, "topic": model}).kafka
    ensure_state_topic(kafka)
    return TransactionSettings(kafka.state_topic_name, model), kafka.client_config()


@pytest.mark.parametrize("damaged", ["frame", "content", "control-none"])
def test_a_bad_state_record_is_skipped_for_the_previous_one(
    damaged: str, kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    model = f"model-{uuid.uuid4().hex[:8]}"
    transactions, connection = _settings(kafka_bootstrap, model)
    key = state_key(GROUP, model)
    older = _state(_engine(), 3)
    newer = _state(_engine(), 5)
    bad = {
        "frame": encode_state_record(newer, 3)[:-1],
        "content": frame(b"NOVIKOFF not a state", 3),
        "control-none": encode_state_record(newer, 3),
    }[damaged]
    _publish(
        kafka_bootstrap,
        transactions.state_topic,
        key,
        [encode_state_record(older, 1), encode_state_record(older, 2), bad],
    )
    with caplog.at_level(logging.ERROR):
        candidate = state_topic_candidate(_engine(), connection, transactions, GROUP)
    assert candidate is not None
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    if damaged == "control-none":
        assert candidate.state.learner.n_seen == 5
        assert candidate.sequence == 3
        assert errors == []
    else:
        assert candidate.state.learner.n_seen == 3
        assert candidate.sequence == 2
        assert any("previous one is used" in message for message in errors), errors


def test_a_state_topic_of_another_model_is_refused(kafka_bootstrap: str) -> None:
    model = f"model-{uuid.uuid4().hex[:8]}"
    transactions, connection = _settings(kafka_bootstrap, model)
    _publish(
        kafka_bootstrap,
        transactions.state_topic,
        state_key(GROUP, model),
        [encode_state_record(_state(_engine(dim=2), 3), 1)],
    )
    assert state_topic_candidate(_engine(dim=2), connection, transactions, GROUP) is not None
    with pytest.raises(IncompatibleCheckpointError, match="different model"):
        state_topic_candidate(_engine(dim=3), connection, transactions, GROUP)


@pytest.mark.parametrize("dim", [4, 5], ids=["control-same-settings", "other-dim"])
def test_serve_refuses_to_start_on_a_state_topic_of_another_model(
    dim: int, kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    settings = load_settings(kafka={"bootstrap_servers": kafka_bootstrap})
    ensure_topics(settings.kafka, [topic_name, f"{topic_name}.dlq"])
    stream = ConfiguredStream(dim=4, seed=3)
    publish(kafka_bootstrap, topic_name, EventPlan(stream.synthetic()).valid(EVENTS))
    group = f"{topic_name}-group"
    first = FaultyService(
        workdir=_dir(tmp_path, "first"),
        bootstrap=kafka_bootstrap,
        topic=topic_name,
        stream=stream,
        log_path=tmp_path / "first" / "serve.log",
        group_id=group,
    )
    first.extra_env[TRANSACTIONS_ENV] = "true"
    second = FaultyService(
        workdir=_dir(tmp_path, "second"),
        bootstrap=kafka_bootstrap,
        topic=topic_name,
        stream=ConfiguredStream(dim=dim, seed=3),
        log_path=tmp_path / "second" / "serve.log",
        group_id=group,
    )
    second.extra_env[TRANSACTIONS_ENV] = "true"
    try:
        first.start()
        first.wait_for("learning", lambda s: s["seen"] == EVENTS, EXIT_TIMEOUT_S)
        first.wait_for("committing", lambda s: COMMITTED_LOG in first.log_text, EXIT_TIMEOUT_S)
        first.stop()
        second.start(wait_ready=False)
        if dim == 4:
            second.wait_ready()
            assert "cannot start" not in second.log_text
        else:
            assert second.wait_dead(EXIT_TIMEOUT_S) == 1
            assert "cannot start" in second.log_text, second.log_text
            assert "different model" in second.log_text, second.log_text
    finally:
        first.stop()
        second.stop()


def _dir(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.mkdir()
    return path


@pytest.mark.parametrize(
    ("broker", "isolates"), [("kafka_bootstrap", True), ("tansu_bootstrap", False)]
)
def test_read_committed_hides_an_aborted_transaction_on_apache_kafka_only(
    broker: str, isolates: bool, request: pytest.FixtureRequest
) -> None:
    bootstrap: str = request.getfixturevalue(broker)
    topic = f"isolation-{uuid.uuid4().hex[:8]}"
    ensure_topics(load_settings(kafka={"bootstrap_servers": bootstrap}).kafka, [topic])
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-producer")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"aborted")
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"committed")
        producer.commit_transaction()
    finally:
        producer.close()
    committed = _read_values(bootstrap, topic, "read_committed")
    everything = _read_values(bootstrap, topic, "read_uncommitted")
    assert b"aborted" in everything  # control: the aborted record is in the log
    assert b"committed" in committed
    assert (b"aborted" not in committed) is isolates


def _read_values(bootstrap: str, topic: str, isolation_level: str) -> list[bytes]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level=isolation_level
    )
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while b"committed" not in values and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=POLL_MS).values():
                values.extend(r.value for r in records)
        return values
    finally:
        consumer.close()
