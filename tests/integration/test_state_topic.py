"""State in Kafka, exactly-once dead letters, a kill between sends and commit (Apache Kafka).

The service's state lives in the compacted state topic; dead letters, state record and offsets
of a checkpoint interval commit in one Kafka transaction. What must hold:

* a service on a machine that lost its checkpoint directory resumes from the state topic: every
  record applied exactly once, every dead letter exactly once (read ``read_committed``), and the
  model bit-identical to the offline learner. Control: with ``transactions = false`` the same run
  relearns from scratch and repeats dead letters, which the same checks catch;
* a SIGKILL after every record of a transaction was sent and before its commit leaves none of
  it visible ``read_committed`` (while ``read_uncommitted`` shows those records: the kill really
  came between sends and commit), and the restart applies everything exactly once.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from consumers.state.topic import decode_state_record, state_key
from learning import load_state
from service.settings import load_settings
from service.topics import ensure_topics
from tests.support.commit_fault import KILL_AT_COMMIT_ENV, SENT_MARKER
from tests.support.faults import ConfiguredStream, FaultyService, offline_expectation, served_model
from tests.support.ledger import EventPlan, Ledger, publish, read_dead_letters
from tests.support.poison import poison_catalogue
from tests.support.state_records import read_raw_state_records

pytestmark = pytest.mark.integration

COMMITTED = "read_committed"
TRANSACTIONS_ENV = "NOVIKOFF_KAFKA__TRANSACTIONS"
UNCOMMITTED = "read_uncommitted"

REPO = Path(__file__).resolve().parents[2]
FIRST = 3_000
SECOND = 2_000
POISON_EVERY = 100
CHECKPOINT_TOML = "[checkpoint]\nevery_events = 1000\nevery_seconds = 1.0\n"
DRAIN_TIMEOUT_S = 120.0
KILL_AT_COMMIT = 2
"""The second commit is killed: the first committed some state, so the restart restores it."""
CHEAP_POISON = tuple(k for k in poison_catalogue() if k.value is None or len(k.value) < 1000)


def handled(stats: dict[str, object]) -> int:
    invalid = stats["invalid"]
    assert isinstance(invalid, dict)
    return int(stats["seen"]) + int(sum(invalid.values()))  # type: ignore[call-overload]


def _plan(stream: ConfiguredStream, count: int, seed: int, plan: EventPlan) -> list[object]:
    poison = [CHEAP_POISON[i % len(CHEAP_POISON)] for i in range(count // POISON_EVERY)]
    return plan.mixed(count - len(poison), poison, seed=seed)  # type: ignore[return-value]


def _service(
    tmp_path: Path, name: str, bootstrap: str, topic: str, stream: ConfiguredStream, group: str
) -> FaultyService:
    return FaultyService.in_workdir(
        tmp_path, name, bootstrap=bootstrap, topic=topic, stream=stream, group_id=group
    )


@pytest.mark.parametrize("transactions", [True, False], ids=["transactions", "control-off"])
def test_a_lost_checkpoint_directory_is_restored_from_the_state_topic(
    transactions: bool, kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    stream = ConfiguredStream(dim=4, seed=7, extra_toml=CHECKPOINT_TOML)
    settings = load_settings(kafka={"bootstrap_servers": kafka_bootstrap})
    ensure_topics(settings.kafka, [topic_name, f"{topic_name}.dlq"])
    plan = EventPlan(stream.synthetic())
    produced = publish(kafka_bootstrap, topic_name, _plan(stream, FIRST, 1, plan))  # type: ignore[arg-type]
    group = f"{topic_name}-group"
    first = _service(tmp_path, "machine-1", kafka_bootstrap, topic_name, stream, group)
    first.extra_env[TRANSACTIONS_ENV] = "true" if transactions else "false"
    second = _service(tmp_path, "machine-2", kafka_bootstrap, topic_name, stream, group)
    second.extra_env.update(first.extra_env)
    try:
        first.start()
        first.wait_for("first part", lambda s: handled(s) >= FIRST, DRAIN_TIMEOUT_S)
        first.stop()  # SIGTERM: the final checkpoint is committed
        shutil.rmtree(first.workdir)  # the machine is gone
        second.start()
        restored = second.log_text
        produced += publish(kafka_bootstrap, topic_name, _plan(stream, SECOND, 2, plan))  # type: ignore[arg-type]
        ledger = Ledger(topic_name, produced)
        total = FIRST + SECOND
        stats = second.wait_for(
            "drained",
            lambda s: s if handled(s) >= total and s["lag"] == 0 else None,
            DRAIN_TIMEOUT_S,
        )
        poison = len(ledger.poison)
        letters = read_dead_letters(
            kafka_bootstrap, f"{topic_name}.dlq", poison, isolation_level=COMMITTED
        )
        report = ledger.check(stats, letters)
        assert report.missing == [], report.summary()
        X, y = ledger.valid_arrays(0)
        assert served_model(second) == offline_expectation(stream, X, y)
        if transactions:
            assert "restored state record" in restored, restored
            assert report.problems == [], report.problems
            assert report.duplicate_dead_letters == 0, report.summary()
        else:
            assert "NO usable checkpoint" in restored, restored
            assert report.duplicate_dead_letters > 0, report.summary()
    finally:
        first.stop()
        second.stop()


class CommitKilledService(FaultyService):
    """``novikoff serve`` that SIGKILLs itself between a transaction's sends and its commit."""

    def _command(self) -> list[str]:
        return [sys.executable, "-m", "tests.support.commit_fault"]


