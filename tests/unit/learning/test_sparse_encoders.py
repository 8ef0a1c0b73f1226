"""The sparse form of the object-valued encoders: CSR equal to the dense form bit for bit, the
same refusals with the same codes, and hashing that agrees with scikit-learn's FeatureHasher."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse import csr_matrix
from sklearn.feature_extraction import FeatureHasher

from learning import (
    FEATURE_ERROR_CODES,
    CSRBatch,
    DenseEncoder,
    FeatureError,
    HashingEncoder,
    SchemaEncoder,
    VocabularyEncoder,
)
from learning.encoders import MAX_ABS_FEATURE, SparseEncoder, encoder_from_state
from learning.encoders import hashing as hashing_module

NAMES = ["a", "b", "c", "d", "e", "f", "g", "h"]
UNICODE_NAMES = ["", " ", "é", "e\u0301", "日本語", "🙂", "ß", "Ω", "\u0000", "tab\tname", "a=b"]
VALUES = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6),
    st.integers(min_value=-1000, max_value=1000),
    st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.1, MAX_ABS_FEATURE, -MAX_ABS_FEATURE]),
)
BAD_VALUES = st.sampled_from([float("nan"), float("inf"), 2e100, True, "1", None, 10**400])


def encoders(bias: bool) -> list[Callable[[], SparseEncoder]]:
    """Fresh, identical encoders of every object-valued kind (vocabulary: with a history)."""

    def vocabulary() -> VocabularyEncoder:
        encoder = VocabularyEncoder(bias=bias, max_features=6, max_features_per_event=5)
        encoder.encode({"c": 1.0, "a": 1.0}, grow=True)
        return encoder

    return [
        lambda: SchemaEncoder(NAMES, bias=bias, max_features_per_event=5),
        vocabulary,
        lambda: HashingEncoder(n_bits=3, bias=bias, max_features_per_event=5),
        lambda: HashingEncoder(n_bits=2, bias=bias, hash="blake2b", max_features_per_event=5),
    ]


ROW = st.dictionaries(
    st.sampled_from(NAMES), st.one_of(VALUES, VALUES, VALUES, BAD_VALUES), max_size=6
)


def outcome(action: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", action()
    except FeatureError as error:
        return "error", (error.code, error.index)


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.one_of(ROW, ROW, ROW, st.just([1.0])), min_size=1, max_size=6),
    bias=st.booleans(),
    grow=st.booleans(),
)
def test_sparse_batch_equals_the_dense_batch_bit_for_bit(
    rows: list[Any], bias: bool, grow: bool
) -> None:
    for make in encoders(bias):
        dense_encoder, sparse_encoder = make(), make()
        dense = outcome(lambda e=dense_encoder: e.encode_batch(rows, grow=grow))
        sparse = outcome(lambda e=sparse_encoder: e.encode_sparse_batch(rows, grow=grow))
        assert dense[0] == sparse[0], (make(), rows, dense, sparse)
        if dense[0] == "error":
            assert dense[1] == sparse[1]
        else:
            batch = sparse[1]
            assert isinstance(batch, CSRBatch)
            batch.validate()
            assert batch.to_dense().tobytes() == dense[1].tobytes()
            assert batch.to_dense().shape == dense[1].shape
        assert sparse_encoder.to_state() == dense_encoder.to_state()


@settings(max_examples=200, deadline=None)
@given(row=ROW, bias=st.booleans())
def test_one_sparse_event_equals_one_dense_event(row: dict[str, Any], bias: bool) -> None:
    for make in encoders(bias):
        encoder = make()
        dense = outcome(lambda e=encoder: e.encode(row))
        sparse = outcome(lambda e=encoder: e.encode_sparse(row))
        assert dense[0] == sparse[0] and (dense[0] == "ok" or dense[1] == sparse[1])
        if dense[0] == "ok":
            indices, values = sparse[1]
            assert indices.dtype == np.int64 and values.dtype == np.float64
            assert (np.diff(indices) > 0).all()
            assert not bias or (indices[0], values[0]) == (0, 1.0)
            rebuilt = CSRBatch.from_rows([(indices, values)], encoder.dimension).to_dense()[0]
            assert rebuilt.tobytes() == dense[1].tobytes()


def test_the_bitwise_comparison_tells_signed_zeros_apart() -> None:
    # Control for the property tests: equal as numbers, different as bits.
    assert np.array([0.0]).tobytes() != np.array([-0.0]).tobytes()
    schema = SchemaEncoder(["a", "b"])
    batch = schema.encode_sparse_batch([{"b": -0.0}, {"a": 1.0, "b": 2.0}])
    dense = schema.encode_batch([{"b": -0.0}, {"a": 1, "b": 2}])
    assert batch.to_dense().tobytes() == dense.tobytes()
    assert batch.values.tolist() == [1.0, -0.0, 1.0, 1.0, 2.0]
    assert np.signbit(batch.values[1])


def test_colliding_names_are_summed_in_event_order() -> None:
    encoder = HashingEncoder(n_bits=1, bias=False)
    names = [f"n{i}" for i in range(60)]
    column = encoder.bucket(names[0])[0]
    same = [n for n in names if encoder.bucket(n)[0] == column][:3]
    signs = [encoder.bucket(n)[1] for n in same]
    terms = [1e16, 1.0, -1e16]
    values = [sign * term for sign, term in zip(signs, terms, strict=True)]
    in_order = ((0.0 + terms[0]) + terms[1]) + terms[2]
    other_order = ((0.0 + terms[0]) + terms[2]) + terms[1]
    assert in_order != other_order  # control: the order is observable
    event = dict(zip(same, values, strict=True))
    indices, summed = encoder.encode_sparse(event)
    assert indices.tolist() == [column] and summed.tolist() == [in_order]
    batch = encoder.encode_sparse_batch([event, event])
    assert batch.values.tolist() == [in_order, in_order]
    # A batch large enough for the bulk path's sort to move equal keys around.
    crowded = {**event, **dict.fromkeys(names[50:55], 1.0)}
    many = encoder.encode_sparse_batch([crowded] * 3_000)
    assert (many.to_dense() == encoder.encode(crowded)).all()
    assert many.to_dense().tobytes() == encoder.encode_batch([crowded] * 3_000).tobytes()
    # Control: numpy's default sort does move equal keys of such a batch out of event order.
    keys = np.repeat(np.arange(3_000), 3)
    order = np.argsort(np.concatenate([keys[::3] * 2, keys * 2 + 1]))
    assert any(a > b for a, b in itertools.pairwise(order[order >= 3_000].tolist()))
    assert encoder.encode(event)[column] == in_order


@pytest.mark.parametrize("make", [*encoders(True), lambda: HashingEncoder(4)])
def test_object_encoders_are_sparse_and_dense_is_not(make: Callable[[], SparseEncoder]) -> None:
    encoder = make()
    assert encoder.sparse is True and isinstance(encoder, SparseEncoder)
    assert DenseEncoder(3).sparse is False and not isinstance(DenseEncoder(3), SparseEncoder)


# -- bad sparse input ---------------------------------------------------------------------------


def _codes(encoder: SparseEncoder, features: object) -> set[str | None]:
    """The code of every way of encoding ``features`` (one event, and as row 1 of a batch)."""
    found: set[str | None] = set()
    good = {"a": 1.0}
    for action in (
        lambda: encoder.encode(features),
        lambda: encoder.encode_sparse(features),
        lambda: encoder.encode_batch([good, features]),
        lambda: encoder.encode_sparse_batch([good, features]),
    ):
        with pytest.raises(FeatureError) as caught:
            action()
        assert caught.value.code in FEATURE_ERROR_CODES
        assert caught.value.index in (None, 1)
        found.add(caught.value.code)
    return found


@pytest.mark.parametrize(
    ("features", "code"),
    [
        ({"a": float("nan")}, "non_finite"),
        ({"a": float("inf")}, "non_finite"),
        ({"a": -float("inf")}, "non_finite"),
        ({"a": 10**400}, "non_finite"),
        ({"a": 2e100}, "too_large"),
        ({"a": "1"}, "non_numeric"),
        ({"a": None}, "non_numeric"),
        ({"a": True}, "boolean_feature"),
        ({}, "empty_features"),
        ({f"n{i}": 1.0 for i in range(6)}, "too_many_features"),
        ({(1, 2): 1.0}, "bad_feature_name"),
        ({1.5: 1.0}, "bad_feature_name"),
        ({None: 1.0}, "bad_feature_name"),
        ([1.0, 2.0], "wrong_type"),
        ("a", "wrong_type"),
    ],
)
def test_bad_sparse_input_gets_its_code_in_every_form(features: object, code: str) -> None:
    for make in encoders(True):
        encoder = make()
        before = encoder.to_state()
        assert _codes(encoder, features) == {code}, make()
        assert encoder.to_state() == before or encoder.growable


def test_the_per_event_bound_is_a_hyperparameter() -> None:
    event = {f"n{i}": 1.0 for i in range(6)}
    assert HashingEncoder(16, max_features_per_event=6).encode_sparse(event)[0].shape == (7,)
    assert _codes(HashingEncoder(4, max_features_per_event=5), event) == {"too_many_features"}
    assert HashingEncoder(4).max_features_per_event == 10_000
    with pytest.raises(ValueError):
        HashingEncoder(4, max_features_per_event=0)
    restored = encoder_from_state(HashingEncoder(4, max_features_per_event=5).to_state())
    assert isinstance(restored, HashingEncoder) and restored.max_features_per_event == 5


def test_murmur3_hashing_takes_string_names_only() -> None:
    murmur = HashingEncoder(4)
    assert _codes(murmur, {1: 1.0}) == {"bad_feature_name"}
    assert _codes(murmur, {"a": 1.0, "\ud800": 1.0}) == {"bad_feature_name"}  # lone surrogate
    blake = HashingEncoder(4, hash="blake2b")
    assert blake.encode_sparse({1: 1.0})[0].shape == (2,)  # control: blake2b hashes int names


# -- scikit-learn's FeatureHasher -----------------------------------------------------------------


def _nonzero(indptr: Any, indices: Any, values: Any, width: int) -> list[list[tuple[int, float]]]:
    """Each row's non-zero (column, value) pairs in column order."""
    matrix = csr_matrix((values, indices, indptr), shape=(len(indptr) - 1, width))
    matrix.sum_duplicates()
    matrix.eliminate_zeros()
    matrix.sort_indices()
    return [
        list(zip(matrix.indices[a:b].tolist(), matrix.data[a:b].tolist(), strict=True))
        for a, b in itertools.pairwise(matrix.indptr.tolist())
    ]


