"""The voted predictor's byte bound: exact below it, the documented behaviour at it (the oldest
voters are dropped), against literal references that keep dense copies."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learning import DenseEncoder, LabelMap, MulticlassPerceptron, VotedPerceptron, dump_state
from learning._arrays import BINARY_ROWS_TOUCHED, MULTICLASS_ROWS_TOUCHED, entry_bytes
from learning.sparse import CSRBatch
from tests.unit.learning.reference import bounded_voted_binary, bounded_voted_multiclass

SIGNS = LabelMap({1: 1, -1: -1})
UNBOUNDED = 10**6
BINARY_ENTRY = entry_bytes(BINARY_ROWS_TOUCHED)


def sparse_integer_stream(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Integer x̃ (exact dot products in any order), mostly zeros, bias first, noisy labels."""
    rng = np.random.default_rng(seed)
    X = np.where(rng.random((n, d)) < 0.4, rng.integers(-3, 4, (n, d)), 0).astype(float)
    X[:, 0] = 1.0
    y = np.where(X @ rng.integers(-2, 3, d) >= 0, 1.0, -1.0)
    y[rng.random(n) < 0.2] *= -1
    return X, y


def voted_predictions(
    model: VotedPerceptron | MulticlassPerceptron, X: np.ndarray, y: np.ndarray
) -> list[int]:
    """The voted prediction before each event (a snapshot), then learning it from a CSR row."""
    predictions = []
    for i in range(len(y)):
        row = CSRBatch.from_dense(X[i : i + 1])
        predictions.append(int(model.snapshot().predict_codes(row, "voted")[0][0]))
        model.learn_batch(row, y[i : i + 1])
    return predictions


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), max_voters=st.integers(1, 8), entries=st.integers(0, 30))
def test_binary_vote_equals_the_reference_below_and_at_the_bound(
    seed: int, max_voters: int, entries: int
) -> None:
    X, y = sparse_integer_stream(120, 7, seed)
    model = VotedPerceptron(
        SIGNS,
        encoder=DenseEncoder(6),
        max_voters=max_voters,
        max_voter_bytes=entries * BINARY_ENTRY,
    )
    predictions = voted_predictions(model, X, y)
    reference = bounded_voted_binary(X, y, max_voters, entries)
    assert predictions == reference.predictions
    assert [(c, w.tolist()) for c, w in model.voters] == [
        (c, w.tolist()) for c, w in reference.voters
    ]
    assert (model.dropped_voters, model.dropped_votes) == (
        reference.dropped_voters,
        reference.dropped_votes,
    )


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10**6), max_voters=st.integers(1, 8), entries=st.integers(0, 30))
def test_multiclass_vote_equals_the_reference_below_and_at_the_bound(
    seed: int, max_voters: int, entries: int
) -> None:
    X, _ = sparse_integer_stream(100, 6, seed)
    y = np.random.default_rng(seed).integers(0, 3, len(X))
    model = MulticlassPerceptron(
        [0, 1, 2],
        encoder=DenseEncoder(5),
        max_voters=max_voters,
        max_voter_bytes=entries * entry_bytes(MULTICLASS_ROWS_TOUCHED),
        seed=seed,
    )
    predictions = voted_predictions(model, X, y)
    reference = bounded_voted_multiclass(X, y, 3, seed, max_voters, entries)
    assert predictions == reference.predictions
    assert [(c, w.tolist()) for c, w in model.voters] == [
        (c, w.tolist()) for c, w in reference.voters
    ]
    assert model.dropped_voters == reference.dropped_voters


def test_below_the_bound_nothing_is_dropped_and_the_vote_is_freund_and_schapire() -> None:
    X, y = sparse_integer_stream(300, 9, 1)
    model = VotedPerceptron(SIGNS, encoder=DenseEncoder(8), max_voters=UNBOUNDED)
    predictions = voted_predictions(model, X, y)
    reference = bounded_voted_binary(X, y, UNBOUNDED, UNBOUNDED)
    assert model.dropped_voters == 0 and len(model.voters) == len(reference.voters) > 10
    assert predictions == reference.predictions


