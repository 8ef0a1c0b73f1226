"""SIGTERM mid-stream: the service stops within its deadline, checkpoints, commits, and after a
restart applies nothing twice.

Periodic checkpoints are effectively off here (every 10^6 events / hour), so the only checkpoint
that can hold the progress is the one SIGTERM writes.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from kafka import KafkaAdminClient

from service.settings import load_settings
from service.topics import ensure_topics
from tests.support.faults import (
    ConfiguredStream,
    FaultyService,
    checkpoints_on_disk,
    offline_expectation,
    served_model,
)
from tests.support.ledger import (
    EventPlan,
    Ledger,
    PacedPublisher,
    read_dead_letters,
    record_figures,
)

pytestmark = pytest.mark.integration

EVENTS = 30_000
STOP_AT = 10_000
RATE = 5_000.0
"""The publisher runs freely at this pace (6 s for the stream), so SIGTERM lands about 2 s in."""
FLOW_WINDOW_S = 1.0
"""Records must be acknowledged within this long before and after the signal: the stream was
flowing when it landed (a chunk goes every 0.05 s at this pace)."""
CHECKPOINT_TOML = "[checkpoint]\nevery_events = 1000000\nevery_seconds = 3600.0\n"
DEADLINE_S = 15.0
"""``service.shutdown_deadline_seconds`` (its default)."""
DRAIN_TIMEOUT_S = 90.0
COMMIT_EVENTS = 15_000
TRANSACTIONS_ENV = "NOVIKOFF_KAFKA__TRANSACTIONS"
RESTORED = re.compile(r"restored checkpoint (\S+): (\d+) events learned")


def committed_offsets(bootstrap: str, group_id: str) -> dict[tuple[str, int], int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        offsets = admin.list_group_offsets(group_id)[group_id]
    finally:
        admin.close()
    return {
        (tp.topic, tp.partition): meta.offset for tp, meta in offsets.items() if meta.offset >= 0
    }


def test_sigterm_mid_stream_checkpoints_commits_and_applies_nothing_twice(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path, artifacts_dir: Path
) -> None:
    settings = load_settings(kafka={"bootstrap_servers": kafka_bootstrap})
    ensure_topics(settings.kafka, [topic_name, f"{topic_name}.dlq"], partitions=1)
    stream = ConfiguredStream(dim=4, seed=3, margin=0.05, noise=0.05, extra_toml=CHECKPOINT_TOML)
    group = f"{topic_name}-group"
    service = FaultyService(
        workdir=tmp_path,
        bootstrap=kafka_bootstrap,
        topic=topic_name,
        stream=stream,
        log_path=tmp_path / "serve.log",
        group_id=group,
    )
    plan = EventPlan(stream.synthetic(), partitions=1)
    publisher = PacedPublisher(kafka_bootstrap, topic_name, plan.valid(EVENTS), RATE)
    try:
        service.start()
        publisher.start().allow(EVENTS)
        service.wait_for("mid-stream", lambda s: s["seen"] >= STOP_AT, DRAIN_TIMEOUT_S)
        signalled_at, sent_at_signal = time.monotonic(), publisher.sent
        code, elapsed = service.terminate(DEADLINE_S + 5.0)
        first_log = service.log_text
        assert code == 0, first_log
        assert elapsed < DEADLINE_S, f"took {elapsed:.1f}s to stop"
        assert "consumer stopped (final checkpoint written)" in first_log, first_log
        time.sleep(FLOW_WINDOW_S)
        assert sent_at_signal < EVENTS, "SIGTERM landed after the stream ended"
        assert publisher.flowing_at(signalled_at, FLOW_WINDOW_S), "the stream was not flowing"

        newest = checkpoints_on_disk(tmp_path / "state")[0]
        next_offset = newest.next_offsets[(topic_name, 0)]
        assert STOP_AT <= newest.seen == next_offset, "every applied event is in the checkpoint"
        assert committed_offsets(kafka_bootstrap, group) == {(topic_name, 0): next_offset}

        service.start()
        restored = RESTORED.search(service.log_text)
        assert restored is not None, service.log_text
        assert (restored.group(1), int(restored.group(2))) == (newest.path.name, newest.seen)
        ledger = Ledger(topic_name, publisher.join())
        service.wait_for(
            "drained", lambda s: s["seen"] >= EVENTS and s["lag"] == 0, DRAIN_TIMEOUT_S
        )
        time.sleep(1.0)
        stats = service.stats()
        report = ledger.check(stats, read_dead_letters(kafka_bootstrap, f"{topic_name}.dlq", 0))
        assert report.missing == [] and report.problems == [], report.problems
        X, y = ledger.valid_arrays(0)
        assert served_model(service) == offline_expectation(stream, X, y)
        record_figures(
            artifacts_dir,
            "sigterm",
            stopped_after_s=round(elapsed, 2),
            published_at_signal=sent_at_signal,
            deadline_s=DEADLINE_S,
            checkpointed=newest.seen,
            committed=next_offset,
            learned=stats["seen"],
            missing=len(report.missing),
        )
    finally:
        service.stop()
        publisher.cancel()


def test_partition_offsets_are_committed_after_the_checkpoint(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """Committed group offsets never run ahead of the checkpoint (they serve lag monitoring).

    Without transactions: with them the offsets commit with the state record, in Kafka, and the
    local checkpoint (a cache) is written after that commit.
    """
    settings = load_settings(kafka={"bootstrap_servers": kafka_bootstrap})
    ensure_topics(settings.kafka, [topic_name, f"{topic_name}.dlq"], partitions=3)
    stream = ConfiguredStream(
        dim=4, seed=4, extra_toml="[checkpoint]\nevery_events = 500\nevery_seconds = 0.5\n"
    )
    group = f"{topic_name}-group"
    service = FaultyService(
        workdir=tmp_path,
        bootstrap=kafka_bootstrap,
        topic=topic_name,
        stream=stream,
        log_path=tmp_path / "serve.log",
        group_id=group,
    )
    service.extra_env[TRANSACTIONS_ENV] = "false"
    plan = EventPlan(stream.synthetic(), partitions=3)
    publisher = PacedPublisher(kafka_bootstrap, topic_name, plan.valid(COMMIT_EVENTS), 3_000.0)
    try:
        service.start()
        publisher.start().allow(COMMIT_EVENTS)
        samples = 0
        while publisher.sent < COMMIT_EVENTS:
            committed = committed_offsets(kafka_bootstrap, group)
            on_disk = checkpoints_on_disk(tmp_path / "state")
            if on_disk and committed:
                newest = on_disk[0].next_offsets
                for key, offset in committed.items():
                    assert offset <= newest.get(key, 0), (key, offset, newest)
                samples += 1
            time.sleep(0.1)
        assert samples > 5
    finally:
        service.stop()
        publisher.cancel()
