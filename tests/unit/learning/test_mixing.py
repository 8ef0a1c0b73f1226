"""Iterative parameter mixing: the uniform mix and the distributed bound on a simulated IPM.

The simulation runs the seeds' perceptron (mistake when y·w·x̃ ≤ 0, w += y·x̃; multiclass argmax,
w_y += x̃, w_ŷ -= x̃) on P shards round by round from the mixed weights, feeds each shard's round
to a fresh :class:`BoundTracker`, and checks the bound and both steps of its proof after every mix.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learning import BoundTracker, Reference, StateError, default_gamma_grid
from learning.mixing import (
    DistributedBound,
    ShardRound,
    ipm_bound,
    mix_uniform,
)

RELATIVE = 1e-9
GRID = default_gamma_grid()


def shard_round_binary(
    w: np.ndarray, X: np.ndarray, y: np.ndarray, tracker: BoundTracker
) -> tuple[np.ndarray, int]:
    """The ordinary perceptron from ``w`` over one shard's round; (new weights, mistakes)."""
    w = w.copy()
    flags = np.zeros(len(y), dtype=bool)
    for i, (x, target) in enumerate(zip(X, y, strict=True)):
        if target * (w @ x) <= 0.0:
            w += target * x
            flags[i] = True
    if len(y):
        tracker.observe_batch(X, y, flags)
    return w, int(flags.sum())


def shard_round_multiclass(
    W: np.ndarray, X: np.ndarray, y: np.ndarray, tracker: BoundTracker
) -> tuple[np.ndarray, int]:
    """The multiclass perceptron (argmax, lowest index on ties) from ``W`` over one round."""
    W = W.copy()
    flags = np.zeros(len(y), dtype=bool)
    for i, (x, target) in enumerate(zip(X, y, strict=True)):
        predicted = int(np.argmax(W @ x))
        if predicted != int(target):
            W[int(target)] += x
            W[predicted] -= x
            flags[i] = True
    if len(y):
        tracker.observe_batch(X, y.astype(np.int64), flags, n_classes=W.shape[0])
    return W, int(flags.sum())


def kesler_margin(U: np.ndarray, x: np.ndarray, target: int) -> float:
    scores = U @ x
    return float(scores[target] - max(s for c, s in enumerate(scores) if c != target))


@st.composite
def ipm_streams(draw: st.DrawFn, multiclass: bool) -> dict[str, object]:
    """P shards, rounds of up to R events each (a shard may have fewer: a time cut), a reference."""
    partitions = draw(st.integers(1, 4))
    round_events = draw(st.integers(1, 8))
    rounds = draw(st.integers(1, 6))
    d = draw(st.integers(1, 3))
    classes = draw(st.integers(2, 4)) if multiclass else 0
    seed = draw(st.integers(0, 2**32 - 1))
    noise = draw(st.sampled_from([0.0, 0.1, 0.4]))
    scale = draw(st.sampled_from([1e-3, 1.0, 1e3]))
    rng = np.random.default_rng(seed)
    shape = (classes, d + 1) if multiclass else (d + 1,)
    u = rng.standard_normal(shape)
    events = []
    for _ in range(rounds):
        per_shard = []
        for _ in range(partitions):
            n = int(rng.integers(0, round_events + 1))
            X = np.hstack([np.ones((n, 1)), scale * rng.uniform(-2, 2, size=(n, d))])
            if multiclass:
                y = np.argmax(X @ u.T, axis=1).astype(float) if n else np.zeros(0)
                flip = rng.random(n) < noise
                y[flip] = rng.integers(0, classes, size=int(flip.sum()))
            else:
                y = np.where(X @ u > 0, 1.0, -1.0)
                y[rng.random(n) < noise] *= -1.0
            per_shard.append((X, y))
        events.append(per_shard)
    return {"events": events, "u": u, "partitions": partitions, "classes": classes}


