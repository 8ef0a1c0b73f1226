"""Plain-Python reference implementations the compiled learners are checked against.

They follow the seeds and Freund & Schapire literally (no laziness, no early exit, every voter
kept), so agreement with them is evidence the kernels' shortcuts are exact. Tests feed them
integer-valued features, for which every dot product is exact in float64 whatever the order of
summation, so the comparison can be bitwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from learning import _rng


def sign(value: float) -> int:
    return 1 if value >= 0 else -1


@dataclass
class BinaryTrace:
    weights: NDArray[np.float64]
    updates: list[bool] = field(default_factory=list)
    predictions: dict[str, list[int]] = field(default_factory=dict)
    averaged: NDArray[np.float64] | None = None
    voters: list[tuple[NDArray[np.float64], int]] = field(default_factory=list)


def binary_reference(X: NDArray[np.float64], y: NDArray[np.float64]) -> BinaryTrace:
    """Perceptron with every intermediate weight vector kept: last, averaged and voted."""
    d = X.shape[1]
    w = np.zeros(d)
    voter_weights: list[NDArray[np.float64]] = [w.copy()]
    voter_counts: list[int] = [0]
    post_event_sum = np.zeros(d)
    trace = BinaryTrace(weights=w, predictions={"last": [], "averaged": [], "voted": []})
    for x, target in zip(X, y, strict=True):
        score = float(w @ x)
        averaged_score = float(post_event_sum @ x)  # same sign as w̄·x̃ (t > 0) and exact
        vote = sum(c * sign(float(v @ x)) for v, c in zip(voter_weights, voter_counts, strict=True))
        trace.predictions["last"].append(sign(score))
        trace.predictions["averaged"].append(sign(averaged_score))
        trace.predictions["voted"].append(sign(vote))
        update = target * score <= 0
        trace.updates.append(bool(update))
        if update:
            w = w + target * x
            voter_weights.append(w.copy())
            voter_counts.append(1)
        else:
            voter_counts[-1] += 1
        post_event_sum += w
    trace.weights = w
    trace.averaged = post_event_sum / len(y) if len(y) else np.zeros(d)
    trace.voters = list(zip(voter_weights, voter_counts, strict=True))
    return trace


@dataclass
class MulticlassTrace:
    weights: NDArray[np.float64]
    updates: list[bool]
    predictions: list[int]
    rng_state: int


def argmax_with_tie(scores: list[float], state: int) -> tuple[int, bool]:
    best = max(scores)
    tied = [c for c, s in enumerate(scores) if s == best]
    if len(tied) == 1:
        return tied[0], False
    return tied[_rng.choose(_rng.peek(state), len(tied))], True


def multiclass_reference(
    X: NDArray[np.float64], y: NDArray[np.int64], n_classes: int, seed: int
) -> MulticlassTrace:
    """The chapter's multiclass perceptron with SplitMix64 tie-breaking (Python generator)."""
    W = np.zeros((n_classes, X.shape[1]))
    state = seed
    updates: list[bool] = []
    predictions: list[int] = []
    for x, target in zip(X, y.tolist(), strict=True):
        predicted, tied = argmax_with_tie([float(row @ x) for row in W], state)
        if tied:
            state = _rng.advance(state)
        predictions.append(predicted)
        update = predicted != target
        updates.append(update)
        if update:
            W[target] += x
            W[predicted] -= x
    return MulticlassTrace(W, updates, predictions, state)


def kesler_margin(U: NDArray[np.float64], x: NDArray[np.float64], target: int) -> float:
    scores = U @ x
    rivals = [s for c, s in enumerate(scores.tolist()) if c != target]
    return float(scores[target] - max(rivals)) if rivals else math.inf


def bound_at(radius: float, margins: list[float], grid: NDArray[np.float64]) -> float:
    """min over the grid of (R/gamma)² + k(gamma)(1 + 2R/gamma), k(gamma) = #{margin < gamma}."""
    k = (np.asarray(margins)[:, None] < grid[None, :]).sum(axis=0)
    q = radius / grid
    return float(np.min(q * q + k * (1.0 + 2.0 * q)))