def test_a_kill_between_the_sends_and_the_commit_leaves_nothing_of_the_batch(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    stream = ConfiguredStream(dim=4, seed=9, extra_toml=CHECKPOINT_TOML)
    settings = load_settings(kafka={"bootstrap_servers": kafka_bootstrap})
    ensure_topics(settings.kafka, [topic_name, f"{topic_name}.dlq"])
    plan = EventPlan(stream.synthetic())
    produced = publish(kafka_bootstrap, topic_name, _plan(stream, FIRST, 3, plan))  # type: ignore[arg-type]
    ledger = Ledger(topic_name, produced)
    group = f"{topic_name}-group"
    killed = CommitKilledService.in_workdir(
        tmp_path,
        "serve",
        bootstrap=kafka_bootstrap,
        topic=topic_name,
        stream=stream,
        group_id=group,
        env={
            KILL_AT_COMMIT_ENV: str(KILL_AT_COMMIT),
            "PYTHONPATH": str(REPO),
            TRANSACTIONS_ENV: "true",
        },
    )
    service = _service(tmp_path, "restart", kafka_bootstrap, topic_name, stream, group)
    service.extra_env[TRANSACTIONS_ENV] = "true"
    dlq = f"{topic_name}.dlq"
    state_topic = f"{topic_name}.state"
    try:
        killed.start(wait_ready=False)
        killed.wait_dead(DRAIN_TIMEOUT_S)
        assert SENT_MARKER in killed.log_text, killed.log_text
        committed = read_dead_letters(kafka_bootstrap, dlq, 0, isolation_level=COMMITTED)
        uncommitted = read_dead_letters(kafka_bootstrap, dlq, 0, isolation_level=UNCOMMITTED)
        # Control: the killed transaction's dead letters reached the broker ...
        assert len(uncommitted) > len(committed)
        key = state_key(group, topic_name)
        states = read_raw_state_records(kafka_bootstrap, state_topic, key, COMMITTED)
        all_states = read_raw_state_records(kafka_bootstrap, state_topic, key, UNCOMMITTED)
        # ... and so did its state record, which read_committed readers never see.
        assert len(all_states) == len(states) + 1, (len(all_states), len(states))
        assert len(states) == KILL_AT_COMMIT - 1
        learned_committed, _, _ = load_state(decode_state_record(states[-1]))
        learned_killed, _, _ = load_state(decode_state_record(all_states[-1]))
        assert learned_killed.n_seen > learned_committed.n_seen

        service.start()
        assert "restored state record" in service.log_text, service.log_text
        stats = service.wait_for(
            "drained",
            lambda s: s if handled(s) >= FIRST and s["lag"] == 0 else None,
            DRAIN_TIMEOUT_S,
        )
        letters = read_dead_letters(
            kafka_bootstrap, dlq, len(ledger.poison), isolation_level=COMMITTED
        )
        report = ledger.check(stats, letters)
        assert report.missing == [], report.summary()
        assert report.problems == [], report.problems
        assert report.duplicate_dead_letters == 0, report.summary()
        # Control: the aborted dead letters are still in the log, hidden from read_committed.
        everything = read_dead_letters(
            kafka_bootstrap, dlq, len(ledger.poison), isolation_level=UNCOMMITTED
        )
        assert len(everything) > len(letters)
        X, y = ledger.valid_arrays(0)
        assert served_model(service) == offline_expectation(stream, X, y)
    finally:
        killed.stop()
        service.stop()