@pytest.mark.parametrize("n_bits", [1, 4, 10, 18, 24])
def test_murmur3_batches_match_feature_hasher_with_the_bias_first(n_bits: int) -> None:
    rng = np.random.default_rng(n_bits)
    vocabulary = UNICODE_NAMES + [f"word{i}" for i in range(2_000)]
    rows = [
        {vocabulary[int(j)]: float(rng.integers(-3, 4) or 1) for j in rng.integers(0, 2_011, 20)}
        for _ in range(50)
    ]
    width = 2**n_bits
    hasher = FeatureHasher(n_features=width, alternate_sign=True, input_type="dict")
    sk = hasher.transform(rows)
    theirs = _nonzero(sk.indptr, sk.indices, sk.data, width)
    plain = HashingEncoder(n_bits, bias=False).encode_sparse_batch(rows)
    assert _nonzero(plain.indptr, plain.indices, plain.values, width) == theirs
    biased = HashingEncoder(n_bits).encode_sparse_batch(rows)
    ours = _nonzero(biased.indptr, biased.indices, biased.values, width + 1)
    assert [row[0] for row in ours] == [(0, 1.0)] * len(rows)
    # sklearn's bucket i is our column i + 1:
    assert [[(c - 1, v) for c, v in row[1:]] for row in ours] == theirs
    assert [row[1:] for row in ours] != theirs  # control: the shift is observable


