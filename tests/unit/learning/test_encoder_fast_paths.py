"""The one-event fast paths of the encoders give exactly the precise path's rows and refusals."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from learning import FeatureError, HashingEncoder, VocabularyEncoder
from learning.encoders import MAX_ABS_FEATURE, SparseRow
from learning.encoders._murmur import murmur3_32

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


def row_buffers(size: int = 64) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    return np.empty(size, dtype=np.int64), np.empty(size)


def test_murmur3_fast_path_sums_shared_columns_and_leaves_refusals_to_the_precise_path() -> None:
    wide, narrow = HashingEncoder(18), HashingEncoder(1)
    row = {"alpha": 1.0, "beta": -0.0, "gamma": 3}
    columns, values = row_buffers()
    assert wide.encode_sparse_into(row, columns, values)[1] is not None  # control: it runs
    n, key = narrow.encode_sparse_into(row, columns, values)
    assert key is not None and n == 3  # three names in two buckets, summed by the fast path
    assert outcome(lambda: narrow.encode_sparse(row)) == outcome(
        lambda: narrow._sparse_row(*narrow._entries(row, False))
    )
    assert wide._murmur_content({"alpha": True}) is None
    for refused in ({"alpha": 2e100}, {"a\x00b": 1.0, "c": 2.0}, {"a": 1.0, "b\x00": 2.0}):
        content = wide._murmur_content(refused)
        assert content is not None
        assert wide._hashed_row(content, len(refused), columns, values) == -1
    assert wide.encode_sparse_into({"a\x00b": 1.0, "c": 2.0}, columns, values)[1] is None


def test_a_row_is_reused_only_for_the_same_content() -> None:
    encoder = HashingEncoder(18)
    columns, values = row_buffers()
    row = {"alpha": 1.0, "beta": 2.0}
    n, key = encoder.encode_sparse_into(row, columns, values)
    assert key is not None
    columns[:n] = -1  # a row written again would overwrite these
    assert encoder.encode_sparse_into(dict(row), columns, values, previous=key) == (n, key)
    assert columns[:n].tolist() == [-1] * n  # reused: nothing written
    changed = {"alpha": 1.0, "beta": 2.5}
    n, other = encoder.encode_sparse_into(changed, columns, values, previous=key)
    assert other != key
    assert columns[:n].tolist() == encoder.encode_sparse(changed)[0].tolist()
    with pytest.raises(FeatureError, match="boolean_feature"):
        encoder.encode_sparse_into({"alpha": 1.0, "beta": True}, columns, values, previous=key)


@settings(max_examples=300, deadline=None)
@given(name=st.text(max_size=12))
def test_compiled_murmur3_equals_mmh3(name: str) -> None:
    data = name.encode("utf-8", "surrogatepass")
    assert murmur3_32(data, 0, len(data)) == mmh3.hash(data)


@settings(max_examples=200, deadline=None)
@given(
    row=st.dictionaries(st.text(max_size=6), ANY_VALUE, min_size=1, max_size=30),
    n_bits=st.sampled_from([1, 3, 18]),
    bias=st.booleans(),
)
def test_murmur3_rows_of_any_names_equal_the_precise_path(
    row: dict[str, Any], n_bits: int, bias: bool
) -> None:
    encoder = HashingEncoder(n_bits, bias=bias)
    fast = outcome(lambda: encoder.encode_sparse(row))
    assert fast == outcome(lambda: encoder._sparse_row(*encoder._entries(row, False)))
    columns, values = LAST_BUFFERS
    into = outcome(lambda: buffered(encoder.encode_sparse_into(row, columns, values)[0]))
    assert into == fast


def test_rows_written_into_buffers_are_the_rows_returned() -> None:
    columns, values = row_buffers()
    columns[:] = -7
    for encoder in (HashingEncoder(4), HashingEncoder(4, hash="blake2b")):
        row = {"alpha": 2.0, "beta": -1.5}
        n, _ = encoder.encode_sparse_into(row, columns, values, grow=True)
        indices, data = encoder.encode_sparse(row)
        assert n == indices.shape[0] == 3
        assert columns[:n].tolist() == indices.tolist()
        assert values[:n].tobytes() == data.tobytes()
        assert columns[n] == -7  # control: nothing written past the row


LAST_BUFFERS = row_buffers()


def buffered(n: int) -> SparseRow:
    columns, values = LAST_BUFFERS
    return columns[:n].copy(), values[:n].copy()


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


def vocabulary_in_order(bias: bool) -> VocabularyEncoder:
    """A vocabulary that has learned a, b, c from an event listing them in that order."""
    encoder = VocabularyEncoder(bias=bias)
    encoder.encode_sparse({"a": 1.0, "b": 1.0, "c": 1.0}, grow=True)
    encoder.encode_sparse({"a": 1.0, "b": 1.0, "c": 1.0})  # remembers the order
    return encoder


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(ANY_VALUE, min_size=3, max_size=3),
    order=st.permutations(["a", "b", "c"]),
    bias=st.booleans(),
)
def test_vocabulary_rows_written_into_buffers_equal_the_precise_path(
    values: list[Any], order: list[str], bias: bool
) -> None:
    encoder = vocabulary_in_order(bias)
    row = dict(zip(order, values, strict=True))
    precise = outcome(lambda: encoder._sparse_row(*encoder._entries(row, False)))
    columns, values_buffer = LAST_BUFFERS
    into = outcome(lambda: buffered(encoder.encode_sparse_into(row, columns, values_buffer)[0]))
    assert into == precise == outcome(lambda: encoder.encode_sparse(row))


def test_a_vocabulary_row_in_order_is_keyed_and_reused_only_for_the_same_values() -> None:
    encoder = vocabulary_in_order(bias=True)
    columns, values = row_buffers()
    row = {"a": 1.0, "b": 2, "c": -0.5}
    n, key = encoder.encode_sparse_into(row, columns, values)
    assert key is not None and n == 4
    assert columns[:n].tolist() == [0, 1, 2, 3] and values[:n].tolist() == [1.0, 1.0, 2.0, -0.5]
    columns[:n] = -1  # a row written again would overwrite these
    assert encoder.encode_sparse_into(dict(row), columns, values, previous=key) == (n, key)
    assert columns[:n].tolist() == [-1] * n  # reused: nothing written
    changed = {"a": 1.0, "b": 2, "c": -0.25}
    n, other = encoder.encode_sparse_into(changed, columns, values, previous=key)
    assert other is not None and other != key
    assert values[:n].tolist() == [1.0, 1.0, 2.0, -0.25]
    with pytest.raises(FeatureError, match="boolean_feature"):
        encoder.encode_sparse_into({"a": 1.0, "b": True, "c": 0.0}, columns, values, previous=key)
    reordered = {"b": 2, "a": 1.0, "c": -0.5}  # not in order: written by the precise path
    assert encoder.encode_sparse_into(reordered, columns, values, previous=key)[1] is None
