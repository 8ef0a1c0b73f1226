"""The learning kernels: prequential predict → mistake → update over a batch, dense or CSR rows.

Rows, state layout and the determinism rules are described in :mod:`learning._kernels`; the
voters' update log in :mod:`learning._voters`. Per event a sparse row costs O(nnz) for the score,
the averaged score and the update, and O(voters x nnz) for the prequential vote (when counted).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from learning._binary_step import close_update, count_mistakes
from learning._kernels import (
    ACTIVE_CLASSES,
    BORN_MODEL,
    DROPPED_VOTERS,
    GOLDEN_GAMMA,
    N_VOTERS,
    NO_LIMIT,
    PARTIAL_SUMS,
    PQ_AVERAGED,
    PQ_LAST,
    PQ_VOTED,
    PQ_VOTED_SEEN,
    SEEN,
    UNROLL,
    UPDATES,
    Floats,
    Ints,
    _inline,
    _jit,
    argmax_tie,
    compact_dot,
    count_touched,
    dense_row_pass,
    first_invalid_value,
    row_scores,
    row_span,
    sign,
)
from learning._voter_index import link_entries, vote_binary_indexed, vote_scratch
from learning._voters import (
    DENSE_RUN,
    NO_ROW,
    newest_slot,
    open_entry,
    position_map,
    vote_binary,
    vote_binary_columns,
    vote_multiclass,
)

UNKNOWN_NORM = -1.0
"""``x_sq`` of :func:`apply_update` when the caller has not summed ‖x‖² (never negative)."""


@_jit
def longest_row(indptr: Ints, width: int, n: int) -> int:
    """The most entries any of the n rows stores (the width for dense rows)."""
    if width > 0:
        return width
    longest = 0
    for i in range(n):
        longest = max(longest, indptr[i + 1] - indptr[i])
    return int(longest)


@_inline
def log_old_values(  # noqa: PLR0917 - numba kernels take positional arrays
    w: Floats,
    cols: Ints,
    vals: Floats,
    dense: bool,
    log_cols: Ints,
    log_old: Floats,
    which: int,
    start: int,
    no_zeros: bool,
) -> None:
    """Log (column, current value) of the coordinates with x_j ≠ 0, in increasing column order.

    ``no_zeros``: every stored value of the row is non-zero (the caller has counted them).
    """
    capacity = log_cols.shape[0]
    n = vals.shape[0]
    if start + n <= capacity and no_zeros:
        # Every stored value is non-zero and the entries do not wrap: straight copies (a dense
        # row's columns are 0 .. n-1, so its old values are a contiguous slice of w).
        for k in range(n):
            log_cols[start + k] = cols[k]
        if dense:
            for k in range(n):
                log_old[which, start + k] = w[k]
        else:
            for k in range(n):
                log_old[which, start + k] = w[cols[k]]
        return
    position = start
    for k in range(n):
        if vals[k] != 0.0:
            if position >= capacity:
                position -= capacity
            c = cols[k]
            log_cols[position] = c
            log_old[which, position] = w[c]
            position += 1


@_inline
def apply_update(  # noqa: PLR0917 - numba kernels take positional arrays
    weights: Floats,
    weight_sums: Floats,
    row_sq: Floats,
    row: int,
    cols: Ints,
    vals: Floats,
    dense: bool,
    positive: bool,
    seen: int,
    score: float,
    x_sq: float,
    log_cols: Ints,
    log_old: Floats,
    which: int,
    start: int,
    no_zeros: bool,
) -> float:
    """W[row] ± x, the lazy-average sums and ‖W[row]‖², in O(stored entries of x); returns ‖x‖².

    Each coordinate's lazy-average sum takes -seen·Δ (see :mod:`learning._kernels`). A zero x_j
    changes nothing (w_j ± 0 = w_j, and neither a weight nor a sum is ever -0.0), so dense rows
    run over every coordinate, vectorised; only the log skips zeros. ‖W[row] ± x‖² is
    ‖W[row]‖² ± 2·``score`` + ‖x‖² (``score`` = W[row]·x before the update); ``x_sq`` is ‖x‖²
    when the caller knows it, else UNKNOWN_NORM (it is then summed here, as compact_dot sums it).
    With ``start`` ≥ 0 the old values are first logged for the voters (row ``which`` of
    ``log_old``, entries from ``start`` on).
    """
    w = weights[row]
    a = weight_sums[row]
    n = vals.shape[0]
    time_step = float(seen)
    step = 1.0 if positive else -1.0
    if dense and no_zeros and n > 0 and 0 <= start <= log_cols.shape[0] - n:
        # The common dense case in one pass, logged as a dense run (see learning._voters).
        log_cols[start] = DENSE_RUN
        dense_update(w, a, vals, log_old[which, start : start + n], step, step * time_step)
        if x_sq == UNKNOWN_NORM:
            _, _, x_sq, _, _ = dense_row_pass(vals, vals, 0, vals, NO_LIMIT)
    else:
        if start >= 0:
            log_old_values(w, cols, vals, dense, log_cols, log_old, which, start, no_zeros)
        if x_sq == UNKNOWN_NORM:
            x_sq = compact_dot(vals, cols, vals, dense)
        update_weights(w, a, cols, vals, dense, positive, time_step)
    change = 2.0 * score if positive else -2.0 * score
    norm_sq = row_sq[row] + (change + x_sq)
    row_sq[row] = norm_sq if norm_sq > 0.0 else 0.0
    return x_sq


@_jit
def dense_update(  # noqa: PLR0917 - numba kernels take positional arrays
    w: Floats, a: Floats, vals: Floats, log: Floats, step: float, drift: float
) -> None:
    """log ← w, w += step·x, a -= drift·x over a whole dense row, in one loop LLVM vectorises."""
    for j in range(vals.shape[0]):
        v = vals[j]
        old = w[j]
        log[j] = old
        w[j] = old + step * v
        a[j] -= drift * v


@_inline
def update_weights(  # noqa: PLR0917 - numba kernels take positional arrays
    w: Floats, a: Floats, cols: Ints, vals: Floats, dense: bool, positive: bool, time_step: float
) -> None:
    """w ± x and a ∓ time_step·x over the row's stored entries (see :func:`apply_update`)."""
    n = vals.shape[0]
    if dense:
        if positive:
            for j in range(n):
                w[j] += vals[j]
                a[j] -= time_step * vals[j]
        else:
            for j in range(n):
                w[j] -= vals[j]
                a[j] += time_step * vals[j]
    elif positive:
        for k in range(n):
            c = cols[k]
            w[c] += vals[k]
            a[c] -= time_step * vals[k]
    else:
        for k in range(n):
            c = cols[k]
            w[c] -= vals[k]
            a[c] += time_step * vals[k]


