"""The one-event fast paths of the encoders give exactly the precise path's rows and refusals."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learning import FeatureError, HashingEncoder, VocabularyEncoder
from learning.encoders import MAX_ABS_FEATURE, SparseRow

WORDS = [f"word{i}" for i in range(200)]
VALUES = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6),
    st.integers(min_value=-1000, max_value=1000),
    st.sampled_from([0.0, -0.0, 1.0, -1.0, MAX_ABS_FEATURE, -MAX_ABS_FEATURE]),
)
BAD_VALUES = st.sampled_from([float("nan"), float("inf"), 2e100, True, "1", None, 10**400])
ANY_VALUE = st.one_of(VALUES, VALUES, VALUES, BAD_VALUES)


def outcome(action: Callable[[], SparseRow]) -> tuple[str, Any]:
    try:
        indices, values = action()
    except FeatureError as error:
        return "error", error.code
    return "ok", (indices.dtype, indices.tobytes(), values.dtype, values.tobytes())


@settings(max_examples=300, deadline=None)
@given(
    row=st.dictionaries(st.sampled_from(WORDS), ANY_VALUE, min_size=1, max_size=20),
    n_bits=st.sampled_from([2, 18]),
    bias=st.booleans(),
)
def test_murmur3_fast_path_equals_the_precise_path(
    row: dict[str, Any], n_bits: int, bias: bool
) -> None:
    encoder = HashingEncoder(n_bits, bias=bias)
    fast = outcome(lambda: encoder.encode_sparse(row))
    precise = outcome(lambda: encoder._sparse_row(*encoder._entries(row, False)))
    assert fast == precise


def test_murmur3_fast_path_is_taken_only_without_shared_columns() -> None:
    wide, narrow = HashingEncoder(18), HashingEncoder(1)
    row = {"alpha": 1.0, "beta": -0.0, "gamma": 3}
    assert wide._murmur_row(row) is not None  # control: the fast path does run
    assert narrow._murmur_row(row) is None  # three names in two buckets share one
    assert wide._murmur_row({"alpha": True}) is None  # a refusal is left to the precise path
    assert outcome(lambda: narrow.encode_sparse(row)) == outcome(
        lambda: narrow._sparse_row(*narrow._entries(row, False))
    )


@settings(max_examples=200, deadline=None)
@given(values=st.lists(ANY_VALUE, min_size=3, max_size=3), bias=st.booleans())
def test_vocabulary_in_order_fast_path_equals_the_precise_path(
    values: list[Any], bias: bool
) -> None:
    encoder = VocabularyEncoder(bias=bias)
    encoder.encode_sparse({"a": 1.0, "b": 2.0, "c": 3.0}, grow=True)
    encoder.encode({"a": 1.0, "b": 2.0, "c": 3.0})  # the vocabulary, in order: remembered
    row = dict(zip("abc", values, strict=True))
    fast = outcome(lambda: encoder.encode_sparse(row))
    precise = outcome(lambda: encoder._sparse_row(*encoder._entries(row, False)))
    assert fast == precise


def test_vocabulary_fast_path_is_taken_for_an_event_in_order() -> None:
    encoder = VocabularyEncoder()
    row = {"a": 1.0, "b": 2.0}
    encoder.encode_sparse(row, grow=True)
    assert encoder._in_order == ("a", "b")
    indices, values = encoder.encode_sparse(row)
    assert (indices.tolist(), values.tolist()) == ([0, 1, 2], [1.0, 1.0, 2.0])
    assert VocabularyEncoder()._in_order is None  # control: nothing remembered before


@pytest.mark.parametrize("sparse", [False, True])
def test_an_int_beyond_any_float_is_refused_with_its_code(sparse: bool) -> None:
    encoder = VocabularyEncoder()
    encoder.encode({"a": 1.0, "b": 2.0}, grow=True)
    encoder.encode({"a": 1.0, "b": 2.0})

    def values(row: dict[str, Any]) -> list[float]:
        return (encoder.encode_sparse(row)[1] if sparse else encoder.encode(row)).tolist()

    with pytest.raises(FeatureError) as caught:
        values({"a": 1.0, "b": 10**400})
    assert caught.value.code == "non_finite"
    assert values({"a": 1.0, "b": 2}) == [1.0, 1.0, 2.0]  # control: a fine int passes
