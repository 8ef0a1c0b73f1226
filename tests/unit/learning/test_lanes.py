"""The dense scoring pass: four partial sums held as vector lanes, and the values checked in it.

``learning._kernels.dense_row_pass`` must round exactly like the four scalar partial sums
(element j in partial sum j mod 4, in increasing j) that the sparse pass and every other dot of
the kernels use, and must flag a bad value (and a zero) wherever it sits in the row: in the
vector part or in the n mod 4 tail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.typing import NDArray

from learning import DenseEncoder, LabelMap, Perceptron
from learning import _kernels as k
from learning.encoders import MAX_ABS_FEATURE
from learning.errors import FeatureError
from learning.state import dump_state, load_state

SIGNS = LabelMap({1: 1, -1: -1})
LENGTHS = (0, 1, 2, 3, 4, 5, 7, 8, 64, 1001, 1002, 1003)


def four_lane_dot(a: NDArray[np.float64], x: NDArray[np.float64]) -> float:
    """a·x summed as the kernels sum it: partial sum j mod 4 in increasing j, then paired."""
    lanes = [0.0, 0.0, 0.0, 0.0]
    for j in range(x.shape[0]):
        lanes[j % 4] += float(a[j]) * float(x[j])
    return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])


def sequential_dot(a: NDArray[np.float64], x: NDArray[np.float64]) -> float:
    total = 0.0
    for j in range(x.shape[0]):
        total += float(a[j]) * float(x[j])
    return total


def wide_range(rng: np.random.Generator, n: int) -> NDArray[np.float64]:
    """Values over many magnitudes, so the order of summation shows in the last bits."""
    return rng.standard_normal(n) * 10.0 ** rng.integers(-6, 7, size=n)


@pytest.mark.parametrize("n", LENGTHS)
def test_dense_scores_round_as_four_scalar_partial_sums(n: int) -> None:
    rng = np.random.default_rng(n)
    w, sums, x = wide_range(rng, n), wide_range(rng, n), wide_range(rng, n)
    seen = 37
    score, total, x_sq, valid, no_zeros = k.dense_row_pass(w, sums, seen, x, MAX_ABS_FEATURE)
    expected = four_lane_dot(w, x)
    assert valid and no_zeros
    assert score == expected
    assert total == four_lane_dot(sums, x) + seen * expected
    assert x_sq == four_lane_dot(x, x) == k.dot(x, x, n)
    assert k.row_scores(w, sums, seen, np.arange(n), x, True, np.empty(k.PARTIAL_SUMS)) == (
        score,
        total,
    )


def test_the_four_lane_reference_tells_summation_orders_apart() -> None:
    """Control: on these values another order rounds differently, so the test above would
    notice a change in the lanes."""
    differing = 0
    for n in LENGTHS:
        rng = np.random.default_rng(n)
        w, _, x = wide_range(rng, n), wide_range(rng, n), wide_range(rng, n)
        differing += four_lane_dot(w, x) != sequential_dot(w, x)
    assert differing >= 3


def test_strided_rows_score_like_their_contiguous_copies() -> None:
    rng = np.random.default_rng(5)
    w, sums, x = wide_range(rng, 2006)[::2], wide_range(rng, 3009)[::3], wide_range(rng, 1003)
    assert not (w.flags.c_contiguous or sums.flags.c_contiguous)
    strided = k.dense_row_pass(w, sums, 3, x[::1], MAX_ABS_FEATURE)
    assert strided == k.dense_row_pass(w.copy(), sums.copy(), 3, x, MAX_ABS_FEATURE)
    assert strided[0] == four_lane_dot(w, x)
    wide_x = np.repeat(x, 2)[::2]
    assert not wide_x.flags.c_contiguous
    assert k.dense_row_pass(w, sums, 3, wide_x, MAX_ABS_FEATURE) == strided


@pytest.mark.parametrize("column", [0, 3, 6, 11, 12, 13])
@pytest.mark.parametrize("bad", [math.nan, -math.inf, math.inf, -2 * MAX_ABS_FEATURE])
def test_a_bad_value_anywhere_in_the_row_makes_it_invalid(column: int, bad: float) -> None:
    x = np.ones(14)  # 12 values read as vectors, then a tail of 2
    w = np.ones(14)
    assert k.dense_row_pass(w, w, 0, x, MAX_ABS_FEATURE)[3]
    x[column] = MAX_ABS_FEATURE  # control: the bound itself is allowed
    assert k.dense_row_pass(w, w, 0, x, MAX_ABS_FEATURE)[3]
    x[column] = bad
    assert not k.dense_row_pass(w, w, 0, x, MAX_ABS_FEATURE)[3]


@pytest.mark.parametrize("column", [0, 3, 6, 11, 12, 13])
def test_a_zero_anywhere_in_the_row_is_flagged(column: int) -> None:
    x = np.full(14, -0.5)
    w = np.ones(14)
    assert k.dense_row_pass(w, w, 0, x, MAX_ABS_FEATURE)[4]
    x[column] = -0.0
    assert not k.dense_row_pass(w, w, 0, x, MAX_ABS_FEATURE)[4]
    assert k.count_touched(x) == 13


@pytest.mark.parametrize("column", [1, 7, 12, 13])
def test_wide_batches_checked_inside_the_kernel_are_still_all_or_nothing(column: int) -> None:
    rng = np.random.default_rng(column)
    d = 13
    n = 3000
    X = np.hstack([np.ones((n, 1)), rng.standard_normal((n, d))])
    y = np.where(X @ rng.standard_normal(d + 1) >= 0, 1.0, -1.0)
    model = Perceptron(SIGNS, encoder=DenseEncoder(d), prequential_voted=True)
    model.learn_batch(X[:500], y[:500])
    before = dump_state(model)
    assert X.nbytes >= 4 * model._state.nbytes  # the in-kernel check is the one exercised
    X[2100, column] = math.nan
    with pytest.raises(FeatureError) as error:
        model.learn_batch(X, y)
    assert (error.value.code, error.value.index) == ("non_finite", 2100)
    assert dump_state(model) == before
    X[2100, column] = 0.5
    checked_inside = model.learn_batch(X, y)
    other, _, _ = load_state(before)
    for start in range(0, n, 10):  # small batches: checked up front
        other.learn_batch(X[start : start + 10], y[start : start + 10])
    assert dump_state(other) == dump_state(model)
    assert checked_inside.n_updates > 0
