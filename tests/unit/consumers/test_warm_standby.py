"""Warm standby: a takeover restores the followed state record only once it is confirmed newest.

The owner's follower runs on an in-memory state topic, and reading the state topic itself is
replaced by a stand-in that says it was asked (against Apache Kafka,
``tests/integration/test_failover.py`` checks the log of real takeovers).
"""

from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest

import consumers.transactions
from consumers.decoding.events import Record
from consumers.engine import Engine
from consumers.state.checkpoint import CheckpointStore
from consumers.state.topic import encode_state_record
from consumers.transactions import Owner, TransactionSettings
from learning import BoundTracker, DenseEncoder, LabelMap, Perceptron
from tests.unit.consumers.state_fakes import TOPIC, FakeStateTopic, wait_until

GROUP = "g"
LEARNED = 5
SEQUENCE = 7


class TopicReadError(Exception):
    """Raised by the stand-in for reading the state topic."""


@pytest.fixture(autouse=True)
def no_topic_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def read(*args: object) -> None:
        raise TopicReadError

    monkeypatch.setattr(consumers.transactions, "state_topic_candidate", read)


def _engine() -> Engine:
    return Engine(Perceptron(LabelMap({"1": 1, "-1": -1}), encoder=DenseEncoder(1)), BoundTracker())


def _learned_payload() -> bytes:
    engine = _engine()
    values = [orjson.dumps({"features": [1.0], "label": 1 - 2 * (i % 2)}) for i in range(LEARNED)]
    records = [Record("t", 0, i, value) for i, value in enumerate(values)]
    engine.apply(engine.decoder.decode_batch(records))
    return engine.checkpoint_bytes()[0]


def _owner(tmp_path: Path, topic: FakeStateTopic, warm: bool) -> tuple[Owner, Engine]:
    engine = _engine()
    settings = TransactionSettings(
        state_topic=TOPIC, model_id="t", warm_standby=warm, state_read_timeout_seconds=1.0
    )
    owner = Owner(
        engine,
        CheckpointStore(tmp_path),
        settings,
        GROUP,
        {},
        follower_consumer=topic.consumer,
    )
    return owner, engine


def test_a_takeover_restores_the_confirmed_followed_state(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = FakeStateTopic()
    owner, engine = _owner(tmp_path, topic, warm=True)
    topic.append(owner.key, encode_state_record(_learned_payload(), SEQUENCE))
    owner.start_following()
    try:
        wait_until(lambda: owner.warm, "the follower holding the newest record")
        caplog.set_level(logging.INFO, logger="consumers.engine")
        report = owner.restore()
    finally:
        owner.stop_following(timeout=5.0)
    assert report is not None and report.sequence == SEQUENCE
    assert engine.applied == LEARNED
    assert any("(warm)" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("case", ["warm-standby-off", "follower-cut-off"])
def test_an_unconfirmed_or_disabled_warm_state_is_not_used(tmp_path: Path, case: str) -> None:
    topic = FakeStateTopic()
    owner, engine = _owner(tmp_path, topic, warm=case != "warm-standby-off")
    topic.append(owner.key, encode_state_record(_learned_payload(), SEQUENCE))
    owner.start_following()
    try:
        if case == "follower-cut-off":
            wait_until(lambda: owner.warm, "the follower holding the newest record")
            topic.down = True  # a newer record may be committed that it cannot see
            wait_until(lambda: not owner.warm, "the follower reporting the outage")
        with pytest.raises(TopicReadError):
            owner.restore()  # it reads the state topic instead
    finally:
        owner.stop_following(timeout=5.0)
    assert engine.applied == 0


@pytest.mark.parametrize("others", ["empty-topic", "another-key", "damaged-record"])
def test_a_confirmed_follower_without_a_record_of_the_key_spares_the_topic_read(
    tmp_path: Path, others: str
) -> None:
    topic = FakeStateTopic()
    owner, engine = _owner(tmp_path, topic, warm=True)
    if others == "another-key":
        topic.append(b"another key", encode_state_record(_learned_payload(), SEQUENCE))
    if others == "damaged-record":
        topic.append(owner.key, b"not a state record")
    owner.start_following()
    try:
        wait_until(lambda: owner.warm, "the follower at the end of the state topic")
        if others == "damaged-record":
            # Control: a record of the key it could not verify may hide an older good one.
            with pytest.raises(TopicReadError):
                owner.restore()
            return
        report = owner.restore()  # no TopicReadError: the topic is not read again
    finally:
        owner.stop_following(timeout=5.0)
    assert report is not None and report.sequence is None and report.seen == 0
    assert engine.applied == 0


class _Producer:
    """A kafka-python producer stand-in: registering is all a takeover asks of it."""

    def init_transactions(self) -> None:
        pass

    def close(self, timeout: float | None = None) -> None:
        pass


def test_the_owner_pauses_its_follower_while_it_owns(tmp_path: Path) -> None:
    topic = FakeStateTopic()
    engine = _engine()
    owner = Owner(
        engine,
        CheckpointStore(tmp_path),
        TransactionSettings(state_topic=TOPIC, model_id="t", state_read_timeout_seconds=1.0),
        GROUP,
        {},
        build_producer=lambda config: _Producer(),
        follower_consumer=topic.consumer,
    )
    topic.append(owner.key, encode_state_record(_learned_payload(), SEQUENCE))
    owner.start_following()
    try:
        wait_until(lambda: owner.warm, "the follower holding the newest record")
        assert owner.following  # control: a standby follows
        report = owner.activate()
        assert report is not None and report.sequence == SEQUENCE, "restored warm"
        assert engine.applied == LEARNED
        wait_until(lambda: not owner.following, "the owner's follower pausing")
        owner.discard()  # the partitions may be lost: follow again
        assert owner.following
        owner.activate()
        wait_until(lambda: not owner.following, "the owner's follower pausing again")
        owner.close()
        assert owner.following
    finally:
        owner.stop_following(timeout=5.0)
