"""Saved state: bit-exact round trips, continuation, and clear refusals."""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learning import (
    BoundTracker,
    HashingEncoder,
    LabelMap,
    MulticlassPerceptron,
    Perceptron,
    Reference,
    SchemaEncoder,
    StateError,
    VocabularyEncoder,
    dump_state,
    load_state,
)
from learning.state import FORMAT_VERSION, MAGIC, PREAMBLE


def trained_binary(n: int = 60, seed: int = 0) -> Perceptron:
    rng = np.random.default_rng(seed)
    model = Perceptron(LabelMap({"spam": 1, "ham": -1}), prequential_voted=True, max_voters=5)
    for _ in range(n):
        names = rng.choice(["a", "b", "c", "d"], size=rng.integers(1, 4), replace=False)
        model.learn_one({str(k): float(rng.normal()) for k in names}, rng.choice(["spam", "ham"]))
    return model


def test_round_trip_is_bit_exact_and_keeps_everything() -> None:
    model = trained_binary()
    tracker = BoundTracker([Reference("u", [0.0, 1.0, -1.0])])
    blob = dump_state(model, tracker, {"offsets": {"events/0": 17}, "note": "x"})
    learner, loaded_tracker, extra = load_state(blob)
    assert isinstance(learner, Perceptron)
    assert dump_state(learner, loaded_tracker, extra) == blob
    assert extra == {"offsets": {"events/0": 17}, "note": "x"}
    assert learner.label_map == model.label_map
    assert isinstance(learner.encoder, VocabularyEncoder)
    assert learner.encoder.vocabulary == model.encoder.vocabulary
    assert learner.weights.tolist() == model.weights.tolist()
    assert learner.voters[0][1].tolist() == model.voters[0][1].tolist()
    assert learner.prequential_mistakes == model.prequential_mistakes
    assert (learner.max_voters, learner.prequential_voted) == (5, True)


def continue_stream(model: Perceptron | MulticlassPerceptron, events: list) -> None:
    for x, label in events:
        model.learn_one(x, label)


@st.composite
def dict_streams(draw: st.DrawFn) -> list[tuple[dict[str, float], str]]:
    names = st.sampled_from(["a", "b", "c", "d", "e"])
    value = st.floats(-5, 5, allow_nan=False)
    event = st.tuples(
        st.dictionaries(names, value, min_size=1, max_size=4), st.sampled_from(["x", "y", "z"])
    )
    return draw(st.lists(event, min_size=2, max_size=60))


@settings(max_examples=60, deadline=None)
@given(dict_streams(), st.integers(0, 100), st.booleans())
def test_save_load_continue_equals_never_stopping(
    events: list[tuple[dict[str, float], str]], cut: int, multiclass: bool
) -> None:
    cut = cut % len(events)

    def fresh() -> Perceptron | MulticlassPerceptron:
        if multiclass:
            return MulticlassPerceptron(max_voters=3, prequential_voted=True, seed=9)
        return Perceptron(LabelMap({"x": 1, "y": -1}), max_voters=3, prequential_voted=True)

    if not multiclass:
        events = [(x, "x" if label == "x" else "y") for x, label in events]
    straight = fresh()
    continue_stream(straight, events)
    first = fresh()
    continue_stream(first, events[:cut])
    resumed, _, _ = load_state(dump_state(first))
    continue_stream(resumed, events[cut:])  # type: ignore[arg-type]
    assert dump_state(resumed) == dump_state(straight)


def test_hashing_and_schema_encoders_round_trip() -> None:
    for encoder in (HashingEncoder(n_bits=5), SchemaEncoder(["w", "h"], bias=False)):
        model = MulticlassPerceptron(["s", "m", "l"], encoder=encoder)
        model.learn_one({"w": 1.0, "h": 2.0}, "m")
        learner, _, _ = load_state(dump_state(model))
        assert repr(learner.encoder) == repr(encoder)
        assert learner.predict_one({"w": 1.0}) == model.predict_one({"w": 1.0})