def run_ipm(stream: dict[str, object], multiclass: bool) -> None:
    """Simulate IPM and check, after every mix, the bound and both inequalities of its proof."""
    events = stream["events"]
    assert isinstance(events, list)
    u = np.asarray(stream["u"])
    partitions = int(str(stream["partitions"]))
    classes = int(str(stream["classes"]))
    reference = Reference("u", u)
    unit = reference.weights
    bound = DistributedBound(["u"], partitions=partitions, multiclass=multiclass)
    w = np.zeros((classes, u.shape[-1])) if multiclass else np.zeros(u.shape[-1])
    margins: list[float] = []
    for r, per_shard in enumerate(events, start=1):
        results, shards = [], []
        for p, (X, y) in enumerate(per_shard):
            tracker = BoundTracker([reference], multiclass=multiclass)
            learn = shard_round_multiclass if multiclass else shard_round_binary
            w_p, _ = learn(w, X, y, tracker)
            results.append(w_p)
            shards.append(ShardRound.from_tracker(p, r, tracker))
            for x, target in zip(X, y, strict=True):
                margins.append(
                    kesler_margin(unit, x, int(target)) if multiclass else target * (unit @ x)
                )
        w = mix_uniform(results)
        bound.add_round(shards)
        status = bound.status()[0]
        assert not bound.violated
        assert status.mixed_mistakes <= status.bound * (1 + RELATIVE) + RELATIVE
        assert status.total_mistakes == round(status.mixed_mistakes * partitions)
        # The proof's two steps, at every gamma of the grid.
        radius = status.radius * (math.sqrt(2.0) if multiclass else 1.0)
        projection = float(np.sum(unit * w))
        assert float(np.sum(w * w)) <= radius**2 * status.mixed_mistakes * (1 + RELATIVE)
        for gamma in GRID[::12]:
            k_mixed = sum(m < gamma for m in margins) / partitions
            floor = gamma * status.mixed_mistakes - (gamma + radius) * k_mixed
            assert projection >= floor - RELATIVE * max(1.0, abs(floor))


@settings(max_examples=60, deadline=None)
@given(ipm_streams(multiclass=False))
def test_binary_ipm_mistakes_never_exceed_the_distributed_bound(stream: dict[str, object]) -> None:
    run_ipm(stream, multiclass=False)


@settings(max_examples=60, deadline=None)
@given(ipm_streams(multiclass=True))
def test_multiclass_ipm_mistakes_never_exceed_the_kesler_distributed_bound(
    stream: dict[str, object],
) -> None:
    run_ipm(stream, multiclass=True)


def separable_shards(
    seed: int, partitions: int, rounds: int, gamma: float
) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    rng = np.random.default_rng(seed)
    u = np.array([0.3, 0.8, -0.5])
    u /= np.linalg.norm(u)
    events = []
    for _ in range(rounds):
        per_shard = []
        for _ in range(partitions):
            X = np.hstack([np.ones((40, 1)), rng.uniform(-2, 2, size=(40, 2))])
            X = X[np.abs(X @ u) >= gamma]
            per_shard.append((X, np.where(X @ u > 0, 1.0, -1.0)))
        events.append(per_shard)
    return events


@pytest.mark.parametrize("partitions", [1, 2, 4])
def test_separable_total_mistakes_stay_below_p_times_novikoff_and_stop(partitions: int) -> None:
    gamma = 0.2
    events = separable_shards(7, partitions, rounds=40, gamma=gamma)
    u = np.array([0.3, 0.8, -0.5])
    bound = DistributedBound(["u"], partitions=partitions)
    w = np.zeros(3)
    late_mistakes = 0
    for r, per_shard in enumerate(events, start=1):
        results, shards = [], []
        for p, (X, y) in enumerate(per_shard):
            tracker = BoundTracker([Reference("u", u)])
            w_p, mistakes = shard_round_binary(w, X, y, tracker)
            results.append(w_p)
            shards.append(ShardRound.from_tracker(p, r, tracker))
            late_mistakes += mistakes if r > 30 else 0
        w = mix_uniform(results)
        bound.add_round(shards)
    status = bound.status()[0]
    novikoff = (status.radius / gamma) ** 2
    assert status.total_mistakes <= partitions * novikoff
    assert status.novikoff is not None and status.total_mistakes <= partitions * status.novikoff
    assert late_mistakes == 0  # learning has stopped making mistakes