def test_the_minimum_hash_takes_sklearns_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    # abs(-2**31) does not fit in an int32; scikit-learn defines its bucket as
    # (2**31 - 1 - (n - 1)) % n, which is 0 for every power of two.
    monkeypatch.setattr(hashing_module.mmh3, "hash", lambda *_: -(2**31))
    # The compiled batch path hashes by itself: step aside for the mmh3 bulk path under test.
    monkeypatch.setattr(HashingEncoder, "_compiled_batch", lambda *_: None)
    for n_bits in (1, 10, 24):
        assert HashingEncoder(n_bits, bias=False).bucket("any") == (0, -1.0)
        assert HashingEncoder(n_bits).bucket("any") == (1, -1.0)
        batch = HashingEncoder(n_bits, bias=False).encode_sparse_batch([{"any": 2.0, "b": 1.0}])
        assert (batch.indices.tolist(), batch.values.tolist()) == ([0], [-3.0])


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(
        st.dictionaries(
            st.sampled_from(NAMES + UNICODE_NAMES),
            st.one_of(st.floats(min_value=-1e6, max_value=1e6), st.sampled_from([0.0, -0.0, 3])),
            min_size=1,
            max_size=8,
        ),
        min_size=1,
        max_size=6,
    ),
    n_bits=st.sampled_from([1, 3, 18]),
    bias=st.booleans(),
)
def test_murmur3_batches_built_in_one_compiled_call_equal_their_rows(
    rows: list[dict[str, Any]], n_bits: int, bias: bool
) -> None:
    encoder = HashingEncoder(n_bits, bias=bias)
    batch = encoder.encode_sparse_batch(rows)
    stacked = CSRBatch.from_rows([encoder.encode_sparse(row) for row in rows], encoder.dimension)
    assert batch.indptr.tolist() == stacked.indptr.tolist()
    assert batch.indices.tolist() == stacked.indices.tolist()
    assert batch.values.tobytes() == stacked.values.tobytes()
    names = [name for row in rows for name in row]
    values = np.array([float(value) for row in rows for value in row.values()])
    joined = encoder.join_names(rows)
    assert joined is not None
    compiled = encoder._compiled_batch(joined, values, [len(row) for row in rows])
    with_nul = any("\x00" in name for name in names)
    assert (compiled is None) == with_nul  # control: the compiled path built the plain batches
    if compiled is not None:
        assert compiled.values.tobytes() == batch.values.tobytes()


