"""The consumer against the real broker: learning, dead letters, exactly-once across restarts.

Each test produces events with unique ids to a fresh topic, runs a :class:`ConsumerRunner` in
this process and compares what was learned and dead-lettered with what was produced.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from consumers.engine import Engine
from consumers.kafka_clients import RunnerSettings
from consumers.runner import ConsumerRunner
from consumers.state.checkpoint import CheckpointStore
from learning import BoundTracker, DenseEncoder, LabelMap, Perceptron, Reference
from service.settings import load_settings
from service.topics import ensure_topics
from tests.support.running_service import TEST_GROUP_TIMING

pytestmark = pytest.mark.integration

DRAIN_TIMEOUT_S = 60.0
WAIT_STEP_S = 0.05
STOP_DEADLINE_S = 20.0
LABELS: dict[Hashable, int] = {"1": 1, "-1": -1}


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    """The topic and its dead-letter topic: nothing relies on the broker creating them."""
    kafka = load_settings(kafka={"bootstrap_servers": bootstrap}).kafka
    ensure_topics(kafka, [topic], partitions=partitions)
    ensure_topics(kafka, [f"{topic}.dlq"])


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        for value in values:
            producer.send(topic, value=value, partition=partition)
        producer.flush(timeout=30)
    finally:
        producer.close()


def event(features: list[float], label: int, event_id: str | None = None) -> bytes:
    payload: dict[str, object] = {"features": features, "label": label}
    if event_id is not None:
        payload["id"] = event_id
    return orjson.dumps(payload)


@dataclass
class Harness:
    """A runner on a fresh engine, with its checkpoint directory."""

    engine: Engine
    runner: ConsumerRunner
    store: CheckpointStore

    def wait_for(self, condition: Callable[[], bool], timeout: float = DRAIN_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                stats = self.engine.snapshot.stats
                raise AssertionError(
                    f"timed out; seen={stats['seen']} invalid={stats['invalid']} "
                    f"connected={self.runner.connected} reason={self.runner.not_ready_reason}"
                )
            time.sleep(WAIT_STEP_S)

    def wait_for_records(self, count: int) -> None:
        self.wait_for(lambda: _applied(self.engine) >= count)

    def stop(self) -> None:
        assert self.runner.stop(timeout=STOP_DEADLINE_S), "runner did not stop in time"


def _applied(engine: Engine) -> int:
    return sum(p.learned + p.rejected for p in engine.snapshot.partitions)


def new_learner(dim: int) -> Perceptron:
    return Perceptron(LabelMap(LABELS), encoder=DenseEncoder(dim), predictor="averaged")


def make_harness(
    bootstrap: str,
    topic: str,
    directory: Path,
    dim: int,
    reference: np.ndarray | None = None,
    group: str | None = None,
    **settings: object,
) -> Harness:
    references = [] if reference is None else [Reference("u", reference)]
    engine = Engine(new_learner(dim), BoundTracker(references))
    store = CheckpointStore(directory)
    engine.restore(store)
    runner_settings = RunnerSettings(
        topic=topic,
        consumer_config={
            "bootstrap_servers": bootstrap,
            "group_id": group or f"novikoff-test-{uuid.uuid4().hex[:8]}",
            **TEST_GROUP_TIMING,
        },
        poll_timeout_ms=100,
        **settings,  # type: ignore[arg-type]
    )
    runner = ConsumerRunner(engine, store, runner_settings)
    return Harness(engine, runner, store)


@pytest.fixture
def harnesses() -> Iterator[list[Harness]]:
    """Harnesses started by a test; stopped at the end even if the test fails."""
    started: list[Harness] = []
    yield started
    for harness in started:
        harness.runner.stop(timeout=STOP_DEADLINE_S)


def test_pla_two_events_learn_the_notes_weights(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path, harnesses: list[Harness]
) -> None:
    create_topic(kafka_bootstrap, topic_name)
    produce(kafka_bootstrap, topic_name, [event([2.0], -1, "pla-1"), event([-0.25], 1, "pla-2")])
    harness = make_harness(kafka_bootstrap, topic_name, tmp_path, dim=1)
    harnesses.append(harness)
    harness.runner.start()
    harness.wait_for_records(2)
    snapshot = harness.engine.snapshot
    assert snapshot.predictor.weights.tolist() == [0.0, -2.25]
    assert snapshot.mistakes == 2
    assert snapshot.seen == 2
    harness.wait_for(lambda: harness.runner.connected)
    harness.stop()


# -- synthetic streams ------------------------------------------------------------------------

MALFORMED = (
    (b"\xff\xfe not utf-8", "not_utf8"),
    (b'{"features": [0.5,', "not_json"),
    (b"[1, 2, 3]", "not_object"),
    (b'{"label": 1}', "missing_features"),
    (b'{"features": [0.5, 0.5, 0.5]}', "missing_label"),
    (b'{"features": [0.5, 0.5], "label": 1}', "wrong_dimension"),
    (b'{"features": ["a", 0.5, 0.5], "label": 1}', "non_numeric"),
    (b'{"features": [true, 0.5, 0.5], "label": 1}', "boolean_feature"),
    (b'{"features": [NaN, 0.5, 0.5], "label": 1}', "non_finite"),
    (b'{"features": [1e999, 0.5, 0.5], "label": 1}', "non_finite"),
    (b'{"features": [0.5, 0.5, 0.5], "label": 7}', "unknown_label"),
    (b'{"features": [0.5, 0.5, 0.5], "label": 1, "label": -1}', "duplicate_key"),
)


@dataclass
class Stream:
    """Produced values and what should become of them."""

    values: list[bytes]
    X: np.ndarray  # augmented valid events, in order
    y: np.ndarray
    reasons: dict[int, str]  # produced index -> expected dead-letter reason
    reference: np.ndarray


def synthetic_stream(n: int, dim: int, noise: float, seed: int, malformed: float = 0.0) -> Stream:
    rng = np.random.default_rng(seed)
    reference = rng.normal(size=dim + 1)
    reference /= np.linalg.norm(reference)
    run = uuid.uuid4().hex[:8]
    values: list[bytes] = []
    rows: list[np.ndarray] = []
    labels: list[float] = []
    reasons: dict[int, str] = {}
    for index in range(n):
        if malformed and rng.random() < malformed:
            value, reason = MALFORMED[int(rng.integers(len(MALFORMED)))]
            values.append(value)
            reasons[index] = reason
            continue
        x = rng.uniform(-1.0, 1.0, size=dim)
        label = 1.0 if reference[0] + x @ reference[1:] >= 0 else -1.0
        if rng.random() < noise:
            label = -label
        values.append(event(x.tolist(), int(label), f"{run}-{index}"))
        rows.append(np.concatenate(([1.0], x)))
        labels.append(label)
    return Stream(values, np.array(rows), np.array(labels), reasons, reference)


def offline(stream: Stream, dim: int) -> tuple[Perceptron, BoundTracker]:
    """The same learner and tracker run on the valid events directly."""
    learner = new_learner(dim)
    tracker = BoundTracker([Reference("u", stream.reference)])
    result = learner.learn_batch(stream.X, stream.y)
    tracker.observe_batch(stream.X, stream.y, result)
    return learner, tracker


def assert_same_model(engine: Engine, learner: Perceptron, tracker: BoundTracker) -> None:
    snapshot = engine.snapshot
    assert snapshot.predictor.weights.tobytes() == learner.weights.tobytes()
    assert snapshot.predictor.averaged_weights.tobytes() == learner.averaged_weights.tobytes()
    assert snapshot.mistakes == learner.n_updates
    assert snapshot.seen == learner.n_seen
    assert dict(snapshot.prequential) == learner.prequential_mistakes
    (bound,) = snapshot.bounds
    (expected,) = tracker.status()
    assert (bound.bound, bound.k, bound.gamma, bound.mistakes) == (
        expected.bound,
        expected.k,
        expected.gamma,
        expected.mistakes,
    )
    assert snapshot.radius == tracker.radius


def read_dead_letters(bootstrap: str, topic: str, count: int) -> list[object]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        partitions = None
        while partitions is None and time.monotonic() < deadline:
            partitions = consumer.partitions_for_topic(topic)
            if partitions is None:
                time.sleep(0.2)
        assert partitions, f"dead-letter topic {topic} does not exist"
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        records: list[object] = []
        while len(records) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
        return records
    finally:
        consumer.close()


SYNTHETIC_EVENTS = 20_000
SYNTHETIC_DIM = 3


def test_synthetic_stream_equals_the_offline_learner(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path, harnesses: list[Harness]
) -> None:
    stream = synthetic_stream(SYNTHETIC_EVENTS, SYNTHETIC_DIM, noise=0.05, seed=11)
    create_topic(kafka_bootstrap, topic_name)
    produce(kafka_bootstrap, topic_name, stream.values)
    harness = make_harness(kafka_bootstrap, topic_name, tmp_path, SYNTHETIC_DIM, stream.reference)
    harnesses.append(harness)
    harness.runner.start()
    harness.wait_for_records(SYNTHETIC_EVENTS)
    learner, tracker = offline(stream, SYNTHETIC_DIM)
    assert_same_model(harness.engine, learner, tracker)
    assert harness.engine.snapshot.invalid == {}
    harness.stop()


def test_malformed_events_are_dead_lettered_and_the_rest_learned_once(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path, harnesses: list[Harness]
) -> None:
    stream = synthetic_stream(SYNTHETIC_EVENTS, SYNTHETIC_DIM, noise=0.05, seed=12, malformed=0.01)
    assert len(set(stream.reasons.values())) == len({reason for _, reason in MALFORMED})
    create_topic(kafka_bootstrap, topic_name)
    produce(kafka_bootstrap, topic_name, stream.values)
    harness = make_harness(kafka_bootstrap, topic_name, tmp_path, SYNTHETIC_DIM, stream.reference)
    harnesses.append(harness)
    harness.runner.start()
    harness.wait_for_records(SYNTHETIC_EVENTS)

    snapshot = harness.engine.snapshot
    (progress,) = snapshot.partitions
    assert progress.learned == len(stream.y)
    assert progress.rejected == len(stream.reasons)
    assert progress.learned + progress.rejected == SYNTHETIC_EVENTS
    assert progress.applied == ((0, SYNTHETIC_EVENTS),)
    expected_counts: dict[str, int] = {}
    for reason in stream.reasons.values():
        expected_counts[reason] = expected_counts.get(reason, 0) + 1
    assert dict(snapshot.invalid) == expected_counts
    learner, tracker = offline(stream, SYNTHETIC_DIM)
    assert_same_model(harness.engine, learner, tracker)

    dead = read_dead_letters(kafka_bootstrap, f"{topic_name}.dlq", len(stream.reasons))
    assert len(dead) == len(stream.reasons)
    for record in dead:
        headers = dict(record.headers)  # type: ignore[attr-defined]
        offset = int(headers["novikoff.offset"])
        assert headers["novikoff.topic"] == topic_name.encode()
        assert headers["novikoff.partition"] == b"0"
        assert headers["novikoff.reason"].decode() == stream.reasons[offset]
        assert headers["novikoff.message"]
        assert record.value == stream.values[offset]  # type: ignore[attr-defined]
    harness.stop()


def test_restart_resumes_from_the_checkpoint_without_reapplying(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path, harnesses: list[Harness]
) -> None:
    total = 12_000
    stream = synthetic_stream(total, SYNTHETIC_DIM, noise=0.05, seed=13, malformed=0.01)
    create_topic(kafka_bootstrap, topic_name)
    produce(kafka_bootstrap, topic_name, stream.values[: total // 2])
    group = f"novikoff-restart-{uuid.uuid4().hex[:8]}"

    first = make_harness(
        kafka_bootstrap,
        topic_name,
        tmp_path,
        SYNTHETIC_DIM,
        stream.reference,
        group=group,
        checkpoint_every_events=1000,
    )
    harnesses.append(first)
    first.runner.start()
    first.wait_for_records(total // 2)
    first.stop()
    assert first.runner.final_checkpoint_ok is True
    assert first.engine.next_offset(topic_name, 0) == total // 2

    produce(kafka_bootstrap, topic_name, stream.values[total // 2 :])
    second = make_harness(
        kafka_bootstrap, topic_name, tmp_path, SYNTHETIC_DIM, stream.reference, group=group
    )
    assert second.engine.restore_report is not None and second.engine.restore_report.restored
    assert second.engine.next_offset(topic_name, 0) == total // 2
    harnesses.append(second)
    second.runner.start()
    second.wait_for_records(total)
    (progress,) = second.engine.snapshot.partitions
    assert progress.applied == ((0, total),)
    learner, tracker = offline(stream, SYNTHETIC_DIM)
    assert_same_model(second.engine, learner, tracker)
    second.stop()


def crash_after_last_periodic_checkpoint(runner: ConsumerRunner) -> None:
    """Make the runner end like a killed process: no final or revoke checkpoint."""

    def crash() -> None:
        runner._applied_since_checkpoint = 0
        runner._close_consumer(timeout_ms=1000)

    runner._shutdown = crash  # type: ignore[method-assign]


def test_a_crash_between_checkpoints_replays_only_the_lost_tail(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path, harnesses: list[Harness]
) -> None:
    total = 10_000
    stream = synthetic_stream(total, SYNTHETIC_DIM, noise=0.05, seed=14)
    create_topic(kafka_bootstrap, topic_name)
    produce(kafka_bootstrap, topic_name, stream.values)
    first = make_harness(
        kafka_bootstrap,
        topic_name,
        tmp_path,
        SYNTHETIC_DIM,
        stream.reference,
        # One periodic checkpoint at most: a second would need 12,000 events, so the last one
        # (after 6,000 plus at most one poll) always leaves a tail for the restart to replay.
        checkpoint_every_events=6000,
        checkpoint_every_seconds=3600.0,
    )
    crash_after_last_periodic_checkpoint(first.runner)
    harnesses.append(first)
    first.runner.start()
    first.wait_for_records(total)
    first.stop()
    saved = CheckpointStore(tmp_path).load_latest()
    assert saved is not None

    second = make_harness(kafka_bootstrap, topic_name, tmp_path, SYNTHETIC_DIM, stream.reference)
    resumed_at = second.engine.next_offset(topic_name, 0)
    assert resumed_at is not None and 0 < resumed_at < total
    harnesses.append(second)
    second.runner.start()
    second.wait_for_records(total)
    learner, tracker = offline(stream, SYNTHETIC_DIM)
    assert_same_model(second.engine, learner, tracker)
    second.stop()
