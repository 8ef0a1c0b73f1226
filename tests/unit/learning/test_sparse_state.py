"""Saved state holds what was learned: its size grows with updates x non-zeros, not with the
dimension, and a sparse-learned model continues bit-identically after a round trip."""

from __future__ import annotations

import hashlib
import tracemalloc
from collections.abc import Callable

import numpy as np
import pytest

from learning import (
    DenseEncoder,
    LabelMap,
    MulticlassPerceptron,
    Perceptron,
    StateError,
    VotedPerceptron,
    dump_state,
    load_state,
)
from learning._arrays import LinearState
from learning._base import LinearLearner
from learning.sparse import CSRBatch

SIGNS = LabelMap({1: 1, -1: -1})
WORDS_PER_EVENT = 20
VOCABULARY = 5_000
SAVED_EVENTS = 2_000
SAVED_BITS = 14
BLOB_COPIES = 1.25
"""Copies of the blob a save may hold at once: one, and the eighth io.BytesIO grows it by."""
SAVE_SLACK = 8 * 1024
"""Bytes a save may take beyond its arrays and the blob: the header and small temporaries."""


def hashed_stream(n: int, bits: int, seed: int) -> tuple[CSRBatch, np.ndarray]:
    """Bags of 20 words of a 5,000-word vocabulary hashed into 2^bits buckets (bias first)."""
    rng = np.random.default_rng(seed)
    buckets = np.random.default_rng(0).integers(0, 2**bits, VOCABULARY)
    teacher = np.random.default_rng(1).standard_normal(VOCABULARY)
    rows, labels = [], []
    for _ in range(n):
        words = rng.integers(0, VOCABULARY, WORDS_PER_EVENT)
        columns, counts = np.unique(1 + buckets[words], return_counts=True)
        rows.append((np.concatenate([[0], columns]), np.concatenate([[1.0], counts])))
        labels.append(1.0 if teacher[words].sum() >= 0 else -1.0)
    return CSRBatch.from_rows(rows, 2**bits + 1), np.array(labels)


def binary(bits: int) -> Perceptron:
    return VotedPerceptron(SIGNS, encoder=DenseEncoder(2**bits), prequential_voted=True)


@pytest.mark.parametrize("kind", ["binary", "multiclass"])
def test_a_sparse_model_continues_identically_after_a_round_trip(kind: str) -> None:
    X, y = hashed_stream(600, 16, 2)
    model: LinearLearner
    if kind == "binary":
        model, targets = binary(16), y
    else:
        model = MulticlassPerceptron(
            encoder=DenseEncoder(2**16), prequential_voted=True, max_voters=5, seed=3
        )
        targets = model.encode_labels(
            [int(v > 0) + (i % 3 == 0) for i, v in enumerate(y)], grow=True
        )
    model.learn_batch(X.select(0, 300), targets[:300])
    restored, _, _ = load_state(dump_state(model))
    first = model.learn_batch(X.select(300, 600), targets[300:])
    second = restored.learn_batch(X.select(300, 600), targets[300:])
    assert np.array_equal(first.mistakes, second.mistakes)
    assert first.prequential_mistakes == second.prequential_mistakes
    assert dump_state(model) == dump_state(restored)
    assert np.array_equal(model.averaged_weights, restored.averaged_weights)  # type: ignore[attr-defined]
    assert first.n_updates > 0


def test_state_size_grows_with_updates_not_with_the_dimension() -> None:
    X, y = hashed_stream(2_000, 18, 5)
    sizes = []
    model = binary(18)
    start = 0
    for stop in (250, 500, 1_000, 2_000):
        model.learn_batch(X.select(start, stop), y[start:stop])
        sizes.append((model.n_updates, len(dump_state(model))))
        start = stop
    updates = [u for u, _ in sizes]
    assert updates == sorted(updates) and updates[0] > 0
    assert [size for _, size in sizes] == sorted(size for _, size in sizes)
    dense_bytes = (2**18 + 1) * 8
    for n_updates, size in sizes:
        # Each update touches at most 21 coordinates: 4 numbers each (index, weight, sum, birth),
        # plus a voter log bounded by 64 voters of 21 entries (3 numbers each), plus the header.
        assert size <= 8 * (4 * 21 * n_updates + 64 * 21 * 3) + 16_384
    assert sizes[-1][1] < dense_bytes  # smaller than one dense weight vector
    # The same stream in 2^12 + 1 coordinates: the size barely depends on the dimension.
    small = binary(12)
    small_X, small_y = hashed_stream(2_000, 12, 5)
    small.learn_batch(small_X, small_y)
    assert len(dump_state(small)) < sizes[-1][1] * 2


