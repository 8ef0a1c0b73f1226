"""Consumer errors by kind, and the runner's handling of the ones retrying cannot fix."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from kafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    KafkaTimeoutError,
    SaslAuthenticationFailedError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
    UnsupportedCodecError,
)

from consumers.faults import FAULT_KINDS, ConsumerFault, FaultKind, classify, unknown_topic
from consumers.runner import ConsumerRunner
from consumers.state.checkpoint import CheckpointStore
from tests.unit.consumers.fakes import FakeCluster, FakeConsumer, FakeProducer, FaultyConsumer
from tests.unit.consumers.test_runner import TIMEOUT_S, ev, new_engine, settings, wait_until

CODEC_ERROR = UnsupportedCodecError("Libraries for snappy compression codec not found")


@pytest.mark.parametrize(
    ("exc", "kind", "named"),
    [
        (CODEC_ERROR, FaultKind.CODEC, "python-snappy"),
        (TopicAuthorizationFailedError({"t"}), FaultKind.AUTHORIZATION, "--topic t"),
        (GroupAuthorizationFailedError("g"), FaultKind.AUTHORIZATION, "--group g"),
        (ClusterAuthorizationFailedError(), FaultKind.AUTHORIZATION, "kafka-acls"),
        (SaslAuthenticationFailedError("bad password"), FaultKind.AUTHORIZATION, "sasl_plain"),
        (KafkaTimeoutError("bootstrap"), FaultKind.TRANSIENT, ""),
        (KafkaConnectionError("reset"), FaultKind.TRANSIENT, ""),
        (UnknownTopicOrPartitionError(), FaultKind.TRANSIENT, ""),
        (ConnectionError("reset"), FaultKind.TRANSIENT, ""),
    ],
)
def test_errors_are_classified_with_a_fix_naming_what_to_change(
    exc: BaseException, kind: FaultKind, named: str
) -> None:
    fault = classify(exc, topic="t", group="g")
    assert fault.kind is kind
    assert fault.retriable is (kind is FaultKind.TRANSIENT)
    assert (fault.fix == "") is fault.retriable
    assert named in fault.fix
    assert fault.reason.startswith(fault.cause)
    assert fault.kind.value in FAULT_KINDS


def test_an_unknown_topic_names_the_topic_the_broker_and_the_fix() -> None:
    fault = unknown_topic("events-x", "127.0.0.1:9092", 10.0)
    assert fault.kind is FaultKind.UNKNOWN_TOPIC and not fault.retriable
    assert "'events-x' does not exist on 127.0.0.1:9092" in fault.cause
    assert "--create --topic events-x" in fault.fix
    assert fault.as_dict() == {"kind": "unknown_topic", "cause": fault.cause, "fix": fault.fix}


class CountingObserver:
    def __init__(self) -> None:
        self.faults: list[ConsumerFault] = []
        self.lock = threading.Lock()

    def on_consumer_error(self, fault: ConsumerFault) -> None:
        with self.lock:
            self.faults.append(fault)

    def kinds(self) -> list[str]:
        with self.lock:
            return [fault.kind.value for fault in self.faults]


def run(
    tmp_path: Path, consumer: FakeConsumer, observer: CountingObserver, **overrides: Any
) -> tuple[ConsumerRunner, Any]:
    engine = new_engine()
    runner = ConsumerRunner(
        engine,
        CheckpointStore(tmp_path),
        settings(**overrides),
        consumer_factory=lambda s: consumer,
        producer_factory=lambda s: FakeProducer(),
        fault_observer=observer,
    )
    runner.start()
    return runner, engine


def error_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.ERROR and r.name == "consumers.runner"
    ]


def test_a_codec_error_reports_its_fix_once_counts_every_retry_and_clears(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="consumers.runner")
    log = [ev(1.0, 1), ev(-1.0, -1)]
    consumer = FaultyConsumer({("t", 0): log}, failures=[CODEC_ERROR] * 4)
    observer = CountingObserver()
    runner, engine = run(tmp_path, consumer, observer, backoff_max_seconds=0.05)
    wait_until(lambda: engine.next_offset("t", 0) == len(log))
    assert observer.kinds() == ["codec"] * 4
    # Four failed attempts, one ERROR line naming the fix.
    (line,) = error_lines(caplog)
    assert "cannot be decoded" in line and "python-snappy" in line
    wait_until(lambda: runner.connected)  # set by the runner's loop after the batch it applied
    assert runner.fault is None and runner.not_ready_reason is None
    # The snapshot is published after the batch's offsets advance: wait for it, do not race it.
    wait_until(lambda: engine.snapshot.seen == len(log))
    assert runner.stop(timeout=TIMEOUT_S)


def test_while_a_fault_stands_readiness_gives_its_cause_and_fix(tmp_path: Path) -> None:
    consumer = FaultyConsumer({("t", 0): [ev(1.0, 1)]}, failures=[CODEC_ERROR] * 1_000)
    observer = CountingObserver()
    runner, _ = run(tmp_path, consumer, observer, backoff_max_seconds=0.05)
    wait_until(lambda: len(observer.kinds()) >= 3)
    fault = runner.fault
    assert fault is not None and fault.kind is FaultKind.CODEC
    reason = runner.not_ready_reason or ""
    assert not runner.connected
    assert "cannot be decoded" in reason and "fix: install novikoff" in reason
    assert runner.stop(timeout=TIMEOUT_S)


def test_one_error_line_per_distinct_cause(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="consumers.runner")
    topic_denied = TopicAuthorizationFailedError({"t"})
    group_denied = GroupAuthorizationFailedError("g")
    failures = [topic_denied, topic_denied, group_denied, group_denied, topic_denied]
    consumer = FaultyConsumer({("t", 0): [ev(1.0, 1)]}, failures=failures)
    observer = CountingObserver()
    runner, engine = run(tmp_path, consumer, observer, backoff_max_seconds=0.05)
    wait_until(lambda: engine.snapshot.seen == 1)
    assert observer.kinds() == ["authorization"] * 5
    lines = error_lines(caplog)
    assert len(lines) == 2
    assert "topic 't'" in lines[0] and "--topic t" in lines[0]
    assert "group 'g'" in lines[1] and "--group g" in lines[1]
    assert runner.stop(timeout=TIMEOUT_S)


def test_transient_errors_retry_with_backoff_without_an_error_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="consumers.runner")
    failures = [KafkaConnectionError("reset")] * 3
    consumer = FaultyConsumer({("t", 0): [ev(1.0, 1)]}, failures=failures)
    observer = CountingObserver()
    runner, engine = run(tmp_path, consumer, observer)
    wait_until(lambda: engine.snapshot.seen == 1)
    assert observer.kinds() == ["transient"] * 3
    assert error_lines(caplog) == []
    warnings = [r for r in caplog.records if r.getMessage().startswith("consumer error:")]
    assert len(warnings) == 3
    assert runner.stop(timeout=TIMEOUT_S)


def test_a_missing_topic_is_reported_after_the_grace_period_and_clears_when_created(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="consumers.runner")
    cluster = FakeCluster()
    consumer = FaultyConsumer({}, cluster=cluster)
    observer = CountingObserver()
    runner, engine = run(tmp_path, consumer, observer, missing_topic_grace_seconds=0.2)
    wait_until(lambda: runner.fault is not None)
    fault = runner.fault
    assert fault is not None and fault.kind is FaultKind.UNKNOWN_TOPIC
    assert not runner.connected
    assert "'t' does not exist on fake:9092" in (runner.not_ready_reason or "")
    assert "--create --topic t" in (runner.not_ready_reason or "")
    rounds = consumer.poll_calls
    wait_until(lambda: consumer.poll_calls > rounds + 5)
    # Still polling, still missing: counted and logged once for the whole episode.
    assert observer.kinds() == ["unknown_topic"]
    assert len(error_lines(caplog)) == 1
    # The topic gets created: the runner subscribes again, the group assigns it, it learns.
    consumer.logs[("t", 0)] = [ev(1.0, 1), ev(2.0, -1)]
    cluster.topics["t"] = {0}
    wait_until(lambda: engine.next_offset("t", 0) == 2)
    assert consumer.closed
    assert runner.connected and runner.fault is None
    assert runner.stop(timeout=TIMEOUT_S)


def test_within_the_grace_period_a_missing_topic_is_only_awaited(tmp_path: Path) -> None:
    consumer = FaultyConsumer({}, cluster=FakeCluster())
    observer = CountingObserver()
    runner, _ = run(tmp_path, consumer, observer, missing_topic_grace_seconds=3_600.0)
    wait_until(lambda: consumer.poll_calls > 5)
    assert not runner.connected and runner.fault is None
    assert "waiting for topic 't'" in (runner.not_ready_reason or "")
    assert observer.kinds() == []
    assert runner.stop(timeout=TIMEOUT_S)


def test_a_client_without_metadata_never_reports_a_missing_topic(tmp_path: Path) -> None:
    # Control for the two tests above: the same empty subscription on a client whose metadata
    # cannot be read is simply connected.
    consumer = FaultyConsumer({}, cluster=None)
    observer = CountingObserver()
    runner, _ = run(tmp_path, consumer, observer, missing_topic_grace_seconds=0.01)
    wait_until(lambda: consumer.poll_calls > 5)
    assert runner.connected and runner.fault is None
    assert observer.kinds() == []
    assert runner.stop(timeout=TIMEOUT_S)


def test_the_consumer_never_asks_the_broker_to_create_its_topic() -> None:
    config = settings().kafka_consumer_config()
    assert config["allow_auto_create_topics"] is False
    chosen = settings(
        consumer_config={
            "bootstrap_servers": "x",
            "group_id": "g",
            "allow_auto_create_topics": True,
        }
    ).kafka_consumer_config()
    assert chosen["allow_auto_create_topics"] is True