def test_join_names_is_the_string_the_murmur3_batch_path_hashes() -> None:
    rows = [{"a": 1.0, "é": 2.0}, {"\x00": 1.0, "日本語": -1.0}]
    encoder = HashingEncoder(8)
    assert encoder.join_names(rows) == "\x00".join(["a", "é", "\x00", "日本語"]).encode()
    assert encoder.join_names(rows) != "".join(["a", "é", "\x00", "日本語"]).encode()  # control
    for other in (HashingEncoder(8, hash="blake2b"), SchemaEncoder(NAMES), VocabularyEncoder()):
        assert other.join_names(rows) is None
    assert encoder.join_names([{"a": 1.0}, {1: 1.0}]) is None  # not a str
    assert encoder.join_names([{"\ud800": 1.0}]) is None  # not valid Unicode


def test_a_batch_is_built_from_the_joined_names_it_is_given() -> None:
    encoder = HashingEncoder(8)
    rows = [{"a": 1.0, "b": 2.0}, {"c": 3.0}]
    plain = encoder.encode_sparse_batch(rows)
    given = encoder.encode_sparse_batch(rows, joined_names=encoder.join_names(rows))
    assert given.indptr.tolist() == plain.indptr.tolist()
    assert given.indices.tolist() == plain.indices.tolist()
    assert given.values.tobytes() == plain.values.tobytes()
    # Control: the bytes given are hashed as they are, not joined again from the rows.
    others = encoder.join_names([{"x": 1.0, "y": 2.0}, {"z": 3.0}])
    other = encoder.encode_sparse_batch(rows, joined_names=others)
    assert other.indices.tolist() != plain.indices.tolist()
