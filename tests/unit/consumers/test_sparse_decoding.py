"""Object-valued features decode straight to CSR: the same rows, rejections and reason codes as
the dense decoding of the same records, without a dense row."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumers.decoding._csr import stack, take
from consumers.decoding.bulk import _expected_markers
from consumers.decoding.events import REASON_CODES, DecodedBatch, EventDecoder, Record
from learning import CSRBatch, HashingEncoder, LabelMap, SchemaEncoder, VocabularyEncoder
from learning.encoders import SparseEncoder
from learning.errors import FEATURE_ERROR_CODES

LABELS = LabelMap({"1": 1, "-1": -1})
NAMES = ["a", "b", "c", "d", "é", "日本", "w\\u0069de"]
LIMIT = 5
GOOD_FEATURES = {"a": 1.5, "b": -2}


class DenseView:
    """An object-valued encoder seen as dense only: the decoder then takes its dense path."""

    sparse = False

    def __init__(self, inner: SparseEncoder) -> None:
        self._inner = inner
        self.bias = inner.bias

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def encoders() -> list[Callable[[], SparseEncoder]]:
    return [
        lambda: HashingEncoder(4, max_features_per_event=LIMIT),
        lambda: HashingEncoder(3, hash="blake2b", max_features_per_event=LIMIT),
        lambda: SchemaEncoder(["a", "b", "c", "d", "é", "日本"], max_features_per_event=LIMIT),
        lambda: VocabularyEncoder(max_features=5, max_features_per_event=LIMIT),
    ]


def records(values: list[bytes]) -> list[Record]:
    return [Record("events", i % 2, i, value) for i, value in enumerate(values)]


def _event(features: str) -> bytes:
    return b'{"features": ' + features.encode() + b', "label": 1}'


POISON = [
    (_event('{"a": NaN}'), "non_finite"),
    (_event('{"a": Infinity}'), "non_finite"),
    (_event('{"a": -Infinity}'), "non_finite"),
    (_event('{"a": 1e999}'), "non_finite"),
    (_event('{"a": 2e100}'), "too_large"),
    (_event("{}"), "empty_features"),
    (_event('{"a": "x"}'), "non_numeric"),
    (_event('{"a": null}'), "non_numeric"),
    (_event('{"a": true}'), "boolean_feature"),
    (_event('{"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1}'), "too_many_features"),
    (_event("[1, 2]"), "wrong_type"),
    (_event('{"a": 1, "a": 2}'), "duplicate_key"),
    (_event('{"\\ud800": 1}'), "not_json"),
]


@pytest.mark.parametrize(("value", "reason"), POISON)
@pytest.mark.parametrize("make", encoders())
def test_bad_sparse_input_is_rejected_with_its_reason(
    make: Callable[[], SparseEncoder], value: bytes, reason: str
) -> None:
    good = _event('{"a": 1.5, "b": -2}')
    batch = EventDecoder(make(), LABELS, grow=True).decode_batch(records([good, value, good]))
    assert [r.reason for r in batch.rejections] == [reason]
    assert batch.rejections[0].value == value and batch.rejections[0].offset == 1
    assert isinstance(batch.X, CSRBatch) and batch.X.n_rows == 2
    assert reason in REASON_CODES


def test_new_feature_codes_are_reason_codes() -> None:
    assert {"too_many_features", "bad_feature_name"} <= set(FEATURE_ERROR_CODES)
    assert {"too_many_features", "bad_feature_name"} <= set(REASON_CODES)


def _same(sparse: DecodedBatch, dense: DecodedBatch) -> None:
    assert isinstance(sparse.X, CSRBatch) and isinstance(dense.X, np.ndarray)
    sparse.X.validate()
    assert sparse.X.to_dense().tobytes() == dense.X.tobytes()
    assert sparse.X.shape == dense.X.shape
    expected = CSRBatch.from_dense(dense.X)
    nonzero = sparse.X.values != 0
    assert sparse.X.indices[nonzero].tolist() == expected.indices.tolist()
    assert sparse.X.values[nonzero].tolist() == expected.values.tolist()
    assert sparse.y.tobytes() == dense.y.tobytes()
    assert sparse.spans == dense.spans
    assert sparse.row_records.tolist() == dense.row_records.tolist()
    assert sparse.event_ids == dense.event_ids
    assert sparse.offsets.tolist() == dense.offsets.tolist()
    assert [(r.reason, r.offset) for r in sparse.rejections] == [
        (r.reason, r.offset) for r in dense.rejections
    ]


VALUE = st.one_of(
    st.integers(-5, 5),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e3, max_value=1e3),
    st.sampled_from([0.0, -0.0, 1e100]),
)


@st.composite
def event_values(draw: st.DrawFn) -> bytes:
    features = draw(st.dictionaries(st.sampled_from(NAMES), VALUE, min_size=1, max_size=LIMIT))
    payload: dict[str, Any] = {"features": features, "label": draw(st.sampled_from([1, "-1"]))}
    if draw(st.booleans()):
        payload["id"] = draw(st.text(min_size=1, max_size=5))
    style = draw(st.sampled_from(["orjson", "json", "poison"]))
    if style == "poison":
        return draw(st.sampled_from([value for value, _ in POISON]))
    if style == "json":
        return json.dumps(payload).encode()
    return orjson.dumps(payload)


@settings(max_examples=120, deadline=None)
@given(values=st.lists(event_values(), min_size=1, max_size=15))
def test_sparse_decoding_equals_the_dense_decoding(values: list[bytes]) -> None:
    for make in encoders():
        sparse = EventDecoder(make(), LABELS, grow=True).decode_batch(records(values))
        dense = EventDecoder(DenseView(make()), LABELS, grow=True).decode_batch(records(values))  # type: ignore[arg-type]
        _same(sparse, dense)


def test_a_bag_of_words_stream_decodes_to_csr_as_the_dense_path_does() -> None:
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(1000)]
    values = [
        orjson.dumps(
            {
                "features": {words[int(j)]: 1 for j in rng.integers(0, 1000, 20)},
                "label": int(rng.choice([-1, 1])),
            }
        )
        for _ in range(500)
    ]
    values[17] = _event('{"w1": NaN}')
    encoder = HashingEncoder(18)
    sparse = EventDecoder(encoder, LABELS).decode_batch(records(values))
    dense = EventDecoder(DenseView(HashingEncoder(18)), LABELS).decode_batch(records(values[:60]))  # type: ignore[arg-type]
    first = EventDecoder(encoder, LABELS).decode_batch(records(values[:60]))
    _same(first, dense)
    assert isinstance(sparse.X, CSRBatch) and sparse.X.n_rows == 499
    assert sparse.X.nnz <= 499 * 21 and sparse.X.dimension == 2**18 + 1
    assert [r.reason for r in sparse.rejections] == ["non_finite"]


def test_a_dense_view_really_decodes_densely() -> None:
    # Control for the comparisons above: the reference path produces a dense matrix.
    batch = EventDecoder(DenseView(HashingEncoder(4)), LABELS).decode_batch(  # type: ignore[arg-type]
        records([_event('{"a": 1}')])
    )
    assert isinstance(batch.X, np.ndarray) and batch.X.shape == (1, 17)


def test_sparse_batches_are_bounded_by_entries_not_by_the_dimension() -> None:
    small = EventDecoder(HashingEncoder(4), LABELS).max_batch_rows
    large = EventDecoder(HashingEncoder(24), LABELS).max_batch_rows
    assert small == large == 8_000_000 // 10_001
    assert EventDecoder(HashingEncoder(24, max_features_per_event=20), LABELS).max_batch_rows == (
        8_000_000 // 21
    )


def test_stack_and_take_keep_rows_bit_for_bit() -> None:
    dense = np.array([[1.0, 0.0, -0.0], [0.0, 2.5, 0.0], [3.0, 0.0, 4.0]])
    rows = [
        (np.flatnonzero(np.signbit(row) | (row != 0)), row[np.signbit(row) | (row != 0)])
        for row in dense
    ]
    batch = CSRBatch.from_rows(rows, 3)
    assert batch.nnz == 5
    assert take(batch, np.array([2, 0, 1])).to_dense().tobytes() == dense[[2, 0, 1]].tobytes()
    assert take(batch, np.array([1])).to_dense().tolist() != dense[[2]].tolist()  # control
    stacked = stack([batch.select(0, 1), batch.select(1, 3)], 4)
    assert stacked.to_dense()[:, :3].tobytes() == dense.tobytes() and stacked.dimension == 4
    with pytest.raises(ValueError):
        stack([batch], 2)


def test_no_dense_row_is_built_even_at_2_to_the_24_buckets() -> None:
    encoder = HashingEncoder(24)
    dense_row_bytes = encoder.dimension * 8  # 134 MB: one dense row would show
    values = [
        orjson.dumps({"features": {f"w{i}_{j}": 1 for j in range(20)}, "label": 1})
        for i in range(200)
    ]
    values.append(_event('{"a": NaN}'))  # one record through the precise path as well
    decoder = EventDecoder(encoder, LABELS)
    decoder.decode_batch(records(values[:3]))  # first use compiles the byte counters (numba)
    tracemalloc.start()
    try:
        batch = decoder.decode_batch(records(values))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(batch.X, CSRBatch) and batch.X.n_rows == 200
    assert peak < dense_row_bytes / 10
    tracemalloc.start()
    try:
        encoder.encode(GOOD_FEATURES)  # control: the dense form does allocate the row
        _, dense_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert dense_peak >= dense_row_bytes


NAME_TEXT = st.text(st.characters(exclude_categories=("Cs",)))  # str of valid Unicode


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(
        st.dictionaries(
            st.one_of(st.sampled_from(['"', "u", "l", "\\", "\x00", "é", "日本"]), NAME_TEXT),
            st.just(1),
            min_size=1,
            max_size=4,
        ),
        min_size=1,
        max_size=4,
    )
)
def test_the_joined_names_hold_the_marker_bytes_of_the_names(rows: list[dict[str, int]]) -> None:
    # Markers are ASCII, multi-byte UTF-8 holds no ASCII byte and the separator is no marker.
    joined = HashingEncoder(4).join_names(rows)
    assert joined is not None
    assert _expected_markers(0, 0, [], rows, joined) == _expected_markers(0, 0, [], rows)
    names = [name for row in rows for name in row]
    if len(names) > 1:  # control: a separator that were a marker would change the count
        with_marker = "u".join(names).encode()
        assert _expected_markers(0, 0, [], rows, with_marker) != _expected_markers(0, 0, [], rows)


def test_the_decoder_joins_a_batchs_names_once_for_both_uses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    join_names = HashingEncoder.join_names

    def counted(self: HashingEncoder, rows: Any) -> bytes | None:
        calls.append(len(rows))
        return join_names(self, rows)

    monkeypatch.setattr(HashingEncoder, "join_names", counted)
    # The orjson tier under test: the compiled reader would take the plain records itself.
    monkeypatch.setattr(EventDecoder, "compiled_tier", False)
    values = [_event('{"a": 1, "é": 2}'), _event('{"w\\u0069de": 1}'), _event('{"b": 1}')]
    values += [_event('{"a": 1, "a": 2}'), _event('{"日本": 3}')]
    batch = EventDecoder(HashingEncoder(4), LABELS).decode_batch(records(values))
    dense = EventDecoder(DenseView(HashingEncoder(4)), LABELS).decode_batch(records(values))  # type: ignore[arg-type]
    _same(batch, dense)
    assert [r.reason for r in batch.rejections] == ["duplicate_key"]
    # One join per bulk round: all five rows, then the three left once the marker count
    # singled out the escaped and the duplicated records (the dense view joins nothing).
    assert calls == [5, 3]
