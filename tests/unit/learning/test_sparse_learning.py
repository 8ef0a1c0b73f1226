"""Sparse (CSR) and dense rows of the same vectors give bit-identical learners, predictions and
bounds, however the stream is cut into batches; the mistake bound holds on sparse streams."""

from __future__ import annotations

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learning import (
    AveragedPerceptron,
    BoundTracker,
    DenseEncoder,
    LabelMap,
    MulticlassPerceptron,
    Perceptron,
    Reference,
    VotedPerceptron,
    dump_state,
)
from learning._base import LinearLearner
from learning.predictor import PREDICTORS, BatchResult
from learning.sparse import CSRBatch

SIGNS = LabelMap({1: 1, -1: -1})
BINARY_KINDS = (Perceptron, AveragedPerceptron, VotedPerceptron)
MAX_ROWS = 40
MAX_WIDTH = 9

# Zeros (both signs) are frequent, so rows are sparse and stored zeros get exercised.
entries = st.one_of(
    st.sampled_from([0.0, -0.0, 0.0, 1.0, -1.0]),
    st.floats(-50, 50, allow_nan=False, allow_infinity=False),
)


@st.composite
def streams(draw: st.DrawFn, multiclass: bool) -> tuple[np.ndarray, np.ndarray, list[int]]:
    n = draw(st.integers(1, MAX_ROWS))
    d = draw(st.integers(2, MAX_WIDTH))
    X = draw(hnp.arrays(np.float64, (n, d), elements=entries))
    X[:, 0] = 1.0  # the bias, first
    if multiclass:
        y = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=np.int64)
    else:
        y = np.array(draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=n, max_size=n)))
    cuts = sorted(set(draw(st.lists(st.integers(1, n), max_size=4))) | {n})
    return X, y, cuts


def with_stored_zeros(X: np.ndarray, every: int) -> CSRBatch:
    """CSR of X that also stores some of its zeros explicitly (legal; they change nothing)."""
    rows = []
    for i, row in enumerate(X):
        keep = (row != 0.0) | (np.arange(row.shape[0]) % every == i % every)
        columns = np.flatnonzero(keep)
        rows.append((columns.astype(np.int64), row[columns]))
    return CSRBatch.from_rows(rows, X.shape[1])


def learn_in_pieces(
    model: LinearLearner, X: np.ndarray | CSRBatch, y: np.ndarray, cuts: list[int]
) -> list[BatchResult]:
    results, start = [], 0
    for stop in cuts:
        piece = X.select(start, stop) if isinstance(X, CSRBatch) else X[start:stop]
        results.append(model.learn_batch(piece, y[start:stop]))
        start = stop
    return results


def assert_same_results(dense: list[BatchResult], sparse: list[BatchResult]) -> None:
    for a, b in zip(dense, sparse, strict=True):
        assert np.array_equal(a.mistakes, b.mistakes)
        assert np.array_equal(a.predictions, b.predictions)
        assert np.array_equal(a.margins, b.margins, equal_nan=True)
        assert a.prequential_mistakes == b.prequential_mistakes


def assert_same_learner(dense: LinearLearner, sparse: LinearLearner, X: np.ndarray) -> None:
    assert dump_state(dense) == dump_state(sparse)  # weights, sums, born, log, counters, rng
    assert np.array_equal(dense.averaged_weights, sparse.averaged_weights)  # type: ignore[attr-defined]
    assert [(c, w.tolist()) for c, w in dense.voters] == [(c, w.tolist()) for c, w in sparse.voters]
    one, other = dense.snapshot(), sparse.snapshot()
    for name in PREDICTORS:
        codes, scores = one.predict_codes(X, name)
        sparse_codes, sparse_scores = other.predict_codes(CSRBatch.from_dense(X), name)
        assert np.array_equal(codes, sparse_codes)
        assert np.array_equal(scores, sparse_scores)
        labels, _ = dense.predict_batch(X, name)
        assert labels == sparse.predict_batch(with_stored_zeros(X, 2), name)[0]


