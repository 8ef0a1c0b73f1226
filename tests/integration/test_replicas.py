"""A read replica beside a learner, as separate processes on Apache Kafka.

The learner (``novikoff serve``) consumes and learns, and writes its state to the compacted state
topic at every checkpoint; the replica (``novikoff serve --role replica``, same group and topic
settings) follows that topic and serves. What must hold:

* before the learner has written a state, the replica answers 503 on ``/readyz`` (no model);
* once caught up, the replica's ``model_version``, weights and predictions equal the learner's;
  control: the replica started with another model version (0), so equality is not vacuous;
* the replica is no member of the consumer group (it takes no partition from the learners);
  control: the learner is one;
* ``novikoff_model_age_seconds`` is exported with a finite value once the replica is ready;
* control: a replica following another group's key never gets a model and stays not ready;
* while the broker is down (SIGKILL), the replica keeps serving the same model and predictions,
  and reports it stale (503) only past ``replica_max_model_age_seconds``; it is ready again once
  the broker is back;
* a state record above the state topic's ``max.message.bytes`` is split into chunks, each within
  the limit, and the replica reassembles it: its model equals the learner's. Control: the broker
  refuses that record unsplit.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError
from prometheus_client.parser import text_string_to_metric_families

from consumers.state.chunks import StateAssembler
from consumers.state.topic import STATE_TOPIC_CONFIGS, state_key
from service.settings import load_settings
from service.topics import ensure_topics
from tests.support.running_service import RunningService, Stream, produce

pytestmark = pytest.mark.integration

STREAM = Stream(dim=4, seed=23, count=3_000, malformed=0.02)
CHECKPOINT_ENV = {
    "NOVIKOFF_CHECKPOINT__EVERY_EVENTS": "500",
    "NOVIKOFF_CHECKPOINT__EVERY_SECONDS": "0.5",
    "NOVIKOFF_KAFKA__TRANSACTIONS": "true",  # the learner writes state records only with them
}
CONVERGE_TIMEOUT_S = 60.0
POLL_S = 0.2
NOT_READY = 503
INSTANCES = 64
SEED = 5


def wait_for(
    condition: Callable[[], bool], what: str, timeout_s: float = CONVERGE_TIMEOUT_S
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(POLL_S)


def metric_value(service: RunningService, name: str) -> float:
    text = service.get("/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} not exported")


def group_members(bootstrap: str, group: str) -> int:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        description = admin.describe_groups([group])[group]
        return len(description["members"])
    finally:
        admin.close()


@pytest.fixture
def group() -> str:
    return f"novikoff-{uuid.uuid4().hex[:8]}"


def _service(
    tmp_path: Path,
    name: str,
    bootstrap: str,
    topic: str,
    env: dict[str, str],
    ready: bool,
    stream: Stream = STREAM,
) -> RunningService:
    workdir = tmp_path / name
    workdir.mkdir()
    return RunningService(
        workdir=workdir,
        bootstrap=bootstrap,
        topic=topic,
        stream=stream,
        log_path=workdir / "serve.log",
        extra_env=env,
        wait_until_ready=ready,
    )


@pytest.fixture
def learner(
    tmp_path: Path, kafka_bootstrap: str, topic_name: str, group: str
) -> Iterator[RunningService]:
    env = {"NOVIKOFF_KAFKA__GROUP_ID": group, **CHECKPOINT_ENV}
    with _service(tmp_path, "learner", kafka_bootstrap, topic_name, env, ready=True) as service:
        yield service


def replica_env(group: str) -> dict[str, str]:
    return {"NOVIKOFF_KAFKA__GROUP_ID": group, "NOVIKOFF_SERVICE__ROLE": "replica"}


def predictions(service: RunningService, instances: list[dict[str, Any]]) -> list[Any]:
    response = service.post("/predict", {"instances": instances})
    response.raise_for_status()
    body: list[Any] = response.json()["predictions"]
    return body


def test_a_replica_serves_the_learners_model_once_caught_up(
    learner: RunningService, kafka_bootstrap: str, topic_name: str, group: str, tmp_path: Path
) -> None:
    replica = _service(
        tmp_path, "replica", kafka_bootstrap, topic_name, replica_env(group), ready=False
    )
    stranger = _service(
        tmp_path, "stranger", kafka_bootstrap, topic_name, replica_env(f"{group}-other"), False
    )
    with replica, stranger:
        wait_for(lambda: _answers(replica), "the replica's HTTP server")
        before = replica.get("/readyz")
        assert before.status_code == NOT_READY
        assert "no model from the state topic" in before.json()["detail"]
        assert replica.stats()["model_version"] == 0

        produce(kafka_bootstrap, topic_name, STREAM, tmp_path / "produce.log")
        expected = learner.wait_drained(STREAM.count)
        assert expected["model_version"] > 0, "control: the learner's model is not the fresh one"

        def caught_up() -> bool:
            stats = replica.stats()
            return bool(stats["seen"] == expected["seen"] and stats["ready"])

        wait_for(caught_up, "the replica to catch up")
        assert replica.get("/readyz").status_code == 200
        learned, served = learner.get("/model").json(), replica.get("/model").json()
        assert served["model_version"] == learned["model_version"] == expected["model_version"]
        assert served["weights"] == learned["weights"]
        assert served["counters"] == learned["counters"]
        rng = np.random.default_rng(SEED)
        instances = [{"features": row.tolist()} for row in rng.uniform(-2, 2, (INSTANCES, 4))]
        assert predictions(replica, instances) == predictions(learner, instances)
        assert replica.stats()["model_version"] == expected["model_version"]

        age = metric_value(replica, "novikoff_model_age_seconds")
        assert math.isfinite(age) and age >= 0
        assert metric_value(replica, "novikoff_model_version") == expected["model_version"]

        assert group_members(kafka_bootstrap, group) == 1, "only the learner is a member"
        assert group_members(kafka_bootstrap, f"{group}-other") == 0

        # Control: the same topics under another group's key hold no model for that replica.
        refused = stranger.get("/readyz")
        assert refused.status_code == NOT_READY
        assert "no model from the state topic" in refused.json()["detail"]
        assert stranger.stats()["model_version"] == 0


def _answers(service: RunningService) -> bool:
    try:
        service.get("/healthz")
    except Exception:
        return False
    return True


BIG_STREAM = Stream(dim=64, seed=29, count=3_000, malformed=0.0, noise=0.1)
TOPIC_LIMIT_BYTES = 16_384
"""The state topic's ``max.message.bytes``: far below the model's state record."""
CHUNK_BYTES = 8_192


def test_a_state_record_above_the_topic_limit_is_split_and_the_replica_reassembles_it(
    kafka_bootstrap: str, topic_name: str, group: str, tmp_path: Path
) -> None:
    settings = load_settings(kafka={"bootstrap_servers": kafka_bootstrap, "topic": topic_name})
    state_topic = settings.kafka.state_topic_name
    ensure_topics(
        settings.kafka,
        [state_topic],
        configs={**STATE_TOPIC_CONFIGS, "max.message.bytes": str(TOPIC_LIMIT_BYTES)},
    )
    learner_env = {
        "NOVIKOFF_KAFKA__GROUP_ID": group,
        "NOVIKOFF_KAFKA__STATE_RECORD_MAX_BYTES": str(CHUNK_BYTES),
        "NOVIKOFF_KAFKA__TRANSACTIONS": "true",
        **CHECKPOINT_ENV,
    }
    learner = _service(
        tmp_path, "learner", kafka_bootstrap, topic_name, learner_env, True, BIG_STREAM
    )
    replica = _service(
        tmp_path, "replica", kafka_bootstrap, topic_name, replica_env(group), False, BIG_STREAM
    )
    with learner, replica:
        wait_for(lambda: _answers(replica), "the replica's HTTP server")
        produce(kafka_bootstrap, topic_name, BIG_STREAM, tmp_path / "produce.log")
        expected = learner.wait_drained(BIG_STREAM.count)
        wait_for(
            lambda: replica.stats()["seen"] == expected["seen"] and replica.stats()["ready"],
            "the replica to catch up",
        )
        learned, served = learner.get("/model").json(), replica.get("/model").json()
        assert served["model_version"] == learned["model_version"] == expected["model_version"]
        assert served["weights"] == learned["weights"]

    records = read_all(kafka_bootstrap, state_topic)
    key = state_key(group, topic_name)
    chunks = [value for record_key, value in records if b'"chunk"' in record_key]
    assert chunks, "the state was split"
    assert all(len(value) <= CHUNK_BYTES for _, value in records)
    assembler = StateAssembler(key)
    whole = None
    for record_key, value in records:
        if record_key == key:
            whole = assembler.complete(value)
        else:
            assembler.add_chunk(record_key, value)
    assert whole is not None and len(whole) > TOPIC_LIMIT_BYTES
    # Control: the broker refuses that state record unsplit, so the split was needed.
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, max_request_size=len(whole) * 2)
    try:
        with pytest.raises(KafkaError, match="MessageSizeTooLarge"):
            producer.send(state_topic, key=key, value=whole).get(timeout=30)
    finally:
        producer.close()


def read_all(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    """Every committed (key, value) of ``topic``, in offset order."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    try:
        (partition,) = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        end = consumer.end_offsets([partition])[partition]
        found: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + CONVERGE_TIMEOUT_S
        while consumer.position(partition) < end and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                found.extend((record.key, record.value) for record in batch)
        return found
    finally:
        consumer.close()


