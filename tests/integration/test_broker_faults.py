"""Real broker faults on Apache Kafka: the broker SIGKILLed mid-stream and restarted on its own
log, and the broker restarted while the service is stopped.

Each test runs its own broker (:class:`tests.support.broker.ApacheBrokerFactory`), so the shared
session broker never sees the fault. After each fault every produced event is learned exactly once
(the ledger: per partition, one applied range, learned counts equal to what was produced) and the
model equals the offline learner's on the same events.

While the broker is dead the service's progress is frozen, which makes it the one moment consumer
lag can be compared exactly: ``/stats`` and ``novikoff_consumer_lag`` must both equal the broker's
own end offset (read before the kill) minus the next offset, and be non-zero; after the restart
both reach 0 at the broker's end offset.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from kafka import KafkaConsumer, TopicPartition

from service.cli.brokers.apache import ApacheKafkaBroker
from service.settings import load_settings
from service.topics import ensure_topics
from tests.support.broker import ApacheBrokerFactory
from tests.support.faults import ConfiguredStream, FaultyService, offline_expectation, served_model
from tests.support.ledger import EventPlan, Ledger, publish, read_dead_letters, record_figures

pytestmark = pytest.mark.integration

EVENTS = 100_000
"""Published before the service starts: it learns them in a few seconds, so a kill after a fifth
of them lands mid-stream."""
KILL_AT = EVENTS // 5
STOP_TIMEOUT_S = 20.0
DRAIN_TIMEOUT_S = 180.0
FROZEN_S = 1.0
"""Two readings this far apart must agree before the frozen state is compared."""
FIRST, SECOND = 5_000, 5_000
CHECKPOINT_TOML = "[checkpoint]\nevery_events = 4000\nevery_seconds = 1.0\n"


def end_offset(bootstrap: str, topic: str) -> int:
    """The broker's own end offset of partition 0 (Apache Kafka reports it exactly)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        partition = TopicPartition(topic, 0)
        return int(consumer.end_offsets([partition])[partition])
    finally:
        consumer.close()


def lag_metric(service: FaultyService, topic: str) -> float:
    """``novikoff_consumer_lag`` of partition 0, as Prometheus would scrape it."""
    text = httpx.get(f"{service.base_url}/metrics", timeout=10.0).text
    prefix = f'novikoff_consumer_lag{{partition="0",topic="{topic}"}} '
    (line,) = [line for line in text.splitlines() if line.startswith(prefix)]
    return float(line.removeprefix(prefix))


def partition_zero(stats: dict[str, Any]) -> dict[str, Any]:
    (partition,) = [p for p in stats["partitions"] if p["partition"] == 0]
    return dict(partition)


def frozen_stats(service: FaultyService) -> dict[str, Any]:
    """``/stats`` once two readings ``FROZEN_S`` apart agree (nothing moves without a broker)."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    previous = service.stats()
    while time.monotonic() < deadline:
        time.sleep(FROZEN_S)
        current = service.stats()
        if current["partitions"] == previous["partitions"]:
            return current
        previous = current
    raise TimeoutError(f"the service kept moving without a broker: {previous}")


def make_service(tmp_path: Path, broker: ApacheKafkaBroker, topic: str) -> FaultyService:
    stream = ConfiguredStream(dim=4, seed=9, margin=0.05, noise=0.05, extra_toml=CHECKPOINT_TOML)
    return FaultyService(
        workdir=tmp_path,
        bootstrap=broker.bootstrap,
        topic=topic,
        stream=stream,
        log_path=tmp_path / "serve.log",
        group_id=f"{topic}-group",
    )


def create_topics(broker: ApacheKafkaBroker, topic: str) -> None:
    kafka = load_settings(kafka={"bootstrap_servers": broker.bootstrap}).kafka
    ensure_topics(kafka, [topic, f"{topic}.dlq"], partitions=1)


def assert_learned_exactly_once(
    service: FaultyService, ledger: Ledger, bootstrap: str, topic: str
) -> dict[str, Any]:
    produced = len(ledger.records)
    service.wait_for("drained", lambda s: s["seen"] >= produced and s["lag"] == 0, DRAIN_TIMEOUT_S)
    stats = service.stats()
    report = ledger.check(stats, read_dead_letters(bootstrap, f"{topic}.dlq", 0))
    assert report.missing == [] and report.problems == [], report.summary()
    X, y = ledger.valid_arrays(0)
    assert served_model(service) == offline_expectation(service.stream, X, y)
    return stats


def test_broker_sigkill_mid_stream_then_restart_on_its_log(
    apache_broker_factory: ApacheBrokerFactory,
    topic_name: str,
    tmp_path: Path,
    artifacts_dir: Path,
) -> None:
    broker = apache_broker_factory().start()
    create_topics(broker, topic_name)
    service = make_service(tmp_path, broker, topic_name)
    plan = EventPlan(service.stream.synthetic(), partitions=1)  # type: ignore[attr-defined]
    ledger = Ledger(topic_name, publish(broker.bootstrap, topic_name, plan.valid(EVENTS)))
    end = end_offset(broker.bootstrap, topic_name)
    assert end == EVENTS
    try:
        service.start()
        service.wait_for("mid-stream", lambda s: s["seen"] >= KILL_AT, DRAIN_TIMEOUT_S, 0.005)
        broker.kill()

        frozen = frozen_stats(service)
        progress = partition_zero(frozen)
        assert progress["next_offset"] < end, "the kill came after the stream was learned"
        assert progress["highwater"] == end, "lag is measured against the broker's end offset"
        assert progress["lag"] == end - progress["next_offset"] > 0
        assert frozen["lag"] == progress["lag"]
        assert lag_metric(service, topic_name) == progress["lag"], "/metrics agrees with /stats"
        answer = service.post("/predict", {"features": [0.1, 0.2, 0.3, 0.4]})
        assert answer.status_code == 200, "predictions go on without a broker"

        broker.start()
        stats = assert_learned_exactly_once(service, ledger, broker.bootstrap, topic_name)
        after = partition_zero(stats)
        assert after["next_offset"] == end_offset(broker.bootstrap, topic_name) == end
        assert after["lag"] == 0 and lag_metric(service, topic_name) == 0
        record_figures(
            artifacts_dir,
            "broker_sigkill",
            broker="apache",
            learned_at_kill=progress["next_offset"],
            lag_while_down=progress["lag"],
            learned=stats["seen"],
        )
    finally:
        service.stop()


def test_broker_restart_while_the_service_is_stopped(
    apache_broker_factory: ApacheBrokerFactory, topic_name: str, tmp_path: Path
) -> None:
    broker = apache_broker_factory().start()
    create_topics(broker, topic_name)
    service = make_service(tmp_path, broker, topic_name)
    plan = EventPlan(service.stream.synthetic(), partitions=1)  # type: ignore[attr-defined]
    ledger = Ledger(topic_name, publish(broker.bootstrap, topic_name, plan.valid(FIRST)))
    try:
        service.start()
        service.wait_for("drained", lambda s: s["seen"] >= FIRST and s["lag"] == 0, 60.0)
        code, _ = service.terminate(STOP_TIMEOUT_S)
        assert code == 0, service.log_text

        broker.stop()
        broker.start()
        ledger.extend(publish(broker.bootstrap, topic_name, plan.valid(SECOND, start=FIRST)))
        service.start()
        assert "restored checkpoint" in service.log_text, service.log_text
        stats = assert_learned_exactly_once(service, ledger, broker.bootstrap, topic_name)
        assert partition_zero(stats)["next_offset"] == FIRST + SECOND
    finally:
        service.stop()