@pytest.mark.parametrize("kind", BINARY_KINDS)
@settings(max_examples=60, deadline=None)
@given(stream=streams(multiclass=False), max_voters=st.integers(1, 6), budget=st.integers(0, 9))
def test_binary_sparse_equals_dense(
    kind: type[Perceptron],
    stream: tuple[np.ndarray, np.ndarray, list[int]],
    max_voters: int,
    budget: int,
) -> None:
    X, y, cuts = stream
    d = X.shape[1] - 1
    settings_ = {
        "prequential_voted": True,
        "max_voters": max_voters,
        "max_voter_bytes": 24 * budget,
    }
    dense = kind(SIGNS, encoder=DenseEncoder(d), **settings_)  # type: ignore[arg-type]
    sparse = kind(SIGNS, encoder=DenseEncoder(d), **settings_)  # type: ignore[arg-type]
    dense_results = learn_in_pieces(dense, X, y, cuts)
    sparse_results = learn_in_pieces(sparse, with_stored_zeros(X, 3), y, [len(y)])
    assert_same_results(
        [BatchResult(*concatenated(dense_results))], [BatchResult(*concatenated(sparse_results))]
    )
    assert_same_learner(dense, sparse, X)


@settings(max_examples=60, deadline=None)
@given(stream=streams(multiclass=True), max_voters=st.integers(1, 6), budget=st.integers(0, 9))
def test_multiclass_sparse_equals_dense(
    stream: tuple[np.ndarray, np.ndarray, list[int]], max_voters: int, budget: int
) -> None:
    X, y, cuts = stream
    d = X.shape[1] - 1
    models = [
        MulticlassPerceptron(
            encoder=DenseEncoder(d),
            prequential_voted=True,
            max_voters=max_voters,
            max_voter_bytes=24 * budget,
            seed=5,
        )
        for _ in range(2)
    ]
    for model in models:
        model.encode_labels(list(range(4)), grow=True)
    dense_results = learn_in_pieces(models[0], X, y, cuts)
    sparse_results = learn_in_pieces(models[1], CSRBatch.from_dense(X), y, cuts[::-1][:1])
    assert_same_results(
        [BatchResult(*concatenated(dense_results))], [BatchResult(*concatenated(sparse_results))]
    )
    assert_same_learner(models[0], models[1], X)


def concatenated(results: list[BatchResult]) -> tuple[object, ...]:
    totals: dict[str, int] = {}
    for result in results:
        for name, count in result.prequential_mistakes.items():
            totals[name] = totals.get(name, 0) + count
    return (
        np.concatenate([r.mistakes for r in results]),
        np.concatenate([r.predictions for r in results]),
        np.concatenate([r.margins for r in results]),
        totals,
    )


def test_the_comparison_sees_a_different_vector() -> None:
    """Control: one changed value gives different states, so the equality above is not vacuous."""
    X = np.array([[1.0, 2.0, 0.0], [1.0, -1.0, 3.0], [1.0, 0.5, -2.0]])
    y = np.array([-1.0, 1.0, 1.0])
    dense = Perceptron(SIGNS, encoder=DenseEncoder(2))
    sparse = Perceptron(SIGNS, encoder=DenseEncoder(2))
    dense.learn_batch(X, y)
    changed = X.copy()
    changed[0, 1] = np.nextafter(2.0, 3.0)  # the first event is always an update
    sparse.learn_batch(CSRBatch.from_dense(changed), y)
    assert dump_state(dense) != dump_state(sparse)


