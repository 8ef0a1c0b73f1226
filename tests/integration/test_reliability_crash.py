"""Crash safety: SIGKILL ``novikoff serve`` three times mid-stream, restart it, lose nothing.

A 50,000-record stream (valid events plus a sprinkling of poison) is published first; the service
then consumes it and is killed with SIGKILL three times, each time after at least 20% more of the
stream than at the previous kill, at seeded random points (the seed is in every failure message;
``NOVIKOFF_FAULT_SEED`` replays one). Checkpoints come every two polls, and each kill is
made at a moment when the service has learned events its newest checkpoint lacks (the process is
frozen while the test compares them), so every restart must re-apply records, exactly once.

What must hold after the last restart drains the stream:

* every produced record was applied exactly once: per partition, the service's applied offset
  ranges cover every produced offset, and its learned / rejected counts equal the valid / poison
  records produced there (a record applied twice would be counted twice);
* every poison record is in the dead-letter topic with its reason (a crash may repeat a dead
  letter, never lose one);
* learned + dead-lettered = produced;
* with one partition, the model, counters and bound are bit-identical to an uninterrupted run.
"""

from __future__ import annotations

import os
import random
import re
import time
from pathlib import Path
from typing import Any

import pytest

from service.settings import load_settings
from service.topics import ensure_topics
from tests.support.faults import ConfiguredStream, FaultyService, offline_expectation, served_model
from tests.support.ledger import (
    EventPlan,
    Ledger,
    PacedPublisher,
    read_dead_letters,
    record_figures,
)
from tests.support.poison import poison_catalogue

pytestmark = pytest.mark.integration

EVENTS = 50_000
KILLS = 3
MIN_PROGRESS_STEP = 0.20
MAX_PROGRESS_STEP = 0.27
POISON_EVERY = 1_000
"""One poison record per this many records (50 in the stream)."""
CHECKPOINT_TOML = "[checkpoint]\nevery_events = 4000\nevery_seconds = 1.0\n"
"""Checkpoints span two polls (2,000 records each), so most kills land between checkpoints and
the restart must re-apply the records after the last one, exactly once."""
MAX_KILL_DELAY_S = 0.1
"""A random delay after the threshold is seen, so kills do not line up with batch boundaries."""
RATE = 5_000.0
"""Records published per second: a quarter of what the service learns per second here, so it
keeps up and every kill lands mid-stream."""
LOOKAHEAD = 2_000
"""The publisher runs at most this far past the next kill point, so a kill can never miss the
stream (three kills end at most at 81% + 3 x 4% of it)."""
DRAIN_TIMEOUT_S = 120.0
QUIET_S = 1.0
"""After the drain, nothing more may be applied: a re-applied record would show up here."""
RESTORED = re.compile(r"restored checkpoint \S+: (\d+) events learned")
CHEAP_POISON = tuple(k for k in poison_catalogue() if k.value is None or len(k.value) < 1000)


def fault_seed() -> int:
    return int(os.environ.get("NOVIKOFF_FAULT_SEED") or random.SystemRandom().randrange(2**31))


class KillPlan:
    """Seeded random kill points, each at least 20% of the stream after the previous kill."""

    def __init__(self, seed: int, total: int) -> None:
        self._rng = random.Random(seed)
        self._total = total

    def next_point(self, previous_kill: int) -> tuple[int, float]:
        """Records handled at which to kill next, and a delay after that point is seen."""
        step = self._rng.uniform(MIN_PROGRESS_STEP, MAX_PROGRESS_STEP)
        return previous_kill + int(step * self._total), self._rng.uniform(0.0, MAX_KILL_DELAY_S)


def restored_seen(log: str) -> int:
    """Events learned in the checkpoint a restart resumed from (0 when there was none)."""
    found = RESTORED.search(log)
    if found is None:
        assert "NO usable checkpoint" in log, log
        return 0
    return int(found.group(1))


def handled(stats: dict[str, Any]) -> int:
    return int(stats["seen"]) + int(sum(stats["invalid"].values()))


