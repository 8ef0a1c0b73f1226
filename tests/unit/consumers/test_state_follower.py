"""The state follower on an in-memory state topic: newest valid record, skips, end of log."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

from consumers.state.follower import BOOTSTRAP_TIMEOUT_MS, FOLLOWER_CONFIG, StateFollower
from consumers.state.topic import encode_state_record, state_key
from tests.unit.consumers.state_fakes import (
    TICK_S,
    TOPIC,
    WAIT_S,
    FakeConsumer,
    FakeStateTopic,
    wait_until,
)

KEY = state_key("novikoff", "events")
OTHER_KEY = state_key("other-group", "events")


@pytest.fixture
def topic() -> FakeStateTopic:
    return FakeStateTopic()


@pytest.fixture
def accepted() -> list[bytes]:
    return []


@pytest.fixture
def follower(topic: FakeStateTopic, accepted: list[bytes]) -> Iterator[StateFollower]:
    def accept(payload: bytes) -> None:
        if payload.startswith(b"refuse"):
            raise ValueError("load_state refuses this payload")
        accepted.append(payload)

    follower = StateFollower(
        TOPIC, KEY, accept, topic.consumer, {"bootstrap_servers": ["x:1"]}, end_check_interval_s=0
    )
    follower.start()
    yield follower
    assert follower.stop(WAIT_S)


def test_the_consumer_reads_committed_records_outside_any_group(
    topic: FakeStateTopic, follower: StateFollower
) -> None:
    wait_until(lambda: bool(topic.configs), "the consumer")
    config = topic.configs[0]
    assert config["isolation_level"] == "read_committed"
    assert config["group_id"] is None
    assert config["enable_auto_commit"] is False
    assert config["bootstrap_servers"] == ["x:1"]
    assert {key: config[key] for key in FOLLOWER_CONFIG} == FOLLOWER_CONFIG
    assert config["bootstrap_timeout_ms"] == BOOTSTRAP_TIMEOUT_MS, "a stop never waits long"


def test_the_newest_record_of_the_key_is_taken_and_older_ones_of_a_poll_are_not_loaded(
    topic: FakeStateTopic, follower: StateFollower, accepted: list[bytes]
) -> None:
    topic.append_all(
        [
            *((KEY, encode_state_record(p, n)) for n, p in enumerate([b"v1", b"v2", b"v3"])),
            (OTHER_KEY, encode_state_record(b"another model", 9)),
        ]
    )
    # The follower may have caught up with the empty log before the append: wait for the state.
    wait_until(
        lambda: follower.state is not None and follower.caught_up_at is not None, "the records"
    )
    assert follower.state is not None and follower.state.payload == b"v3"
    assert follower.state.offset == 2
    assert accepted == [b"v3"], "one poll: only its newest record is loaded"
    topic.append(KEY, encode_state_record(b"v4", 3))
    # accepted grows before state is set (the payload is loaded first): wait for the state.
    wait_until(lambda: follower.state is not None and follower.state.payload == b"v4", "v4")
    assert accepted[-1] == b"v4"


def test_a_damaged_record_is_skipped_with_an_error_and_the_previous_state_kept(
    topic: FakeStateTopic,
    follower: StateFollower,
    accepted: list[bytes],
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic.append(KEY, encode_state_record(b"good", 1))
    wait_until(lambda: accepted == [b"good"], "the good record")
    damaged = bytearray(encode_state_record(b"newer", 2))
    damaged[-1] ^= 0xFF
    with caplog.at_level(logging.ERROR, logger="consumers.state.follower"):
        topic.append(KEY, bytes(damaged))
        topic.append(KEY, None)  # a tombstone is no state either
        wait_until(lambda: follower.skipped == 2, "the skips")
    assert follower.state is not None and follower.state.payload == b"good"
    assert accepted == [b"good"]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2 and all("keeping the previous state" in e for e in errors)
    assert any("checksum mismatch" in e for e in errors), errors
    assert any("tombstone" in e for e in errors), errors
    # Control: the same record undamaged is taken, so the skip above was the damage's doing.
    topic.append(KEY, encode_state_record(b"newer", 2))
    wait_until(lambda: accepted[-1] == b"newer", "the undamaged record")


def test_a_record_the_model_refuses_is_skipped_and_an_older_usable_one_of_the_poll_taken(
    topic: FakeStateTopic, follower: StateFollower, accepted: list[bytes]
) -> None:
    topic.append(KEY, encode_state_record(b"usable", 1))
    topic.append(KEY, encode_state_record(b"refuse me", 2))
    wait_until(lambda: follower.skipped == 1 and bool(accepted), "the skip")
    assert follower.state is not None and follower.state.payload == b"usable"
    assert accepted == [b"usable"]


def test_catching_up_stops_while_the_broker_is_down_and_resumes(
    topic: FakeStateTopic, follower: StateFollower
) -> None:
    topic.append(KEY, encode_state_record(b"v1", 1))
    wait_until(lambda: follower.caught_up_at is not None, "catching up")
    topic.down = True
    wait_until(lambda: follower.problem is not None, "the outage to show")
    frozen = follower.caught_up_at
    time.sleep(TICK_S * 10)
    assert follower.caught_up_at == frozen, "no confirmation while the broker is down"
    assert follower.state is not None and follower.state.payload == b"v1", "the model stays"
    topic.down = False
    wait_until(lambda: (follower.caught_up_at or 0) > (frozen or 0), "confirmation again")
    assert follower.problem is None


def test_a_missing_topic_is_retried(accepted: list[bytes]) -> None:
    attempts: list[str] = []

    class Missing(FakeConsumer):
        def partitions_for_topic(self, topic: str) -> set[int] | None:
            attempts.append(topic)
            return None

    follower = StateFollower(
        TOPIC, KEY, accepted.append, lambda **_: Missing(FakeStateTopic()), backoff_s=TICK_S
    )
    follower.start()
    try:
        wait_until(lambda: len(attempts) >= 2, "a retry")
        assert follower.problem is not None and "does not exist" in follower.problem
        assert follower.state is None and follower.caught_up_at is None
    finally:
        assert follower.stop(WAIT_S)


HELD_S = 0.2
"""How long a paused follower is watched reading nothing (many of its poll waits)."""


def test_a_paused_follower_reads_nothing_until_resumed(
    topic: FakeStateTopic, follower: StateFollower, accepted: list[bytes]
) -> None:
    topic.append(KEY, encode_state_record(b"one", 1))
    wait_until(lambda: accepted == [b"one"], "the first record")  # control: it reads
    follower.pause()
    wait_until(lambda: follower.paused, "the follower pausing")
    caught_up = follower.caught_up_at
    topic.append(KEY, encode_state_record(b"two", 2))
    follower.request_end_check()
    time.sleep(HELD_S)
    assert accepted == [b"one"] and follower.caught_up_at == caught_up
    follower.resume()
    assert not follower.paused
    wait_until(lambda: accepted == [b"one", b"two"], "the record committed while paused")
    state = follower.state
    assert state is not None and state.sequence == 2