@_jit
def learn_binary(  # noqa: PLR0917 - numba kernels take positional arrays
    indptr: Ints,
    indices: Ints,
    values: Floats,
    width: int,
    y: Floats,
    weights: Floats,
    weight_sums: Floats,
    row_sq: Floats,
    log_counts: Ints,
    log_rows: Ints,
    log_start: Ints,
    log_len: Ints,
    log_cols: Ints,
    log_old: Floats,
    counters: Ints,
    rng: NDArray[np.uint64],
    voter_columns: Floats,
    column_newest: Ints,
    links: Ints,
    max_voters: int,
    max_entries: int,
    prequential_voted: bool,
    limit: float,
    out_updates: NDArray[np.bool_],
    out_predictions: Floats,
    out_margins: Floats,
) -> int:
    """Prequential predict → mistake → update over a batch, binary labels y ∈ {-1, +1}.

    With ``limit`` > 0 each row is checked (finite, within ±limit) just before it is used; the
    first bad row stops the batch untouched from that row on, and its index is returned (else -1).
    ``rng`` is unused: binary predictions never tie. ``voter_columns`` holds dense copies of the
    kept voters (one column per voter slot) when they are small, else it is empty (0 x 0).
    ``column_newest`` and ``links``: the log's per-column index (see :mod:`learning._voter_index`)
    for a sparse batch, kept up to date and used by the vote, or empty.
    """
    n = y.shape[0]
    dense = width > 0
    indexed = column_newest.shape[0] > 0 and not dense and voter_columns.shape[0] == 0
    w = weights[0]
    a = weight_sums[0]
    longest = longest_row(indptr, width, n) if prequential_voted else 0
    view = np.empty(longest)
    by_columns = voter_columns.shape[0] > 0
    scratch = vote_scratch(log_counts.shape[0], longest) if indexed else vote_scratch(0, 0)
    positions = position_map(
        n, dense, w.shape[0], prequential_voted and not by_columns and not indexed
    )
    lanes = np.empty((UNROLL, voter_columns.shape[1]))
    partial = np.empty(PARTIAL_SUMS)
    for i in range(n):
        start, stop = row_span(indptr, width, i)
        vals = values[start:stop]
        cols = indices[0:width] if dense else indices[start:stop]
        seen = counters[SEEN]
        if dense:
            # One pass reads the row: its scores, ‖x‖² and its check, before anything changes.
            score, total, x_sq, valid, no_zeros = dense_row_pass(w, a, seen, vals, limit)
            if limit > 0.0 and not valid:
                return i
        else:
            if limit > 0.0 and first_invalid_value(vals, limit) >= 0:
                return i
            score, total = row_scores(w, a, seen, cols, vals, dense, partial)
            x_sq = UNKNOWN_NORM
            no_zeros = False
        target = y[i]
        live = seen - counters[BORN_MODEL]
        predicted = sign(score)
        count_mistakes(score, total, target, counters)
        if prequential_voted:
            if by_columns:
                acc = vote_binary_columns(
                    cols, vals, score, live, log_counts, counters, voter_columns, lanes, True
                )
            elif indexed:
                acc = vote_binary_indexed(
                    w, cols, vals, score, live, log_counts, log_cols, log_old, counters,
                    column_newest, links, scratch, True,
                )  # fmt: skip
            else:
                acc = vote_binary(
                    w, cols, vals, dense, score, live, log_counts, log_start, log_len, log_cols,
                    log_old, counters, view, True, positions,
                )  # fmt: skip
            counters[PQ_VOTED_SEEN] += 1
            if (1.0 if acc >= 0 else -1.0) != target:
                counters[PQ_VOTED] += 1
        norm_sq = row_sq[0]
        out_margins[i] = target * score / math.sqrt(norm_sq) if norm_sq > 0.0 else 0.0
        out_predictions[i] = predicted
        update = target * score <= 0.0
        out_updates[i] = update
        if update:
            touched = 0
            if live > 0:
                touched = vals.shape[0] if no_zeros else count_touched(vals)
            entry = open_entry(
                live, touched, 0, NO_ROW, log_counts, log_rows,
                log_start, log_len, counters, max_voters, max_entries, log_cols.shape[0],
            )  # fmt: skip
            if entry >= 0 and by_columns:
                slot = newest_slot(counters, log_counts.shape[0], 0)
                for j in range(voter_columns.shape[0]):
                    voter_columns[j, slot] = w[j]
            apply_update(
                weights, weight_sums, row_sq, 0, cols, vals, dense, target > 0.0, seen, score,
                x_sq, log_cols, log_old, 0, entry, touched == vals.shape[0],
            )  # fmt: skip
            if entry >= 0 and indexed:
                oldest = counters[DROPPED_VOTERS]
                voter = oldest + counters[N_VOTERS] - 1
                link_entries(entry, touched, voter, oldest, log_cols, column_newest, links)
            close_update(counters, seen)
        counters[SEEN] = seen + 1
    return -1


