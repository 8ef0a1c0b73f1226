"""The scoring kernels: predictions of one predictor, and the live bound tracker's pass.

Rows come as in :mod:`learning._kernels` (dense or CSR, one form); every quantity costs O(nnz)
per sparse row (O(voters x nnz) for the vote): scores, the averaged score, ‖x̃‖² and the
reference margins (a reference u is dense; u·x̃ visits x̃'s non-zeros only).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from learning._kernels import (
    ACTIVE_CLASSES,
    AVERAGED,
    BORN_MODEL,
    LAST,
    N_VOTERS,
    NO_VIOLATION,
    PARTIAL_SUMS,
    SEEN,
    TRACK_MISTAKES,
    TRACK_SEEN,
    UNROLL,
    VOTE_TOTAL,
    VOTED,
    Floats,
    Ints,
    _jit,
    argmax_tie,
    gather_dot,
    row_scores,
    row_span,
    sign,
)
from learning._learn import class_scores, longest_row
from learning._voters import position_map, vote_binary, vote_binary_columns, vote_multiclass


@_jit
def point_prediction(which: int, score: float, total: float, seen: int) -> tuple[float, float]:
    """(±1, score) of ``last`` or ``averaged`` from w·x̃ and (Σ post-event w)·x̃ (see row_scores).

    last → w·x̃; averaged → w̄·x̃ (0 before any event). sign(0) = +1, as when learning.
    """
    if which == LAST:
        return sign(score), score
    return sign(total), total / seen if seen > 0 else 0.0


@_jit
def predict_binary(  # noqa: PLR0917 - numba kernels take positional arrays
    indptr: Ints,
    indices: Ints,
    values: Floats,
    width: int,
    n: int,
    weights: Floats,
    weight_sums: Floats,
    log_counts: Ints,
    log_start: Ints,
    log_len: Ints,
    log_cols: Ints,
    log_old: Floats,
    counters: Ints,
    voter_columns: Floats,
    which: int,
    out_codes: Floats,
    out_scores: Floats,
) -> None:
    """Predictions (±1) and scores of one predictor; decisions match the learning kernel's.

    ``voter_columns``: dense copies of the voters, or empty (see ``learning._learn.learn_binary``).

    Scores: last → w·x̃; averaged → w̄·x̃ (0 before any event); voted → Σ cₙ sign(wₙ·x̃) / Σ cₙ.
    """
    dense = width > 0
    w = weights[0]
    a = weight_sums[0]
    seen = counters[SEEN]
    live = seen - counters[BORN_MODEL]
    mass = live + counters[VOTE_TOTAL]
    view = np.empty(longest_row(indptr, width, n) if counters[N_VOTERS] > 0 else 0)
    by_columns = voter_columns.shape[0] > 0
    lanes = np.empty((UNROLL, voter_columns.shape[1]))
    partial = np.empty(PARTIAL_SUMS)
    positions = position_map(n, dense, w.shape[0], which == VOTED and not by_columns)
    for i in range(n):
        start, stop = row_span(indptr, width, i)
        vals = values[start:stop]
        cols = indices[0:width] if dense else indices[start:stop]
        score, total = row_scores(w, a, seen, cols, vals, dense, partial)
        if which != VOTED:
            out_codes[i], out_scores[i] = point_prediction(which, score, total, seen)
        else:
            if by_columns:
                acc = vote_binary_columns(
                    cols, vals, score, live, log_counts, counters, voter_columns, lanes, False
                )
            else:
                acc = vote_binary(
                    w, cols, vals, dense, score, live, log_counts, log_start, log_len, log_cols,
                    log_old, counters, view, False, positions,
                )  # fmt: skip
            out_codes[i] = 1.0 if acc >= 0 else -1.0
            out_scores[i] = acc / mass if mass > 0 else 0.0


@_jit
def predict_multiclass(  # noqa: PLR0917 - numba kernels take positional arrays
    indptr: Ints,
    indices: Ints,
    values: Floats,
    width: int,
    n: int,
    weights: Floats,
    weight_sums: Floats,
    log_counts: Ints,
    log_rows: Ints,
    log_start: Ints,
    log_len: Ints,
    log_cols: Ints,
    log_old: Floats,
    counters: Ints,
    state: np.uint64,
    which: int,
    out_codes: Ints,
    out_scores: Floats,
) -> None:
    """Predicted class indices and per-class scores of one predictor (ties as when learning).

    Only the active classes (``counters[ACTIVE_CLASSES]`` ≥ 1) compete; other scores stay 0.

    Scores: last → W·x̃; averaged → W̄·x̃; voted → each class's share of the survival-weighted vote.
    """
    dense = width > 0
    n_classes = counters[ACTIVE_CLASSES]
    rows = weights.shape[0]
    seen = counters[SEEN]
    live = seen - counters[BORN_MODEL]
    mass = live + counters[VOTE_TOTAL]
    scores = np.empty(rows)
    sums = np.empty(rows)
    voter_scores = np.empty(rows)
    votes = np.zeros(rows, dtype=np.int64)
    view = np.empty((rows, longest_row(indptr, width, n) if which != LAST else 0))
    partial = np.empty(PARTIAL_SUMS)
    for i in range(n):
        start, stop = row_span(indptr, width, i)
        vals = values[start:stop]
        cols = indices[0:width] if dense else indices[start:stop]
        class_scores(
            weights, weight_sums, seen, cols, vals, dense, n_classes, scores, sums, partial
        )
        predicted, _ = argmax_tie(scores, n_classes, state)
        if which == LAST:
            out_codes[i] = predicted
            for c in range(n_classes):
                out_scores[i, c] = scores[c]
        elif which == AVERAGED:
            choice, _ = argmax_tie(sums, n_classes, state)
            out_codes[i] = choice
            for c in range(n_classes):
                out_scores[i, c] = sums[c] / seen if seen > 0 else 0.0
        else:
            choice = vote_multiclass(
                weights, cols, vals, dense, n_classes, scores, predicted, live, log_counts,
                log_rows, log_start, log_len, log_cols, log_old, counters, state, view,
                voter_scores, votes, False,
            )  # fmt: skip
            out_codes[i] = choice
            for c in range(n_classes):
                out_scores[i, c] = votes[c] / mass if mass > 0 else 0.0


# --------------------------------------------------------------------------- bound tracking


@_jit
def grid_bin(grid: Floats, margin: float) -> int:
    """Number of grid values ≤ margin (the histogram bin of a margin)."""
    lo = 0
    hi = grid.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if grid[mid] <= margin:
            lo = mid + 1
        else:
            hi = mid
    return lo


@_jit
def grid_bound(histogram: Ints, grid: Floats, radius: float) -> tuple[float, int, int]:
    """min over the grid of (R/gamma)² + k(gamma)·(1 + 2R/gamma): (bound, argmin, k there)."""
    best = math.inf
    best_index = -1
    best_k = 0
    k = 0
    for j in range(grid.shape[0]):
        k += histogram[j]
        q = radius / grid[j]
        value = q * q + k * (1.0 + 2.0 * q)
        if value < best:
            best = value
            best_index = j
            best_k = k
    return best, best_index, best_k


@_jit
def reference_margin(  # noqa: PLR0917 - numba kernels take positional arrays
    reference: Floats,
    cols: Ints,
    vals: Floats,
    dense: bool,
    target: int,
    sign_target: float,
    n_classes: int,
) -> float:
    """Margin of one event under a unit reference (binary: y·u·x̃; multiclass: Kesler).

    ``cols``/``vals`` are already cut to the reference's width (x̃'s other coordinates meet zeros).
    """
    if n_classes == 0:
        return sign_target * gather_dot(reference[0], cols, vals, dense)
    if n_classes < 2:
        return math.inf
    ref_rows = reference.shape[0]
    own = gather_dot(reference[target], cols, vals, dense) if target < ref_rows else 0.0
    rival = -math.inf
    for c in range(n_classes):
        if c != target:
            s = gather_dot(reference[c], cols, vals, dense) if c < ref_rows else 0.0
            rival = max(rival, s)
    return own - rival


@_jit
def observe(  # noqa: PLR0917 - numba kernels take positional arrays
    indptr: Ints,
    indices: Ints,
    values: Floats,
    width: int,
    y: Floats,
    mistakes: NDArray[np.bool_],
    references: Floats,
    n_classes: int,
    kesler_factor: float,
    grid: Floats,
    histograms: Ints,
    min_margins: Floats,
    radius_sq: Floats,
    counters: Ints,
    violation_event: Ints,
    violation_mistakes: Ints,
    violation_bound: Floats,
    tolerance: float,
) -> None:
    """Update R_t, M_t and each reference's margin histogram; check M_t ≤ B_t at each mistake.

    ``n_classes`` is 0 for binary streams (y holds ±1) and the learner's class count for
    multiclass ones (y holds class indices as floats). B_t is non-decreasing in t, so checking at
    the mistakes (where M_t grows) checks every t. ‖x̃‖² is summed in increasing column order over
    the stored values (a dense row's zeros add nothing), the reference margins as in
    :func:`learning._kernels.gather_dot`.
    """
    n = y.shape[0]
    dense = width > 0
    reference_width = references.shape[2]
    n_refs = references.shape[0]
    for i in range(n):
        start, stop = row_span(indptr, width, i)
        vals = values[start:stop]
        cols = indices[0:width] if dense else indices[start:stop]
        norm_sq = 0.0
        for k in range(vals.shape[0]):
            norm_sq += vals[k] * vals[k]
        radius_sq[0] = max(radius_sq[0], norm_sq)
        cut = vals.shape[0]
        while cut > 0 and cols[cut - 1] >= reference_width:
            cut -= 1
        target = int(y[i]) if n_classes > 0 else 0
        for r in range(n_refs):
            margin = reference_margin(
                references[r], cols[:cut], vals[:cut], dense, target, y[i], n_classes
            )
            histograms[r, grid_bin(grid, margin)] += 1
            min_margins[r] = min(min_margins[r], margin)
        counters[TRACK_SEEN] += 1
        if mistakes[i]:
            counters[TRACK_MISTAKES] += 1
            m = counters[TRACK_MISTAKES]
            radius = kesler_factor * math.sqrt(radius_sq[0])
            for r in range(n_refs):
                if violation_event[r] != NO_VIOLATION:
                    continue
                bound, _, _ = grid_bound(histograms[r], grid, radius)
                if min_margins[r] > 0.0:
                    q = radius / min_margins[r]
                    bound = min(bound, q * q)
                if m > bound * (1.0 + tolerance) + tolerance:
                    violation_event[r] = counters[TRACK_SEEN]
                    violation_mistakes[r] = m
                    violation_bound[r] = bound
