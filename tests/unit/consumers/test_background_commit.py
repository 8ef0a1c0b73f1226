"""Exactly-once checkpoints whose commit runs while the loop goes on (in-memory clients).

A periodic checkpoint's transaction is committed on the commit thread: the loop keeps learning
meanwhile, the next transaction begins only after that commit ended, and a failed commit voids
everything since the previous commit, including what was learned while it was under way. The
transactional producer here holds its first commit until the test lets it go (against Apache
Kafka, ``tests/integration/test_state_topic.py`` and ``test_reliability_outage.py`` cover the
real transactions).
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kafka.errors import ProducerFencedError

import consumers.runner
import consumers.transactions
from consumers.background_commit import BackgroundCommit
from consumers.engine import Engine
from consumers.runner import ConsumerRunner
from consumers.state.checkpoint import CheckpointStore
from consumers.state.topic import decode_state_record
from consumers.transactions import Owner, TransactionSettings
from tests.unit.consumers.fakes import FakeConsumer
from tests.unit.consumers.test_runner import TIMEOUT_S, ev, new_engine, settings, wait_until

EVENTS = 300
EVERY = 100
"""Checkpoint every this many events (the fake consumer polls 50 at a time)."""
HELD_S = 0.2
"""How long the control gives a stop that must wait for the held commit."""


@dataclass
class HeldProducer:
    """A kafka-python transactional producer stand-in whose first commit waits for ``gate``.

    ``fail_first`` makes that first commit fail (fenced) once the gate opens.
    """

    gate: threading.Event = field(default_factory=threading.Event)
    fail_first: bool = False
    calls: list[str] = field(default_factory=list)
    state_records: list[bytes] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    commits: int = 0

    def init_transactions(self) -> None:
        self.calls.append("init")

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send(self, topic: str, value: bytes | None = None, **_: Any) -> None:
        assert value is not None
        self.state_records.append(value)

    def flush(self, timeout: float | None = None) -> None:
        pass

    def send_offsets_to_transaction(self, offsets: dict[Any, Any], metadata: Any) -> None:
        (meta,) = offsets.values()
        self.offsets.append(meta.offset)

    def commit_transaction(self) -> None:
        self.commits += 1
        if self.commits == 1:
            self.calls.append("commit-start")
            assert self.gate.wait(TIMEOUT_S)
            if self.fail_first:
                raise ProducerFencedError()
            self.calls.append("commit-end")
        else:
            self.calls.append("commit")

    def abort_transaction(self) -> None:
        self.calls.append("abort")

    def close(self, timeout: float | None = None) -> None:
        self.calls.append("close")


def events_log() -> list[bytes]:
    """The ``EVENTS`` events of the in-memory partition."""
    return [ev(float(i % 7) - 3, 1 if i % 2 else -1) for i in range(EVENTS)]


def runner_over(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    producer: HeldProducer,
    consumer: FakeConsumer | None = None,
) -> tuple[ConsumerRunner, Engine]:
    """A transactional runner over ``consumer`` (default: one in-memory partition of
    :func:`events_log`)."""
    monkeypatch.setattr(consumers.transactions, "state_topic_candidate", lambda *args: None)
    monkeypatch.setattr(
        consumers.runner, "Owner", functools.partial(Owner, build_producer=lambda c: producer)
    )
    source = consumer or FakeConsumer({("t", 0): events_log()})
    engine = new_engine()
    runner = ConsumerRunner(
        engine,
        CheckpointStore(tmp_path),
        settings(
            checkpoint_every_events=EVERY,
            transactions=TransactionSettings("t.state", "t", warm_standby=False),
        ),
        consumer_factory=lambda s: source,
    )
    return runner, engine


def applied_in(state_record: bytes) -> int:
    """How many records the engine had applied in a committed state record."""
    return new_engine().load_payload(decode_state_record(state_record)).applied


def test_the_loop_learns_while_a_checkpoint_commits_and_the_next_waits_for_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    producer = HeldProducer()
    runner, engine = runner_over(monkeypatch, tmp_path, producer)
    runner.start()
    try:
        wait_until(lambda: engine.snapshot.seen >= 2 * EVERY)
        # Control: the first checkpoint's commit is really held...
        assert "commit-start" in producer.calls and "commit-end" not in producer.calls
        # ...and holds whoever must wait for it (the next checkpoint, the final one).
        assert not runner.stop(timeout=HELD_S)
    finally:
        producer.gate.set()
    assert runner.join(TIMEOUT_S)
    assert runner.final_checkpoint_ok is True
    held = producer.calls[producer.calls.index("commit-start") : producer.calls.index("commit-end")]
    assert "begin" not in held, "a transaction began while the previous commit was under way"
    # The held commit holds the first checkpoint only; what was learned meanwhile came later.
    assert producer.offsets[0] == EVERY
    assert applied_in(producer.state_records[0]) == EVERY
    assert producer.offsets[-1] == engine.next_offset("t", 0) == engine.applied
    assert applied_in(producer.state_records[-1]) == engine.applied


def test_a_failed_background_commit_voids_what_was_learned_meanwhile(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    producer = HeldProducer(fail_first=True)
    runner, engine = runner_over(monkeypatch, tmp_path, producer)
    caplog.set_level(logging.INFO, logger="consumers.runner")
    runner.start()
    try:
        wait_until(lambda: engine.snapshot.seen >= 2 * EVERY)
    finally:
        producer.gate.set()
    wait_until(lambda: engine.next_offset("t", 0) == EVENTS and producer.offsets[-1] == EVENTS)
    assert runner.stop(timeout=TIMEOUT_S)
    void = [r.getMessage() for r in caplog.records if "not committed" in r.getMessage()]
    assert len(void) == 1, void
    # The failed commit held the first 100; at least the next 100 were learned meanwhile.
    voided = int(void[0].split(", ")[1].split(" ")[0])
    assert voided >= 2 * EVERY
    assert "abort" in producer.calls
    # Learned again from the last commit (none): every event exactly once in the model.
    assert engine.snapshot.seen == engine.applied == EVENTS
    assert applied_in(producer.state_records[-1]) == EVENTS
    assert producer.offsets[1:] and all(
        applied_in(record) == offset
        for record, offset in zip(producer.state_records[1:], producer.offsets[1:], strict=True)
    )


def test_one_commit_at_a_time_and_each_outcome_handed_over_once() -> None:
    commits = BackgroundCommit()
    gate = threading.Event()
    commits.submit(lambda: int(gate.wait(TIMEOUT_S)), why="every_events", applied=5)
    assert commits.pending
    assert commits.settle(block=False) is None  # under way
    with pytest.raises(RuntimeError, match="already under way"):
        commits.submit(lambda: 2, why="interval", applied=1)
    gate.set()
    settled = commits.settle(block=True)
    assert settled is not None and (settled.sequence, settled.error) == (1, None)
    assert commits.settle(block=True) is None  # handed over once

    def fail() -> int:
        raise ProducerFencedError()

    commits.submit(fail, why="interval", applied=3)
    settled = commits.settle(block=True)
    assert settled is not None and settled.sequence is None
    assert isinstance(settled.error, ProducerFencedError)
    commits.close()