@settings(max_examples=40, deadline=None)
@given(
    stream=streams(multiclass=False), u=st.lists(entries, min_size=MAX_WIDTH, max_size=MAX_WIDTH)
)
def test_bound_statuses_are_identical_and_hold_on_sparse_streams(
    stream: tuple[np.ndarray, np.ndarray, list[int]], u: list[float]
) -> None:
    X, y, cuts = stream
    reference = np.array(u[: X.shape[1]])
    if not reference.any():
        reference[0] = 1.0
    trackers = [BoundTracker([Reference("u", reference)]) for _ in range(2)]
    model = Perceptron(SIGNS, encoder=DenseEncoder(X.shape[1] - 1))
    sparse_model = Perceptron(SIGNS, encoder=DenseEncoder(X.shape[1] - 1))
    start = 0
    for stop in cuts:
        result = model.learn_batch(X[start:stop], y[start:stop])
        trackers[0].observe_batch(X[start:stop], y[start:stop], result)
        start = stop
    batch = with_stored_zeros(X, 2)
    result = sparse_model.learn_batch(batch, y)
    trackers[1].observe_batch(batch, y, result)
    dense_status, sparse_status = (t.status()[0].as_dict() for t in trackers)
    assert dense_status == sparse_status
    assert not trackers[1].violated
    assert trackers[1].mistakes <= sparse_status["bound"] * (1 + 1e-9) + 1e-9


def test_multiclass_bound_statuses_are_identical_for_sparse_rows() -> None:
    rng = np.random.default_rng(3)
    X = np.where(rng.random((300, 12)) < 0.3, rng.integers(-3, 4, (300, 12)), 0).astype(float)
    X[:, 0] = 1.0
    U = rng.standard_normal((3, 12))
    y = np.argmax(X @ U.T, axis=1).astype(np.int64)
    results = []
    trackers = [BoundTracker([Reference("U", U)], multiclass=True) for _ in range(2)]
    for tracker, rows in zip(trackers, (X, CSRBatch.from_dense(X)), strict=True):
        model = MulticlassPerceptron([0, 1, 2], encoder=DenseEncoder(11))
        result = model.learn_batch(rows, y)
        tracker.observe_batch(rows, y, result)
        results.append(result)
    assert np.array_equal(results[0].mistakes, results[1].mistakes)
    assert trackers[0].status()[0].as_dict() == trackers[1].status()[0].as_dict()
    assert results[1].n_updates > 0 and not trackers[1].violated


def test_a_sparse_stream_learns_a_separable_hashed_bag_of_words_and_the_bound_holds() -> None:
    """2^18 + 1 coordinates, 20 words per event: the tracker certifies every mistake count."""
    dimension = 2**18 + 1
    rng = np.random.default_rng(4)
    teacher = np.zeros(dimension)
    words = rng.choice(np.arange(1, dimension), size=300, replace=False)
    teacher[words] = rng.choice([-1.0, 1.0], size=300)
    rows, labels = [], []
    while len(rows) < 2_000:
        columns = np.unique(rng.choice(words, size=20))
        score = teacher[columns].sum()
        if abs(score) < 2:  # a margin: the stream is separable by the teacher
            continue
        rows.append((np.concatenate([[0], columns]), np.ones(columns.shape[0] + 1)))
        labels.append(1.0 if score > 0 else -1.0)
    batch = CSRBatch.from_rows(rows, dimension)
    y = np.array(labels)
    model = Perceptron(SIGNS, encoder=DenseEncoder(dimension - 1))
    tracker = BoundTracker([Reference("teacher", teacher)])
    for start in range(0, len(y), 500):
        piece = batch.select(start, start + 500)
        tracker.observe_batch(
            piece, y[start : start + 500], model.learn_batch(piece, y[start : start + 500])
        )
    status = tracker.status()[0]
    assert status.min_margin is not None and status.min_margin > 0
    assert status.novikoff is not None and model.n_updates <= status.novikoff
    assert not tracker.violated
    assert model.n_updates > 0
    # Control: a reference that does not separate the stream gives no Novikoff bound.
    contrary = BoundTracker([Reference("contrary", -teacher)])
    contrary.observe_batch(batch, y, np.zeros(len(y), dtype=bool))
    assert contrary.status()[0].novikoff is None