@_jit
def multiclass_margin(scores: Floats, n_classes: int, target: int, row_sq: Floats) -> float:
    """(s_y - max_{c≠y} s_c)/‖W‖_F: the Kesler margin of the current weights (NaN with 1 class)."""
    if n_classes < 2:
        return math.nan
    rival = -math.inf
    for c in range(n_classes):
        if c != target and scores[c] > rival:
            rival = scores[c]
    norm_sq = 0.0
    for c in range(n_classes):
        norm_sq += row_sq[c]
    if norm_sq <= 0.0:
        return 0.0
    return float((scores[target] - rival) / math.sqrt(norm_sq))


@_jit
def class_scores(  # noqa: PLR0917 - numba kernels take positional arrays
    weights: Floats,
    weight_sums: Floats,
    seen: int,
    cols: Ints,
    vals: Floats,
    dense: bool,
    n_classes: int,
    scores: Floats,
    sums: Floats,
    partial: Floats,
) -> None:
    """Per active class: scores[c] = W[c]·x̃ and sums[c] = (Σ post-event W[c])·x̃ (lazy average);
    ``partial`` is row_scores' scratch."""
    for c in range(n_classes):
        s, sa = row_scores(weights[c], weight_sums[c], seen, cols, vals, dense, partial)
        scores[c] = s
        sums[c] = sa