def drained(total: int) -> Any:
    def check(stats: dict[str, Any]) -> bool:
        return handled(stats) >= total and stats["lag"] == 0

    return check


@pytest.mark.parametrize("partitions", [3, 1])
def test_sigkill_three_times_loses_nothing_and_applies_nothing_twice(
    partitions: int, kafka_bootstrap: str, topic_name: str, tmp_path: Path, artifacts_dir: Path
) -> None:
    started = time.monotonic()
    seed = fault_seed()
    context = f"seed {seed}, partitions {partitions}"
    stream = ConfiguredStream(
        dim=4, seed=seed % 1000, margin=0.05, noise=0.05, extra_toml=CHECKPOINT_TOML
    )
    settings = load_settings(kafka={"bootstrap_servers": kafka_bootstrap})
    ensure_topics(settings.kafka, [topic_name], partitions=partitions)
    ensure_topics(settings.kafka, [f"{topic_name}.dlq"])
    plan = EventPlan(stream.synthetic(), partitions=partitions)
    poison = [CHEAP_POISON[i % len(CHEAP_POISON)] for i in range(EVENTS // POISON_EVERY)]
    publisher = PacedPublisher(
        kafka_bootstrap, topic_name, plan.mixed(EVENTS - len(poison), poison, seed=seed), RATE
    )
    service = FaultyService(
        workdir=tmp_path,
        bootstrap=kafka_bootstrap,
        topic=topic_name,
        stream=stream,
        log_path=tmp_path / "serve.log",
        group_id=f"{topic_name}-group",
    )
    kills: list[tuple[int, int]] = []
    try:
        publisher.start()
        service.start()
        kill_plan = KillPlan(seed, EVENTS)
        previous = 0
        for number in range(1, KILLS + 1):
            point, delay = kill_plan.next_point(previous)
            publisher.allow(point + LOOKAHEAD)
            service.wait_for(
                f"past {point} for kill {number} ({context})",
                lambda s, p=point: handled(s) >= p,
                DRAIN_TIMEOUT_S,
                poll_s=0.005,
            )
            time.sleep(delay)
            at = handled(service.stats())
            learned, checkpointed = service.kill_past_checkpoint()
            assert at < EVENTS, f"{context}: kill {number} came after the stream ended"
            service.start()
            restored = restored_seen(service.log_text)
            assert restored == checkpointed, f"{context}: restored another checkpoint"
            assert restored < learned, f"{context}: kill {number} forced no replay"
            kills.append((learned, restored))
            previous = at
        ledger = Ledger(topic_name, publisher.join())
        assert len(ledger.records) == EVENTS
        service.wait_for("drained", drained(EVENTS), DRAIN_TIMEOUT_S)
        time.sleep(QUIET_S)
        stats = service.stats()
        assert handled(stats) == EVENTS, f"{context}: handled {handled(stats)}, kills {kills}"

        letters = read_dead_letters(kafka_bootstrap, f"{topic_name}.dlq", len(poison))
        report = ledger.check(stats, letters)
        assert report.missing == [], f"{context}: {report.summary()}"
        assert report.problems == [], f"{context}: {report.problems}; kills {kills}"
        for log in service.logs[1:]:
            text = log.read_text(errors="replace")
            assert "restored checkpoint" in text or "NO usable checkpoint" in text, log
        if partitions == 1:
            X, y = ledger.valid_arrays(0)
            assert served_model(service) == offline_expectation(stream, X, y), context
        record_figures(
            artifacts_dir,
            "sigkill",
            seed=seed,
            partitions=partitions,
            produced=report.produced,
            learned=report.learned,
            dead_lettered=report.dead_lettered,
            repeated_dead_letters=report.duplicate_dead_letters,
            missing=len(report.missing),
            kills=[
                {"learned_at_kill": at, "restored_seen": seen, "replayed_at_least": at - seen}
                for at, seen in kills
            ],
            torn_checkpoint_files_cleaned=service.all_logs.count("removing incomplete checkpoint"),
            bit_identical=partitions == 1,
            seconds=round(time.monotonic() - started, 1),
        )
    finally:
        service.stop()
        publisher.cancel()
