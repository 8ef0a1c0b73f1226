"""State-topic records: the checkpoint frame around dump_state bytes, keyed by group and model."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from consumers.state.checkpoint import frame
from consumers.state.topic import (
    StateRecordError,
    decode_state_record,
    default_state_topic,
    encode_state_record,
    state_key,
    state_record_sequence,
)
from learning import BoundTracker, DenseEncoder, LabelMap, Perceptron, dump_state, load_state


def _state_bytes() -> bytes:
    learner = Perceptron(LabelMap({"1": 1, "-1": -1}), encoder=DenseEncoder(2))
    learner.learn_one([1.0, -2.0], "1")
    return dump_state(learner, BoundTracker())


def test_a_record_round_trips_a_dump_state_payload_bit_exactly() -> None:
    payload = _state_bytes()
    value = encode_state_record(payload, 3)
    assert decode_state_record(value) == payload
    assert state_record_sequence(value) == 3
    learner, _, _ = load_state(decode_state_record(value))
    assert learner.n_seen == 1


def test_the_value_is_the_checkpoint_frame() -> None:
    payload = _state_bytes()
    assert encode_state_record(payload, 9) == frame(payload, 9)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda v: v[:-1], "truncated or torn"),
        (lambda v: v[:-1] + bytes([v[-1] ^ 1]), "checksum mismatch"),
        (lambda v: b"XXXXXXXX" + v[8:], "not a novikoff checkpoint"),
        (lambda v: v[:10], "shorter than"),
    ],
)
def test_a_damaged_record_raises_with_the_reason(
    damage: Callable[[bytes], bytes], reason: str
) -> None:
    value = encode_state_record(_state_bytes(), 1)
    decode_state_record(value)  # control: the undamaged record decodes
    with pytest.raises(StateRecordError, match=reason):
        decode_state_record(damage(value))


def test_a_tombstone_is_a_bad_record() -> None:
    with pytest.raises(StateRecordError, match="tombstone"):
        decode_state_record(None)


def test_keys_separate_groups_and_models_and_are_readable_json() -> None:
    key = state_key("g/1", "events")
    assert json.loads(key) == {"group": "g/1", "model": "events"}
    assert key != state_key("g", "1/events")
    assert key != state_key("g/1", "other")
    assert state_key("g/1", "events") == key
    with pytest.raises(ValueError, match="non-empty"):
        state_key("", "events")


def test_the_default_state_topic_follows_the_events_topic() -> None:
    assert default_state_topic("clicks") == "clicks.state"