def test_at_the_byte_bound_the_oldest_voters_go_and_memory_stays_bounded() -> None:
    X, y = sparse_integer_stream(400, 9, 2)
    budget = 40  # entries: a few voters of ~4 non-zeros each
    model = VotedPerceptron(
        SIGNS, encoder=DenseEncoder(8), max_voters=UNBOUNDED, max_voter_bytes=budget * BINARY_ENTRY
    )
    model.learn_batch(X, y)
    state = model._state
    assert state.log_cols.shape[0] <= budget  # the arrays never outgrow the bound
    assert model.dropped_voters > 0
    kept = model.voters
    reference = bounded_voted_binary(X, y, UNBOUNDED, budget)
    assert [c for c, _ in kept] == [c for c, _ in reference.voters]
    # Control: the same stream with an ample budget keeps more voters, so the bound did bite.
    ample = VotedPerceptron(SIGNS, encoder=DenseEncoder(8), max_voters=UNBOUNDED)
    ample.learn_batch(X, y)
    assert len(ample.voters) > len(kept) and ample.dropped_voters == 0


def test_an_update_larger_than_the_whole_bound_drops_every_voter() -> None:
    X = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 2.0], [1.0, 0.0]])
    y = np.array([1.0, 1.0, -1.0, -1.0])
    model = VotedPerceptron(SIGNS, encoder=DenseEncoder(1), max_voter_bytes=1 * BINARY_ENTRY)
    model.learn_batch(X, y)
    # Event 2 (two non-zeros) ends a voter of 2 events: it cannot be logged in one entry. Event 3
    # (one non-zero) ends a voter of 1 event, which fits.
    assert [(c, w.tolist()) for c, w in model.voters] == [(1, [0.0, -2.0])]
    assert (model.dropped_voters, model.dropped_votes) == (1, 2)


@pytest.mark.parametrize("bad", [-1, -100])
def test_a_negative_byte_bound_is_refused(bad: int) -> None:
    with pytest.raises(ValueError, match="max_voter_bytes"):
        VotedPerceptron(SIGNS, encoder=DenseEncoder(1), max_voter_bytes=bad)
    assert VotedPerceptron(SIGNS, encoder=DenseEncoder(1), max_voter_bytes=0).max_voter_bytes == 0


def test_the_dense_voter_copies_vote_exactly_like_the_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small binary models vote from dense voter copies (a cache); large ones from the log."""
    X, y = sparse_integer_stream(600, 9, 3)
    X[::7] = 0.0  # zero scores: sign(0) = +1 ties
    cached = VotedPerceptron(SIGNS, encoder=DenseEncoder(8), prequential_voted=True, max_voters=6)
    cached.learn_batch(X[:300], y[:300])
    assert cached._state.voter_columns.shape == (9, 6)  # control: the cache is in use
    cached.learn_batch(CSRBatch.from_dense(X[300:]), y[300:])
    monkeypatch.setattr("learning._arrays.VOTER_COLUMNS_BYTES", 0)
    logged = VotedPerceptron(SIGNS, encoder=DenseEncoder(8), prequential_voted=True, max_voters=6)
    logged.learn_batch(X[:300], y[:300])
    assert logged._state.voter_columns.size == 0  # no cache: the log is walked
    logged.learn_batch(CSRBatch.from_dense(X[300:]), y[300:])
    assert cached.prequential_mistakes == logged.prequential_mistakes
    assert dump_state(cached) == dump_state(logged)
    assert cached.dropped_voters > 0
    labels, scores = cached.predict_batch(X, "voted")
    logged_labels, logged_scores = logged.predict_batch(X, "voted")
    assert labels == logged_labels
    assert np.array_equal(scores, logged_scores)
