"""Failover and fencing: two ``novikoff serve`` learners in one group (Apache Kafka).

The first instance owns every partition, the second stands by. Then:

* **SIGKILLs of the owner mid-stream** (3 kills, 1 partition and 3 partitions): each time the
  standby takes over (after the group's session timeout) from the last committed state and the
  killed instance comes back as the new standby. Every produced record is learned or
  dead-lettered exactly once (dead letters read ``read_committed``); with 1 partition the model
  is bit-identical to the offline learner. The time from each kill to learning again is recorded
  in ``test-artifacts/reliability.jsonl``. Control: with ``transactions = false`` the standby
  relearns from scratch and repeats dead letters, which the same ledger check catches.
* **Warm standbys**: the standby follows the state topic, so each takeover restores the state it
  holds in memory (``restored state record ... (warm)`` in its log) once that state is confirmed
  the newest committed one. Control: with ``warm_standby = false`` the takeover reads the state
  topic (``restored state record`` without ``(warm)``); both record their kill-to-learning times.
* **A paused owner (SIGSTOP) that lost its partition and resumes** must not write: it is caught
  with work it never committed, the standby takes over, and when the paused one resumes its
  producer is fenced: nothing of its uncommitted work is visible ``read_committed`` (ledger exact,
  model bit-identical). Its rejoining may void one transaction of the new owner too (KIP-447:
  offsets of a stale group generation are refused); that work is then learned again, once.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from consumers.state.topic import decode_state_record, state_key
from learning import load_state
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
from tests.support.running_service import TEST_GROUP_TIMING
from tests.support.state_records import read_raw_state_records

pytestmark = pytest.mark.integration

COMMITTED = "read_committed"
TRANSACTIONS_ENV = "NOVIKOFF_KAFKA__TRANSACTIONS"
WARM_ENV = "NOVIKOFF_KAFKA__WARM_STANDBY"
WARM_RESTORE = re.compile(r"restored state record \S+@\d+ \(warm\)")
STATE_RESTORE = re.compile(r"restored state record \S+@\d+")
FOLLOWING = "caught up with the state topic"
"""A standby's follower logs this once it holds the newest committed state: it is warm."""

EVENTS = 20_000
POISON_EVERY = 100
RATE = 4_000.0
"""Records published per second: the stream lasts ~5 s, longer than the takeover."""
CHECKPOINT_TOML = "[checkpoint]\nevery_events = 1000\nevery_seconds = 1.0\n"
KILL_AT = 0.3
"""The owner is paused once it has handled this share of the stream."""
LOOKAHEAD = 2_000
"""The publisher runs at most this far past the next kill point, so every kill is mid-stream."""
DRAIN_TIMEOUT_S = 180.0
TAKEOVER_TIMEOUT_S = 90.0
POLL_S = 0.02
ASSIGNED_LOGS = ("owner of [", "assigned [")
"""What an instance logs when the group gives it partitions (with and without transactions)."""
ZOMBIE_LOGS = ("not committed", "dead-letter write failed", "lost; checkpointing")
"""What a resumed zombie logs when it finds it was replaced: a failed commit, a failed
dead-letter write (its producer is fenced), or the partitions lost."""
CHEAP_POISON = tuple(k for k in poison_catalogue() if k.value is None or len(k.value) < 1000)


def handled(stats: dict[str, Any]) -> int:
    return int(stats["seen"]) + int(sum(stats["invalid"].values()))


def wait_log(service: FaultyService, text: str, timeout_s: float = TAKEOVER_TIMEOUT_S) -> None:
    """Wait until the current incarnation's log shows ``text``."""
    deadline = time.monotonic() + timeout_s
    while text not in service.log_text:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{text!r} not logged after {timeout_s}s; see {service.logs[-1]}")
        time.sleep(POLL_S)


def wait_any_log(
    service: FaultyService,
    texts: tuple[str, ...],
    after: int,
    timeout_s: float = TAKEOVER_TIMEOUT_S,
) -> str:
    """Wait until the log, past its first ``after`` characters, shows one of ``texts``."""
    deadline = time.monotonic() + timeout_s
    while True:
        tail = service.log_text[after:]
        found = [text for text in texts if text in tail]
        if found:
            return found[0]
        if time.monotonic() > deadline:
            raise TimeoutError(f"none of {texts} logged after {timeout_s}s; see {service.logs[-1]}")
        time.sleep(POLL_S)


