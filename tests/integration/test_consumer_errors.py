"""An error retrying cannot fix, on a real broker: the service subscribes to a topic that does not
exist.

``novikoff serve`` must say so: ``/readyz`` answers 503 naming the missing topic and the fix,
``novikoff_consumer_errors_total{kind="unknown_topic"}`` counts it, the log has one ERROR line for
it however long it lasts, and ``POST /predict`` keeps answering. Once the topic is created and
events are produced, the service becomes ready and learns them all, without a restart.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from kafka import KafkaConsumer, KafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from consumers.kafka_clients import RunnerSettings, kafka_consumer
from service.cli.synthetic import SyntheticStream
from service.settings import load_settings
from service.topics import ensure_topics
from tests.support.running_service import RunningService, Stream

pytestmark = pytest.mark.integration

GRACE_S = 1.0
"""The service's ``kafka.missing_topic_grace_seconds`` here (10 s by default)."""
FAULT_TIMEOUT_S = 60.0
WATCH_S = 5.0
"""How long the service is watched while the topic is missing (several backoff periods)."""
POLL_S = 0.2
EVENTS = 500
STREAM = Stream(dim=4, seed=11, malformed=0.0)
ERROR_LINE = "consumer cannot learn:"


def consumer_errors(service: RunningService, kind: str) -> float:
    for family in text_string_to_metric_families(service.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "novikoff_consumer_errors_total" and sample.labels == {"kind": kind}:
                return float(sample.value)
    raise AssertionError(f"no novikoff_consumer_errors_total{{kind={kind!r}}} sample")


def wait_for(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except httpx.TransportError:
            pass
        time.sleep(POLL_S)
    raise AssertionError(f"not {what} after {timeout_s}s")


def all_error_lines(log: Path) -> list[str]:
    return [line for line in log.read_text(errors="replace").splitlines() if " ERROR " in line]


def error_lines(log: Path) -> list[str]:
    return [line for line in log.read_text(errors="replace").splitlines() if ERROR_LINE in line]


def test_a_missing_topic_is_reported_with_its_fix_then_learned_once_created(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    log = tmp_path / "serve.log"
    service = RunningService(
        tmp_path,
        kafka_bootstrap,
        topic_name,
        STREAM,
        log,
        create_topics=False,
        wait_until_ready=False,
        extra_env={"NOVIKOFF_KAFKA__MISSING_TOPIC_GRACE_SECONDS": str(GRACE_S)},
    )
    with service:
        wait_for(
            lambda: "consumer_error" in service.get("/readyz").json(),
            FAULT_TIMEOUT_S,
            "reporting the missing topic",
        )
        time.sleep(WATCH_S)
        readyz = service.get("/readyz")
        assert readyz.status_code == 503
        assert readyz.headers["content-type"].startswith("application/problem+json")
        problem = readyz.json()
        fault = problem["consumer_error"]
        assert fault["kind"] == "unknown_topic"
        assert f"topic {topic_name!r} does not exist" in fault["cause"]
        assert f"--create --topic {topic_name}" in fault["fix"]
        assert fault["cause"] in problem["detail"] and fault["fix"] in problem["detail"]
        assert consumer_errors(service, "unknown_topic") >= 1
        predicted = service.post("/predict", {"features": [0.5, -1.0, 2.0, 0.0]})
        assert predicted.status_code == 200, predicted.text
        lines = error_lines(log)
        assert len(lines) == 1, lines
        assert topic_name in lines[0] and "fix: create it" in lines[0]
        # No other ERROR line repeats the cause (kafka-python's own are dropped).
        assert [line for line in all_error_lines(log) if topic_name in line] == lines

        kafka = load_settings(kafka={"bootstrap_servers": kafka_bootstrap}).kafka
        ensure_topics(kafka, [topic_name, f"{topic_name}.dlq"], partitions=1)
        producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
        try:
            synthetic = SyntheticStream(
                dim=STREAM.dim, seed=STREAM.seed, margin=STREAM.margin, noise=STREAM.noise
            )
            for _, value in synthetic.records(EVENTS):
                producer.send(topic_name, value=value)
            producer.flush()
        finally:
            producer.close()
        service.wait_ready()
        stats = service.wait_drained(EVENTS)
        assert stats["seen"] == EVENTS
        assert "consumer_error" not in service.get("/readyz").text
        # The episode ended as it began: with the one line.
        assert len(error_lines(log)) == 1


def test_the_consumer_asks_for_no_topic_creation_in_its_metadata_requests(
    kafka_bootstrap: str,
) -> None:
    settings = RunnerSettings(
        topic="t", consumer_config={"bootstrap_servers": kafka_bootstrap, "group_id": "g"}
    )
    consumer = kafka_consumer(settings)
    try:
        assert consumer._cluster.config["allow_auto_create_topics"] is False  # type: ignore[attr-defined]
    finally:
        consumer.close()
    # Control: kafka-python 3.0.12 alone keeps the option from its metadata requests, which then
    # ask the broker to create the subscribed topic (once fixed upstream, the workaround can go).
    plain = KafkaConsumer(**settings.kafka_consumer_config())
    try:
        assert plain._cluster.config["allow_auto_create_topics"] is True
    finally:
        plain.close()