OUTAGE_MAX_AGE_S = 5.0
OUTAGE_TIMEOUT_S = 90.0


def test_a_replica_keeps_serving_its_model_while_the_broker_is_down(
    apache_broker_factory: Any, topic_name: str, group: str, tmp_path: Path
) -> None:
    broker = apache_broker_factory().start()
    learner_env = {"NOVIKOFF_KAFKA__GROUP_ID": group, **CHECKPOINT_ENV}
    env = {
        **replica_env(group),
        "NOVIKOFF_SERVICE__REPLICA_MAX_MODEL_AGE_SECONDS": str(OUTAGE_MAX_AGE_S),
    }
    learner = _service(tmp_path, "learner", broker.bootstrap, topic_name, learner_env, True)
    replica = _service(tmp_path, "replica", broker.bootstrap, topic_name, env, False)
    with learner, replica:
        produce(broker.bootstrap, topic_name, STREAM, tmp_path / "produce.log")
        expected = learner.wait_drained(STREAM.count)
        wait_for(
            lambda: _answers(replica) and replica.stats()["seen"] == expected["seen"],
            "the replica to catch up",
        )
        wait_for(lambda: replica.get("/readyz").status_code == 200, "the replica to be ready")
        served = replica.get("/model").json()
        rng = np.random.default_rng(SEED)
        instances = [{"features": row.tolist()} for row in rng.uniform(-2, 2, (INSTANCES, 4))]
        answers = predictions(replica, instances)

        broker.kill()
        wait_for(
            lambda: replica.get("/readyz").status_code == NOT_READY,
            "the replica to report its model stale",
            OUTAGE_TIMEOUT_S,
        )
        detail = replica.get("/readyz").json()["detail"]
        assert "past service.replica_max_model_age_seconds" in detail, detail
        assert metric_value(replica, "novikoff_model_age_seconds") > OUTAGE_MAX_AGE_S
        assert predictions(replica, instances) == answers, "the last model keeps serving"
        assert replica.get("/model").json() == served

        broker.start()
        wait_for(
            lambda: replica.get("/readyz").status_code == 200,
            "the replica to be fresh again",
            OUTAGE_TIMEOUT_S,
        )
        assert replica.get("/model").json()["model_version"] == served["model_version"]