def past_point(
    owner: FaultyService, standby: FaultyService, point: int, timeout_s: float = 60.0
) -> tuple[FaultyService, FaultyService]:
    """Wait until one of the two has handled ``point`` records; (that one, the other).

    Without transactions the group's range assignor, not seniority, picks who learns.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if handled(owner.stats()) >= point:
            return owner, standby
        if handled(standby.stats()) >= point:
            return standby, owner
        time.sleep(POLL_S)
    raise TimeoutError(f"neither instance handled {point} records in {timeout_s}s")


def _instances(
    tmp_path: Path, bootstrap: str, topic: str, stream: ConfiguredStream, env: dict[str, str]
) -> tuple[FaultyService, FaultyService]:
    group = f"{topic}-group"
    made = [
        FaultyService.in_workdir(
            tmp_path, name, bootstrap=bootstrap, topic=topic, stream=stream, group_id=group, env=env
        )
        for name in ("owner", "standby")
    ]
    return made[0], made[1]


def _publisher(
    bootstrap: str, topic: str, stream: ConfiguredStream, partitions: int = 1
) -> PacedPublisher:
    plan = EventPlan(stream.synthetic(), partitions=partitions)
    poison = [CHEAP_POISON[i % len(CHEAP_POISON)] for i in range(EVENTS // POISON_EVERY)]
    planned = plan.mixed(EVENTS - len(poison), poison, seed=5)
    return PacedPublisher(bootstrap, topic, planned, RATE)


def _drained(stats: dict[str, Any]) -> dict[str, Any] | None:
    return stats if handled(stats) >= EVENTS and stats["lag"] == 0 else None


def _drained_owner(members: tuple[FaultyService, ...]) -> tuple[FaultyService, dict[str, Any]]:
    """The member that owns the partition once the stream is drained, and its stats. After a
    fenced zombie rejoins the group the rebalance may give it the partition back: it then
    restores the state topic's latest record and goes on from there."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    last: dict[int, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        for number, member in enumerate(members):
            try:
                stats = last[number] = member.stats()
            except httpx.TransportError:
                continue
            if _drained(stats) and stats["partitions"]:
                return member, stats
        time.sleep(POLL_S)
    raise TimeoutError(f"no member drained after {DRAIN_TIMEOUT_S}s: {last}")


def _committed_seen(bootstrap: str, topic: str, group: str) -> int:
    values = read_raw_state_records(
        bootstrap, f"{topic}.state", state_key(group, topic), "read_committed"
    )
    if not values:
        return 0
    learner, _, _ = load_state(decode_state_record(values[-1]))
    return learner.n_seen


@pytest.mark.parametrize(
    ("partitions", "kills", "transactions", "warm"),
    [(1, 3, True, True), (3, 3, True, True), (1, 1, True, False), (1, 1, False, False)],
    ids=["1-partition", "3-partitions", "control-cold-standby", "control-off"],
)
def test_sigkill_of_the_owner_fails_over_to_the_standby_exactly_once(
    partitions: int,
    kills: int,
    transactions: bool,
    warm: bool,
    kafka_bootstrap: str,
    topic_name: str,
    tmp_path: Path,
    artifacts_dir: Path,
) -> None:
    stream = ConfiguredStream(dim=4, seed=13, extra_toml=CHECKPOINT_TOML)
    settings = load_settings(kafka={"bootstrap_servers": kafka_bootstrap})
    ensure_topics(settings.kafka, [topic_name], partitions=partitions)
    ensure_topics(settings.kafka, [f"{topic_name}.dlq"])
    env = {TRANSACTIONS_ENV: str(transactions).lower(), WARM_ENV: str(warm).lower()}
    owner, standby = _instances(tmp_path, kafka_bootstrap, topic_name, stream, env)
    publisher = _publisher(kafka_bootstrap, topic_name, stream, partitions)
    takeovers: list[dict[str, float]] = []
    restores: list[str] = []
    """The standby's log of each takeover, from the kill on."""
    try:
        owner.start()
        wait_any_log(owner, ASSIGNED_LOGS, after=0)
        standby.start()
        publisher.start()
        for number in range(1, kills + 1):
            point = int(EVENTS * number / (kills + 1))
            publisher.allow(point + LOOKAHEAD)
            owner, standby = past_point(owner, standby, point)
            standing = handled(standby.stats())
            owned = owner.stats()
            at_kill = handled(owned)
            if transactions:
                # /stats lists only the partitions an instance owns.
                assert len(owned["partitions"]) == partitions, owned["partitions"]
                assert standby.stats()["partitions"] == []
            if warm:
                wait_log(standby, FOLLOWING)
            from_kill = len(standby.log_text)
            owner.kill()
            killed_at = time.monotonic()
            standby.wait_for(
                "taking over", lambda s, h=standing: handled(s) != h, TAKEOVER_TIMEOUT_S, POLL_S
            )
            changed_s = time.monotonic() - killed_at
            standby.wait_for(
                "caught up", lambda s, h=at_kill: handled(s) >= h, TAKEOVER_TIMEOUT_S, POLL_S
            )
            restores.append(standby.log_text[from_kill:])
            takeovers.append(
                {
                    "handled_at_kill": at_kill,
                    "kill_to_standby_state_change_s": round(changed_s, 2),
                    "kill_to_caught_up_s": round(time.monotonic() - killed_at, 2),
                }
            )
            if number < kills:
                owner.start()  # the killed machine comes back, as the new standby
                wait_log(owner, "consumer connected")
                owner, standby = standby, owner
        ledger = Ledger(topic_name, publisher.join())
        stats = standby.wait_for("drained", _drained, DRAIN_TIMEOUT_S)
        letters = read_dead_letters(
            kafka_bootstrap, f"{topic_name}.dlq", len(ledger.poison), isolation_level=COMMITTED
        )
        report = ledger.check(stats, letters)
        assert report.missing == [], report.summary()
        if partitions == 1:
            X, y = ledger.valid_arrays(0)
            assert served_model(standby) == offline_expectation(stream, X, y)
        if transactions:
            assert report.problems == [], report.problems
            assert report.duplicate_dead_letters == 0, report.summary()
            assert "restored state record" in standby.log_text, standby.log_text
            for log in restores:
                # Every takeover restored a state record: from memory exactly when warm.
                assert STATE_RESTORE.search(log), log
                assert bool(WARM_RESTORE.search(log)) is warm, log
            record_figures(
                artifacts_dir,
                "failover",
                partitions=partitions,
                warm_standby=warm,
                produced=report.produced,
                learned=report.learned,
                dead_lettered=report.dead_lettered,
                repeated_dead_letters=report.duplicate_dead_letters,
                takeovers=takeovers,
                session_timeout_ms=TEST_GROUP_TIMING["session_timeout_ms"],
            )
        else:
            assert report.duplicate_dead_letters > 0, report.summary()
    finally:
        publisher.cancel()
        owner.stop()
        standby.stop()


