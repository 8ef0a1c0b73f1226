"""Which records the events consumer reads: ``read_committed`` whenever novikoff transacts.

An upstream producer's aborted transaction must never be learned in exactly-once mode (Kafka
Streams' exactly-once processing reads its input the same way); the at-least-once mode keeps
Kafka's consumer default. The broker-level behaviour is asserted in
``tests/integration/test_consumer_isolation.py``.
"""

from __future__ import annotations

from consumers.kafka_clients import RunnerSettings
from consumers.state.topic import READ_COMMITTED
from consumers.transactions import TransactionSettings

CONSUMER = {"bootstrap_servers": "127.0.0.1:9092", "group_id": "g"}


def test_exactly_once_mode_reads_only_committed_records() -> None:
    settings = RunnerSettings(
        topic="events",
        consumer_config=CONSUMER,
        transactions=TransactionSettings("events.state", "events"),
    )
    assert settings.kafka_consumer_config()["isolation_level"] == READ_COMMITTED


def test_exactly_once_mode_overrides_a_configured_read_uncommitted() -> None:
    settings = RunnerSettings(
        topic="events",
        consumer_config={**CONSUMER, "isolation_level": "read_uncommitted"},
        transactions=TransactionSettings("events.state", "events"),
    )
    assert settings.kafka_consumer_config()["isolation_level"] == READ_COMMITTED


def test_at_least_once_mode_keeps_the_consumer_default() -> None:
    """Control: without transactions nothing is forced (kafka-python's default applies)."""
    settings = RunnerSettings(topic="events", consumer_config=CONSUMER)
    assert "isolation_level" not in settings.kafka_consumer_config()