@_jit
def learn_multiclass(  # noqa: PLR0917 - numba kernels take positional arrays
    indptr: Ints,
    indices: Ints,
    values: Floats,
    width: int,
    y: Ints,
    weights: Floats,
    weight_sums: Floats,
    row_sq: Floats,
    log_counts: Ints,
    log_rows: Ints,
    log_start: Ints,
    log_len: Ints,
    log_cols: Ints,
    log_old: Floats,
    counters: Ints,
    rng: NDArray[np.uint64],
    voter_columns: Floats,
    column_newest: Ints,
    links: Ints,
    max_voters: int,
    max_entries: int,
    prequential_voted: bool,
    limit: float,
    out_updates: NDArray[np.bool_],
    out_predictions: Ints,
    out_margins: Floats,
) -> int:
    """Prequential argmax → mistake → update over a batch, y = class indices.

    The argmax runs over the classes active so far (``counters[ACTIVE_CLASSES]``): all declared
    classes, or the discovered ones up to the current event. ``limit`` and the return value are
    as in :func:`learn_binary`; ``voter_columns``, ``column_newest`` and ``links`` are unused
    (empty).
    """
    n = y.shape[0]
    dense = width > 0
    rows = weights.shape[0]
    scores = np.empty(rows)
    sum_scores = np.empty(rows)
    voter_scores = np.empty(rows)
    votes = np.zeros(rows, dtype=np.int64)
    view = np.empty((rows, longest_row(indptr, width, n) if prequential_voted else 0))
    partial = np.empty(PARTIAL_SUMS)
    for i in range(n):
        start, stop = row_span(indptr, width, i)
        vals = values[start:stop]
        cols = indices[0:width] if dense else indices[start:stop]
        if limit > 0.0 and first_invalid_value(vals, limit) >= 0:
            return i
        target = y[i]
        seen = counters[SEEN]
        state = rng[0]
        # A discovered class takes part from the first event that carries it, exactly as when
        # the events are learned one at a time.
        if target >= counters[ACTIVE_CLASSES]:
            counters[ACTIVE_CLASSES] = target + 1
        n_classes = counters[ACTIVE_CLASSES]
        class_scores(
            weights, weight_sums, seen, cols, vals, dense, n_classes, scores, sum_scores, partial
        )
        predicted, tied = argmax_tie(scores, n_classes, state)
        averaged, _ = argmax_tie(sum_scores, n_classes, state)
        if predicted != target:
            counters[PQ_LAST] += 1
        if averaged != target:
            counters[PQ_AVERAGED] += 1
        live = seen - counters[BORN_MODEL]
        if prequential_voted:
            voted = vote_multiclass(
                weights, cols, vals, dense, n_classes, scores, predicted, live, log_counts,
                log_rows, log_start, log_len, log_cols, log_old, counters, state, view,
                voter_scores, votes, True,
            )  # fmt: skip
            counters[PQ_VOTED_SEEN] += 1
            if voted != target:
                counters[PQ_VOTED] += 1
        out_margins[i] = multiclass_margin(scores, n_classes, target, row_sq)
        out_predictions[i] = predicted
        if tied:
            rng[0] = state + GOLDEN_GAMMA
        update = predicted != target
        out_updates[i] = update
        if update:
            touched = count_touched(vals) if live > 0 else 0
            entry = open_entry(
                live, touched, target, predicted, log_counts,
                log_rows, log_start, log_len, counters, max_voters, max_entries,
                log_cols.shape[0],
            )  # fmt: skip
            no_zeros = touched == vals.shape[0]
            x_sq = apply_update(
                weights, weight_sums, row_sq, target, cols, vals, dense, True, seen,
                scores[target], UNKNOWN_NORM, log_cols, log_old, 0, entry, no_zeros,
            )  # fmt: skip
            apply_update(
                weights, weight_sums, row_sq, predicted, cols, vals, dense, False, seen,
                scores[predicted], x_sq, log_cols, log_old, 1, entry, no_zeros,
            )  # fmt: skip
            counters[BORN_MODEL] = seen
            counters[UPDATES] += 1
        counters[SEEN] = seen + 1
    return -1