def test_a_paused_owner_that_lost_its_partition_is_fenced(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    stream = ConfiguredStream(dim=4, seed=17, extra_toml=CHECKPOINT_TOML)
    settings = load_settings(kafka={"bootstrap_servers": kafka_bootstrap})
    ensure_topics(settings.kafka, [topic_name, f"{topic_name}.dlq"])
    group = f"{topic_name}-group"
    owner, standby = _instances(
        tmp_path, kafka_bootstrap, topic_name, stream, {TRANSACTIONS_ENV: "true"}
    )
    publisher = _publisher(kafka_bootstrap, topic_name, stream)
    try:
        owner.start()
        wait_any_log(owner, ASSIGNED_LOGS, after=0)
        standby.start()
        publisher.start()
        publisher.allow(EVENTS)
        owner.wait_for("past the pause point", lambda s: handled(s) >= KILL_AT * EVENTS, 60.0)
        # Pause the owner at a moment it holds work it has not committed (control: there is
        # something a zombie could write).
        while True:
            learned = int(owner.stats()["seen"])
            os.kill(owner.pid, signal.SIGSTOP)
            committed = _committed_seen(kafka_bootstrap, topic_name, group)
            if committed < learned:
                break
            os.kill(owner.pid, signal.SIGCONT)
            time.sleep(POLL_S)
        standing = handled(standby.stats())
        standby.wait_for(
            "taking over", lambda s: handled(s) > max(standing, learned), TAKEOVER_TIMEOUT_S
        )
        os.kill(owner.pid, signal.SIGCONT)
        resumed_at = len(owner.log_text)
        zombie_saw = wait_any_log(owner, ZOMBIE_LOGS, after=resumed_at)
        ledger = Ledger(topic_name, publisher.join())
        last_owner, stats = _drained_owner((standby, owner))
        letters = read_dead_letters(
            kafka_bootstrap, f"{topic_name}.dlq", len(ledger.poison), isolation_level=COMMITTED
        )
        report = ledger.check(stats, letters)
        assert report.missing == [], report.summary()
        assert report.problems == [], report.problems
        assert report.duplicate_dead_letters == 0, report.summary()
        X, y = ledger.valid_arrays(0)
        assert served_model(last_owner) == offline_expectation(stream, X, y)
        assert _committed_seen(kafka_bootstrap, topic_name, group) == stats["seen"]
        # The resumed owner's own write failed: it found its producer fenced (a failed commit or
        # dead-letter write) or its partitions lost, and aborted.
        assert zombie_saw in ZOMBIE_LOGS
    finally:
        publisher.cancel()
        owner.stop()
        standby.stop()
