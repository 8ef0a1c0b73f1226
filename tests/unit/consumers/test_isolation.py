"""Which records the events consumer reads: ``read_committed`` whenever novikoff transacts.

Mixing mode transacts every round, so its learners read their events ``read_committed`` too;
their catch-up with the contributions topic then takes its target from a ``read_uncommitted``
client (the high watermark).

An upstream producer's aborted transaction must never be learned in exactly-once mode (Kafka
Streams' exactly-once processing reads its input the same way); the at-least-once mode keeps
Kafka's consumer default. The broker-level behaviour is asserted in
``tests/integration/test_consumer_isolation.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka import TopicPartition

from consumers.engine import Engine
from consumers.kafka_clients import RunnerSettings
from consumers.mixing.options import MixingOptions
from consumers.mixing.runner import MixingRunner
from consumers.state.topic import READ_COMMITTED
from consumers.transactions import TransactionSettings
from learning import BoundTracker
from learning.mixing import DistributedBound
from tests.unit.consumers.test_mixing import learner

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


def test_a_transactional_caller_reads_only_committed_records() -> None:
    """Mixing mode transacts every round whatever ``transactions`` says (see below)."""
    settings = RunnerSettings(topic="events", consumer_config=CONSUMER)
    assert settings.kafka_consumer_config(transactional=True)["isolation_level"] == READ_COMMITTED


class RecordingConsumer:
    """A stand-in kafka-python consumer: keeps its config and which end offsets were asked."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = dict(config)
        self.end_offset_calls = 0

    def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        self.end_offset_calls += 1
        return dict.fromkeys(partitions, END_OFFSET)

    def position(self, tp: TopicPartition) -> int:
        return END_OFFSET

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


END_OFFSET = 7


def mixing_runner(*, learns: bool) -> tuple[MixingRunner, list[RecordingConsumer]]:
    built: list[RecordingConsumer] = []

    def build(config: Mapping[str, Any]) -> RecordingConsumer:
        built.append(RecordingConsumer(config))
        return built[-1]

    runner = MixingRunner(
        Engine(learner(), BoundTracker()),
        RunnerSettings(topic="events", consumer_config=CONSUMER),
        MixingOptions(round_events=10, round_seconds=0.0, contributions_topic="events.mixing"),
        learner,
        lambda partitions: DistributedBound([], partitions),
        consumer_builder=build,
        learns=learns,
    )
    runner._open()
    return runner, built


def test_a_mixing_learner_reads_events_committed_and_catches_up_to_the_high_watermark() -> None:
    """Its events are read ``read_committed`` (rounds are transactions); the catch-up target is a
    ``read_uncommitted`` client's end offset, the high watermark: the last stable offset could
    stop before a shard's newest contribution, behind another shard's open transaction."""
    runner, (follower, events, watermarks) = mixing_runner(learns=True)
    assert follower.config["isolation_level"] == READ_COMMITTED
    assert events.config["isolation_level"] == READ_COMMITTED
    assert "isolation_level" not in watermarks.config  # Kafka's default: read_uncommitted
    runner._catch_up()
    assert (watermarks.end_offset_calls, follower.end_offset_calls) == (1, 0)


def test_a_mixing_replica_catches_up_to_its_followers_end() -> None:
    """Control: a replica has only its follower, whose end offset is the last stable offset."""
    runner, built = mixing_runner(learns=False)
    (follower,) = built
    runner._catch_up()
    assert follower.end_offset_calls == 1