def test_the_bound_flags_mistakes_beyond_it() -> None:
    """Control: a round claiming more mistakes than the bound allows is a violation."""
    tracker = BoundTracker([Reference("u", [0.0, 1.0])])
    tracker.observe_batch(np.array([[1.0, 2.0]]), np.array([1.0]), np.array([False]))
    honest = ShardRound.from_tracker(0, 1, tracker)
    inflated = ShardRound(
        partition=0,
        round=1,
        seen=honest.seen,
        mistakes=50,
        radius_sq=honest.radius_sq,
        histograms=honest.histograms,
        min_margins=honest.min_margins,
    )
    checked = DistributedBound(["u"], partitions=1)
    checked.add_round([honest])
    assert not checked.status()[0].violated
    checked.add_round([inflated])
    status = checked.status()[0]
    assert status.violated and status.violation_round == 2


def test_the_single_learner_formula_is_not_valid_for_fractional_k() -> None:
    """Why the tracker solves the quadratic: a² + K̃(1 + 2a) is below it when 0 < K̃ < 1."""
    a, k_mixed = 2.0, 0.5
    assert ipm_bound(a, 1.0, k_mixed) > a * a + k_mixed * (1 + 2 * a)
    for k_whole in (0.0, 1.0, 3.0):
        assert ipm_bound(a, 1.0, k_whole) <= a * a + k_whole * (1 + 2 * a) + 1e-12


def test_mix_is_the_mean_in_partition_order_and_pads_new_classes() -> None:
    shards = [np.array([0.1, 0.2]), np.array([0.3, 0.4]), np.array([0.5, 0.7])]
    total = (shards[0] + shards[1] + shards[2]) / 3
    assert np.array_equal(mix_uniform(shards), total)
    mixed = mix_uniform([np.ones((2, 2)), np.ones((3, 2))])
    assert mixed.tolist() == [[1.0, 1.0], [1.0, 1.0], [0.5, 0.5]]
    with pytest.raises(ValueError, match="differ in length"):
        mix_uniform([np.zeros(2), np.zeros(3)])
    with pytest.raises(ValueError, match="at least one"):
        mix_uniform([])


def test_a_round_must_hold_every_partition_once() -> None:
    tracker = BoundTracker([Reference("u", [1.0])])
    shard = ShardRound.from_tracker(0, 1, tracker)
    bound = DistributedBound(["u"], partitions=2)
    with pytest.raises(ValueError, match="once each"):
        bound.add_round([shard, shard])
    with pytest.raises(ValueError, match="histograms have shape"):
        DistributedBound(["u", "v"], partitions=1).add_round([shard])


def test_state_round_trips_and_refuses_wrong_shapes() -> None:
    events = separable_shards(3, 2, rounds=3, gamma=0.1)
    bound = DistributedBound(["u"], partitions=2)
    for r, per_shard in enumerate(events, start=1):
        shards = []
        for p, (X, y) in enumerate(per_shard):
            tracker = BoundTracker([Reference("u", [0.3, 0.8, -0.5])])
            shard_round_binary(np.zeros(3), X, y, tracker)
            shards.append(ShardRound.from_tracker(p, r, tracker))
        bound.add_round(shards)
    meta, arrays = bound.to_state()
    restored = DistributedBound.from_state(meta, arrays)
    assert restored.status() == bound.status()
    broken = dict(arrays, histograms=arrays["histograms"][:, :-1])
    with pytest.raises(StateError, match="histograms"):
        DistributedBound.from_state(meta, broken)