def _peak_bytes(action: Callable[[], bytes]) -> tuple[int, bytes]:
    """The most memory ``action`` held at once (tracemalloc), and its result."""
    tracemalloc.start()
    try:
        result = action()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, result


def test_saving_holds_the_arrays_and_one_copy_of_their_bytes() -> None:
    X, y = hashed_stream(SAVED_EVENTS, SAVED_BITS, 5)
    model = binary(SAVED_BITS)
    model.learn_batch(X, y)
    arrays = model._state.sparse_arrays()
    stored = sum(array.nbytes for array in arrays.values())
    peak, blob = _peak_bytes(lambda: dump_state(model))
    bound = stored + BLOB_COPIES * len(blob) + SAVE_SLACK
    assert stored > 8 * SAVE_SLACK  # the bound is about the arrays, not the slack
    assert peak <= bound, (peak, stored, len(blob))

    # Control: the same bytes assembled by concatenation (a copy per step) go past the bound.
    def concatenated() -> bytes:
        chunks = [array.tobytes() for array in model._state.sparse_arrays().values()]
        body = b"NOVIKOFF" + b"".join(chunks)
        return body + hashlib.sha256(body).digest()

    peak, _ = _peak_bytes(concatenated)
    assert peak > bound, (peak, stored, len(blob))


def corrupted(
    arrays: dict[str, np.ndarray], name: str, change: Callable[[np.ndarray], None]
) -> dict[str, np.ndarray]:
    copy = {key: value.copy() for key, value in arrays.items()}
    change(copy[name])
    return copy


BREACHES: dict[str, tuple[str, Callable[[np.ndarray], None], str]] = {
    "coordinates out of order": (
        "coordinates",
        lambda a: a.__setitem__(slice(0, 2), a[1::-1]),
        "increase strictly",
    ),
    "coordinate past the weights": (
        "coordinates",
        lambda a: a.__setitem__(-1, 10**9),
        "increase strictly",
    ),
    "log not contiguous": ("log_start", lambda a: a.__setitem__(-1, a[-1] + 1), "contiguous"),
    "counts that do not add up": ("log_counts", lambda a: a.__setitem__(0, a[0] + 1), "add up"),
    "log column past the weights": ("log_cols", lambda a: a.__setitem__(0, 10**9), "columns"),
    "log row that does not exist": ("log_rows", lambda a: a.__setitem__((0, 0), 7), "rows"),
    "a second touched row in a binary log": (
        "log_rows",
        lambda a: a.__setitem__((0, 1), 0),
        "match the rows",
    ),
    "NaN averaging sum": ("weight_sums", lambda a: a.__setitem__(0, np.nan), "weight_sums"),
    "NaN logged value": ("log_old", lambda a: a.__setitem__((0, 0), np.inf), "log_old"),
}


@pytest.mark.parametrize("breach", sorted(BREACHES))
def test_inconsistent_sparse_state_is_refused(breach: str) -> None:
    X, y = hashed_stream(200, 10, 1)
    model = binary(10)
    model.learn_batch(X, y)
    arrays = model._state.sparse_arrays()
    assert LinearState.from_sparse_arrays(arrays).counter(0) == 200  # control: intact arrays load
    name, change, message = BREACHES[breach]
    with pytest.raises(StateError, match=message):
        LinearState.from_sparse_arrays(corrupted(arrays, name, change))
