"""Snapshots copy the weights into pooled buffers: a buffer is reused only once no snapshot,
view or reader holds it, so a snapshot a reader holds never changes."""

from __future__ import annotations

import numpy as np

from learning import DenseEncoder, LabelMap, Perceptron
from learning.predictor import Predictor

SIGNS = LabelMap({1: 1, -1: -1})
DIMENSION = 50
EVENTS = 200


def learned(seed: int) -> Perceptron:
    model = Perceptron(SIGNS, encoder=DenseEncoder(DIMENSION))
    learn_more(model, seed)
    return model


def learn_more(model: Perceptron, seed: int) -> None:
    """EVENTS encoded events (x̃ = (1, x)) with random labels."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((EVENTS, DIMENSION + 1))
    X[:, 0] = 1.0
    model.learn_batch(X, np.where(rng.random(EVENTS) < 0.5, 1.0, -1.0))


def address(predictor: Predictor) -> int:
    return int(predictor.weights.__array_interface__["data"][0])


def test_a_held_snapshot_never_changes_while_later_ones_are_taken() -> None:
    model = learned(1)
    held = model.snapshot()
    weights = held.weights.copy()
    averaged = held.averaged_weights.copy()
    for seed in range(2, 8):
        learn_more(model, seed)
        model.snapshot()  # dropped at once: its buffers go back to the pool
    assert np.array_equal(held.weights, weights)
    assert np.array_equal(held.averaged_weights, averaged)
    assert not np.array_equal(model.snapshot().weights, weights)  # control: learning went on
    assert not held.weights.flags.writeable


def test_a_dropped_snapshot_lends_its_buffers_to_the_next() -> None:
    model = learned(1)
    first = model.snapshot()
    reused = address(first)
    kept = model.snapshot()  # taken while the first is held: another buffer
    assert address(kept) != reused  # control: a held buffer is not handed out
    del first
    learn_more(model, 2)
    again = model.snapshot()
    assert address(again) == reused
    assert np.array_equal(again.weights, model.weights)
