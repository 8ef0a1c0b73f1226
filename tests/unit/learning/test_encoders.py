"""Encoders: x̃ layout, growth rules and every FeatureError code."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from learning import (
    FEATURE_ERROR_CODES,
    DenseEncoder,
    FeatureError,
    HashingEncoder,
    SchemaEncoder,
    VocabularyEncoder,
)
from learning.encoders import (
    DEFAULT_MAX_FEATURES_PER_EVENT,
    MAX_ABS_FEATURE,
    encoder_from_state,
)


def code_of(action: object) -> str:
    with pytest.raises(FeatureError) as error:
        action()  # type: ignore[operator]
    assert error.value.code in FEATURE_ERROR_CODES
    return error.value.code


def test_dense_puts_the_bias_first() -> None:
    encoder = DenseEncoder(3)
    assert encoder.encode([1, 2.5, -3]).tolist() == [1.0, 1.0, 2.5, -3.0]
    assert encoder.encode(np.array([1, 2, 3])).tolist() == [1.0, 1.0, 2.0, 3.0]
    assert encoder.coordinate_names == ("bias", "x1", "x2", "x3")
    assert DenseEncoder(2, bias=False).encode([4, 5]).tolist() == [4.0, 5.0]
    batch = encoder.encode_batch(np.arange(6).reshape(2, 3))
    assert batch.tolist() == [[1.0, 0.0, 1.0, 2.0], [1.0, 3.0, 4.0, 5.0]]


@pytest.mark.parametrize(
    ("features", "code"),
    [
        ([1.0, 2.0], "wrong_dimension"),
        ([1.0, 2.0, 3.0, 4.0], "wrong_dimension"),
        ([1.0, "2", 3.0], "non_numeric"),
        ([1.0, None, 3.0], "non_numeric"),
        ([1.0, True, 3.0], "boolean_feature"),
        (np.array([True, False, True]), "boolean_feature"),
        ([1.0, float("nan"), 3.0], "non_finite"),
        ([1.0, float("inf"), 3.0], "non_finite"),
        (np.array([1.0, np.inf, 0.0]), "non_finite"),
        ([1.0, 10**400, 3.0], "non_finite"),
        ([1.0, 1e101, 3.0], "too_large"),
        ([], "empty_features"),
        ({"a": 1.0}, "wrong_type"),
        ("abc", "wrong_type"),
    ],
)
def test_dense_errors(features: object, code: str) -> None:
    assert code_of(lambda: DenseEncoder(3).encode(features)) == code


def test_batch_errors_carry_the_row_index() -> None:
    with pytest.raises(FeatureError) as error:
        DenseEncoder(2).encode_batch([[1.0, 2.0], [1.0, float("nan")]])
    assert (error.value.code, error.value.index) == ("non_finite", 1)
    with pytest.raises(FeatureError) as error:
        DenseEncoder(2).encode_batch(np.array([[1.0, 2.0], [1e300, 0.0]]))
    assert (error.value.code, error.value.index) == ("too_large", 1)
    assert "row 1" in str(error.value)


def test_schema_maps_names_and_zeroes_absent_ones() -> None:
    encoder = SchemaEncoder(["w", "h"])
    assert encoder.encode({"h": 2.0, "w": 1.0}).tolist() == [1.0, 1.0, 2.0]
    assert encoder.encode({"h": 2.0}).tolist() == [1.0, 0.0, 2.0]
    assert code_of(lambda: encoder.encode({"depth": 1.0})) == "unknown_feature"
    assert code_of(lambda: encoder.encode({})) == "empty_features"
    assert code_of(lambda: encoder.encode([1.0, 2.0])) == "wrong_type"
    assert code_of(lambda: encoder.encode({"w": "wide"})) == "non_numeric"
    assert code_of(lambda: encoder.encode({"w": False})) == "boolean_feature"
    assert code_of(lambda: encoder.encode({"w": np.nan})) == "non_finite"
    with pytest.raises(ValueError):
        SchemaEncoder(["a", "a"])


@pytest.mark.parametrize("value", [1, 2.5, np.float32(1.5), np.int64(-3)])
def test_numeric_types_are_accepted(value: object) -> None:
    assert SchemaEncoder(["a"]).encode({"a": value})[1] == float(value)  # type: ignore[arg-type]


def test_vocabulary_grows_only_when_learning() -> None:
    encoder = VocabularyEncoder()
    assert encoder.encode({"a": 1.0}).tolist() == [1.0]  # unknown name ignored, nothing learned
    assert encoder.dimension == 1
    assert encoder.encode({"a": 1.0, "b": 2.0}, grow=True).tolist() == [1.0, 1.0, 2.0]
    assert encoder.encode({"c": 3.0, "a": 4.0}, grow=True).tolist() == [1.0, 4.0, 0.0, 3.0]
    assert encoder.vocabulary == ("a", "b", "c")
    assert encoder.coordinate_names == ("bias", "a", "b", "c")
    assert encoder.encode({"b": 1.0}).tolist() == [1.0, 0.0, 1.0, 0.0]
    rows = encoder.encode_batch([{"a": 1.0}, {"d": 2.0}], grow=True)
    assert rows.tolist() == [[1.0, 1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 2.0]]


def test_vocabulary_fast_path_agrees_with_the_general_path() -> None:
    encoder = VocabularyEncoder()
    encoder.encode({"a": 1.0, "b": 2.0}, grow=True)
    assert encoder.encode({"a": 3.0, "b": 4.0}).tolist() == [1.0, 3.0, 4.0]  # same order
    assert encoder.encode({"b": 4.0, "a": 3.0}).tolist() == [1.0, 3.0, 4.0]  # other order
    assert code_of(lambda: encoder.encode({"a": 3.0, "b": float("nan")})) == "non_finite"
    assert code_of(lambda: encoder.encode({"a": 3.0, "b": -2e100})) == "too_large"
    assert code_of(lambda: encoder.encode({"a": 3.0, "b": True})) == "boolean_feature"
    assert encoder.encode({"a": 3, "b": 4}).tolist() == [1.0, 3.0, 4.0]
    encoder.encode({"a": 1.0, "b": 1.0, "c": 1.0}, grow=True)
    assert encoder.encode({"a": 3.0, "b": 4.0}).tolist() == [1.0, 3.0, 4.0, 0.0]


def test_bad_rows_never_grow_the_vocabulary() -> None:
    encoder = VocabularyEncoder()
    code_of(lambda: encoder.encode({"new": 1.0, "bad": "x"}, grow=True))
    assert encoder.dimension == 1
    small = VocabularyEncoder(max_features=2)
    small.encode({"a": 1.0}, grow=True)
    assert code_of(lambda: small.encode({"b": 1.0, "c": 1.0}, grow=True)) == "unknown_feature"
    assert small.vocabulary == ("a",)
    assert code_of(lambda: small.encode({(1, 2): 1.0}, grow=True)) == "bad_feature_name"


def test_vocabulary_accepts_int_names_distinct_from_strings() -> None:
    encoder = VocabularyEncoder(bias=False)
    assert encoder.encode({1: 1.0, "1": 2.0}, grow=True).tolist() == [1.0, 2.0]


def test_blake2b_hashing_is_signed_stable_and_bounded() -> None:
    encoder = HashingEncoder(n_bits=16, hash="blake2b")
    colour, colour_sign = encoder.bucket("colour")
    size, size_sign = encoder.bucket("size")
    vector = encoder.encode({"colour": 2.0, "size": 3.0})
    assert encoder.dimension == 2**16 + 1 and vector[0] == 1.0
    assert vector[colour] == colour_sign * 2.0 and vector[size] == size_sign * 3.0
    assert np.count_nonzero(vector) == 3
    # BLAKE2b of the typed name, not Python's salted hash: stable across processes and machines.
    digest = int.from_bytes(hashlib.blake2b(b"s:colour", digest_size=8).digest(), "little")
    assert (colour, colour_sign) == ((digest & 0xFFFF) + 1, -1.0 if digest >> 63 else 1.0)
    assert (colour, colour_sign, size, size_sign) == (10154, 1.0, 56830, -1.0)
    assert encoder.bucket(1) != encoder.bucket("1")
    signs = {HashingEncoder(n_bits=4).bucket(f"f{i}")[1] for i in range(50)}
    assert signs == {-1.0, 1.0}
    assert code_of(lambda: encoder.encode({})) == "empty_features"
    assert code_of(lambda: encoder.encode({"a": "red"})) == "non_numeric"
    with pytest.raises(ValueError):
        HashingEncoder(n_bits=30)
    with pytest.raises(ValueError):
        HashingEncoder(n_bits=4, hash="md5")  # type: ignore[arg-type]


def test_hashing_rejects_collisions_that_exceed_the_magnitude_limit() -> None:
    encoder = HashingEncoder(n_bits=1, bias=False, hash="blake2b")
    names = [f"n{i}" for i in range(40)]
    same = [n for n in names if encoder.bucket(n) == encoder.bucket(names[0])][:2]
    assert len(same) == 2
    big = MAX_ABS_FEATURE * 0.75
    assert code_of(lambda: encoder.encode(dict.fromkeys(same, big))) == "too_large"


def test_encoders_rebuild_from_state() -> None:
    vocabulary = VocabularyEncoder(max_features=9)
    vocabulary.encode({"x": 1.0, "y": 1.0}, grow=True)
    for encoder in (
        DenseEncoder(4, bias=False),
        SchemaEncoder(["a", "b"]),
        vocabulary,
        HashingEncoder(n_bits=3),
        HashingEncoder(n_bits=3, hash="blake2b", max_features_per_event=7),
    ):
        rebuilt = encoder_from_state(encoder.to_state())
        assert rebuilt.to_state() == encoder.to_state()
        assert rebuilt.coordinate_names == encoder.coordinate_names
    with pytest.raises(ValueError):
        encoder_from_state({"kind": "pickle", "bias": True})
    with pytest.raises(ValueError):
        encoder_from_state({"kind": "hashing", "bias": True, "n_bits": 3, "hash": "md5"})


def test_state_saved_before_the_hash_choice_loads_as_blake2b() -> None:
    old = encoder_from_state({"kind": "hashing", "n_bits": 5, "bias": True})
    assert isinstance(old, HashingEncoder)
    assert (old.hash, old.max_features_per_event) == ("blake2b", DEFAULT_MAX_FEATURES_PER_EVENT)
    assert old.bucket("colour") == HashingEncoder(5, hash="blake2b").bucket("colour")
    assert old.bucket("colour") != HashingEncoder(5).bucket("colour")  # control: murmur3 differs


def test_feature_error_rejects_unknown_codes() -> None:
    with pytest.raises(ValueError):
        FeatureError("made_up", "no")


@pytest.mark.parametrize(
    ("bad", "code"),
    [
        (float("nan"), "non_finite"),
        (2e100, "too_large"),
        (10**400, "non_finite"),
        (True, "boolean_feature"),
        ("7", "non_numeric"),
    ],
)
def test_wide_events_take_the_fast_path_and_still_report_bad_values(bad: object, code: str) -> None:
    names = [f"f{i}" for i in range(100)]
    encoder = VocabularyEncoder()
    first = encoder.encode(dict.fromkeys(names, 1.0), grow=True)
    fast = encoder.encode({name: float(i) for i, name in enumerate(names)})
    assert first.shape == fast.shape == (101,) and fast[1:].tolist() == list(range(100))
    event: dict[str, object] = dict.fromkeys(names, 1.0)
    event["f70"] = bad
    assert code_of(lambda: encoder.encode(event)) == code