def test_generator_state_survives() -> None:
    model = MulticlassPerceptron([0, 1, 2], seed=2**64 - 1)
    model.learn_one({"a": 1.0}, 0)
    learner, _, _ = load_state(dump_state(model))
    assert isinstance(learner, MulticlassPerceptron)
    assert learner.rng_state == model.rng_state


def corrupt(blob: bytes, header_edit: object = None, payload: bytes | None = None) -> bytes:
    """Re-frame a state with an edited header or payload and a *valid* checksum."""
    _, version, length = PREAMBLE.unpack_from(blob)
    header = json.loads(blob[PREAMBLE.size : PREAMBLE.size + length])
    body = blob[PREAMBLE.size + length : -32]
    if callable(header_edit):
        header_edit(header)
    raw = json.dumps(header).encode()
    new = PREAMBLE.pack(MAGIC, version, len(raw)) + raw + (payload if payload is not None else body)
    return new + hashlib.sha256(new).digest()


def test_refuses_wrong_magic_version_checksum_and_truncation() -> None:
    blob = dump_state(trained_binary())
    with pytest.raises(StateError, match="magic"):
        load_state(b"PICKLE!!" + blob[8:])
    other = bytearray(blob)
    struct.pack_into("<I", other, 8, FORMAT_VERSION + 1)
    with pytest.raises(StateError, match=f"version {FORMAT_VERSION + 1}"):
        load_state(bytes(other))
    struct.pack_into("<I", other, 8, 1)
    with pytest.raises(StateError, match=r"version 1 \(dense weights.* is no longer read"):
        load_state(bytes(other))
    flipped = bytearray(blob)
    flipped[len(blob) // 2] ^= 0x01
    with pytest.raises(StateError, match="checksum"):
        load_state(bytes(flipped))
    with pytest.raises(StateError):
        load_state(blob[:-10])
    with pytest.raises(StateError, match="too short"):
        load_state(b"NOVIKOFF")
    with pytest.raises(StateError):
        load_state("not bytes")  # type: ignore[arg-type]


def test_refuses_consistent_looking_state_with_wrong_shapes() -> None:
    blob = dump_state(trained_binary())

    def bad_shape(header: dict) -> None:
        for entry in header["arrays"]:
            if entry["name"] == "weight_sums":
                entry["shape"] = [1, *entry["shape"]]

    with pytest.raises(StateError, match="weight_sums"):
        load_state(corrupt(blob, bad_shape))

    def bad_dtype(header: dict) -> None:
        for entry in header["arrays"]:
            if entry["name"] == "weights":
                entry["dtype"] = "<i8"

    with pytest.raises(StateError, match="dtype"):
        load_state(corrupt(blob, bad_dtype))

    def wrong_kind(header: dict) -> None:
        header["learner"]["kind"] = "pickle.loads"

    with pytest.raises(StateError, match="unknown learner kind"):
        load_state(corrupt(blob, wrong_kind))

    def missing_key(header: dict) -> None:
        del header["learner"]["encoder"]

    with pytest.raises(StateError, match="malformed"):
        load_state(corrupt(blob, missing_key))

    def vocabulary_too_small(header: dict) -> None:
        header["learner"]["encoder"]["vocabulary"] = []

    with pytest.raises(StateError, match="encoder only"):
        load_state(corrupt(blob, vocabulary_too_small))

    with pytest.raises(StateError, match="does not fit"):
        load_state(corrupt(blob, payload=b"\0" * 8))


def test_refuses_what_json_cannot_carry_exactly() -> None:
    model = trained_binary()
    with pytest.raises(StateError, match="extra"):
        dump_state(model, extra={"when": object()})
    with pytest.raises(StateError, match="not finite"):
        dump_state(model, extra={"rate": float("nan")})
    odd = MulticlassPerceptron()
    odd.learn_one({"a": 1.0}, ("tuple", "label"))
    with pytest.raises(StateError):
        dump_state(odd)


def test_numpy_labels_are_saved_as_plain_values() -> None:
    model = Perceptron(LabelMap({np.int64(1): 1, np.int64(0): -1}))
    model.learn_one({"a": 1.0}, 1)
    learner, _, _ = load_state(dump_state(model))
    assert learner.predict_one({"a": 1.0}) == model.predict_one({"a": 1.0}) == 1
