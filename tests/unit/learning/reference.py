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


@dataclass
class VotedTrace:
    """Per-event voted predictions and the voters kept at the end (oldest first)."""

    predictions: list[int]
    voters: list[tuple[int, NDArray[np.float64]]]
    dropped_voters: int
    dropped_votes: int


@dataclass
class _Voters:
    """Dense copies of past weights with their survival counts and log sizes, oldest first."""

    max_voters: int
    max_entries: int
    kept: list[tuple[NDArray[np.float64], int, int]] = field(default_factory=list)
    dropped_voters: int = 0
    dropped_votes: int = 0

    def add(self, weights: NDArray[np.float64], count: int, entries: int) -> None:
        """Keep a finished voter, dropping the oldest ones at the bound (as documented)."""
        if count <= 0:
            return
        if entries > self.max_entries:
            self.dropped_voters += len(self.kept) + 1
            self.dropped_votes += sum(c for _, c, _ in self.kept) + count
            self.kept = []
            return
        while len(self.kept) >= self.max_voters or (
            sum(e for _, _, e in self.kept) + entries > self.max_entries
        ):
            _, oldest, _ = self.kept.pop(0)
            self.dropped_voters += 1
            self.dropped_votes += oldest
        self.kept.append((weights.copy(), count, entries))


def bounded_voted_binary(
    X: NDArray[np.float64], y: NDArray[np.float64], max_voters: int, max_entries: int
) -> VotedTrace:
    """The voted perceptron with every kept voter a dense copy, voting in full every event."""
    w = np.zeros(X.shape[1])
    born = 0
    voters = _Voters(max_voters, max_entries)
    predictions = []
    for t, (x, target) in enumerate(zip(X, y, strict=True)):
        live = t - born
        score = float(w @ x)
        vote = sign(score) * live + sum(c * sign(float(v @ x)) for v, c, _ in voters.kept)
        predictions.append(sign(vote))
        if target * score <= 0:
            voters.add(w, live, int(np.count_nonzero(x)))
            w = w + target * x
            born = t
    return VotedTrace(
        predictions,
        [(c, v) for v, c, _ in voters.kept],
        voters.dropped_voters,
        voters.dropped_votes,
    )


def bounded_voted_multiclass(
    X: NDArray[np.float64],
    y: NDArray[np.int64],
    n_classes: int,
    seed: int,
    max_voters: int,
    max_entries: int,
) -> VotedTrace:
    """Multiclass voted perceptron: each voter votes for its argmax (ties by the next draw)."""
    W = np.zeros((n_classes, X.shape[1]))
    state = seed
    born = 0
    voters = _Voters(max_voters, max_entries)
    predictions = []
    for t, (x, target) in enumerate(zip(X, y.tolist(), strict=True)):
        live = t - born
        predicted, tied = argmax_with_tie([float(row @ x) for row in W], state)
        votes = [0] * n_classes
        votes[predicted] += live
        for V, count, _ in voters.kept:
            choice, _ = argmax_with_tie([float(row @ x) for row in V], state)
            votes[choice] += count
        predictions.append(argmax_with_tie([float(v) for v in votes], state)[0])
        if tied:
            state = _rng.advance(state)
        if predicted != target:
            voters.add(W, live, int(np.count_nonzero(x)))
            W[target] += x
            W[predicted] -= x
            born = t
    return VotedTrace(
        predictions,
        [(c, V) for V, c, _ in voters.kept],
        voters.dropped_voters,
        voters.dropped_votes,
    )
