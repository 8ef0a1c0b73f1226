"""The voted predictor has two compiled paths (voter by voter, and all voters at once for batches
of several rows); they must decide every vote identically."""

from __future__ import annotations

import numpy as np
import pytest

from learning import DenseEncoder, LabelMap, Perceptron

LABELS = LabelMap({1: 1, -1: -1})


def noisy_stream(dimension: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, dimension))
    X[::13] = 0.0  # zero scores: sign(0) = +1 ties on every path
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    return X, y


@pytest.mark.parametrize(("dimension", "max_voters"), [(1, 64), (3, 5), (6, 64), (17, 2)])
def test_batches_count_voted_mistakes_like_one_event_at_a_time(
    dimension: int, max_voters: int
) -> None:
    X, y = noisy_stream(dimension, 1_500, seed=dimension)
    batched = Perceptron(
        LABELS, encoder=DenseEncoder(dimension), prequential_voted=True, max_voters=max_voters
    )
    one_by_one = Perceptron(
        LABELS, encoder=DenseEncoder(dimension), prequential_voted=True, max_voters=max_voters
    )
    encoded = batched.encoder.encode_batch(X)
    for start in range(0, len(X), 500):
        batched.learn_batch(encoded[start : start + 500], y[start : start + 500])
    for row, label in zip(encoded, y, strict=True):
        one_by_one.learn_batch(row[None, :], np.array([label]))
    assert batched.n_voters == max_voters  # the cap was reached: voters were replaced
    assert batched.prequential_mistakes == one_by_one.prequential_mistakes
    assert np.array_equal(batched.weights, one_by_one.weights)


def test_voted_predictions_of_a_batch_equal_those_of_single_rows() -> None:
    X, y = noisy_stream(7, 2_000, seed=5)
    model = Perceptron(LABELS, encoder=DenseEncoder(7), prequential_voted=True)
    encoded = model.encoder.encode_batch(X)
    model.learn_batch(encoded, y)
    snapshot = model.snapshot()
    codes, scores = snapshot.predict_codes(encoded[:300], "voted")
    singles = [snapshot.predict_codes(encoded[i : i + 1], "voted") for i in range(300)]
    assert np.array_equal(codes, np.concatenate([c for c, _ in singles]))
    assert np.array_equal(scores, np.concatenate([s for _, s in singles]))


def test_the_column_map_of_long_sparse_batches_votes_as_the_binary_search() -> None:
    from learning import HashingEncoder, dump_state  # noqa: PLC0415 - local to this test
    from learning._voters import position_map  # noqa: PLC0415

    bits = 14  # dense voter copies would exceed VOTER_COLUMNS_BYTES: the log votes
    width = (1 << bits) + 1
    assert position_map(1, False, width, True).shape == (0,)  # one row: binary search
    assert position_map(60, False, width, True).shape == (width,)  # control: the map
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(300)]
    rows = [{str(rng.choice(words)): float(rng.normal()) for _ in range(12)} for _ in range(400)]
    signs = np.where(rng.random(400) < 0.5, 1.0, -1.0)

    def learner() -> Perceptron:
        return Perceptron(encoder=HashingEncoder(bits), prequential_voted=True, max_voters=16)

    batch, single = learner(), learner()
    for start in range(0, 400, 100):
        rows_part = rows[start : start + 100]
        batch.learn_batch(batch.encoder.encode_sparse_batch(rows_part), signs[start : start + 100])
    for row, sign in zip(rows, signs.tolist(), strict=True):
        single.learn_batch(single.encoder.encode_sparse_batch([row]), np.array([sign]))
    assert batch.n_voters == 16 and batch.prequential_mistakes["voted"] > 50
    assert dump_state(batch) == dump_state(single)
    assert batch.prequential_mistakes == single.prequential_mistakes
    encode = batch.encoder.encode_sparse_batch
    mapped = batch.predict_batch(encode(rows[:80]), "voted")[1]
    searched = [batch.predict_batch(encode([row]), "voted")[1][0] for row in rows[:80]]
    assert mapped.tolist() == searched
    assert len(set(searched)) > 10  # control: the scores tell the rows apart
