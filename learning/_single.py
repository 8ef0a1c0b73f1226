"""Kernels of one event: the binary learners' ``learn_one`` and ``predict_one``.

The batch kernels serve one event too, but for one event a call costs mostly its arguments
(about 55 ns an array, measured) and the batch's allocations: these take fewer, the row being the
leading ``n`` entries of the learner's reusable buffers, and run the batch kernels' code, so the
results are bit-identical. Without the prequential vote a learner's event runs the per-event
steps of :mod:`learning._binary_step` (:func:`learn_unvoted`: nothing allocated but four partial
sums); with it, ``learn_binary`` on a batch of one; predictions run ``point_prediction``. They
size nothing: when the voters' log needs room, the learning kernels return ``NEEDS_ROOM`` before
changing anything and the caller grows it.

Their callers skip numba's dispatcher: :func:`learn_one_entry` and :func:`predict_one_entry`
(like :func:`learning._fused.learn_buffered_entry`) are the machine code compiled for one
signature (:func:`learning._kernels.compiled_entry`), called with arguments of exactly those
types: the learner's row buffers and a state whose arrays are all writable and C-contiguous
(``LinearState.irregular`` empty). :func:`learning._fused.learn_buffered` takes the state's
arrays as one :class:`learning._pack_type.StatePack` (measured: about 0.35 µs a call instead of
0.8 µs for the 19 arguments of :func:`learn_binary_one`, itself 2.2 µs through the dispatcher).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np

from learning._binary_step import close_update, count_mistakes
from learning._kernels import (
    BORN_MODEL,
    PARTIAL_SUMS,
    SEEN,
    Floats,
    Ints,
    _inline,
    compiled_entry,
    count_touched,
    row_scores,
)
from learning._learn import UNKNOWN_NORM, apply_update, learn_binary
from learning._scoring import point_prediction
from learning._voter_index import LINK_FIELDS
from learning._voters import NO_ROW, log_needs_room, open_entry
from learning.jit import BOOL, FLOAT, FLOAT_MATRIX, FLOATS, INT, INT_MATRIX, INTS, jit_held

NO_CHECK = 0.0
"""The ``limit`` of a kernel whose row was checked beforehand (the encoder vouches for it)."""
NEEDS_ROOM = -1
NO_UPDATE = 0
UPDATED = 1
NEEDS_WIDTH = -2
"""``learning._fused.learn_buffered``: the row reaches beyond the weights (nothing changed)."""


@_inline
def learn_unvoted(  # noqa: PLR0917 - numba kernels take positional arrays
    columns: Ints,
    values: Floats,
    n: int,
    dense: bool,
    target: float,
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
    max_voters: int,
    max_entries: int,
    partial: Floats,
) -> int:
    """:func:`learn_binary_one` of a learner that does not count the prequential vote: the
    steps of :mod:`learning._binary_step` in :func:`learning._learn.learn_binary`'s order, with
    no batch outputs or vote scratch allocated (``partial``: scratch of PARTIAL_SUMS entries)."""
    if log_needs_room(n, log_counts, log_cols, counters, max_voters, max_entries):
        return NEEDS_ROOM
    cols = columns[:n]
    vals = values[:n]
    seen = counters[SEEN]
    live = seen - counters[BORN_MODEL]
    score, total = row_scores(weights[0], weight_sums[0], seen, cols, vals, dense, partial)
    count_mistakes(score, total, target, counters)
    update = target * score <= 0.0
    if update:
        touched = count_touched(vals) if live > 0 else 0
        entry = open_entry(
            live, touched, 0, NO_ROW, log_counts, log_rows, log_start, log_len, counters,
            max_voters, max_entries, log_cols.shape[0],
        )  # fmt: skip
        apply_update(
            weights, weight_sums, row_sq, 0, cols, vals, dense, target > 0.0, seen, score,
            UNKNOWN_NORM, log_cols, log_old, 0, entry, touched == n,
        )  # fmt: skip
        close_update(counters, seen)
    counters[SEEN] = seen + 1
    return UPDATED if update else NO_UPDATE


@jit_held
def learn_binary_one(  # noqa: PLR0917 - numba kernels take positional arrays
    columns: Ints,
    values: Floats,
    n: int,
    dense: bool,
    target: float,
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
    voter_columns: Floats,
    max_voters: int,
    max_entries: int,
    prequential_voted: bool,
) -> int:
    """Predict-then-learn the row ``columns[:n]``, ``values[:n]`` (checked values; dense rows:
    ``columns`` is 0 .. n-1) as :func:`learning._learn.learn_binary` learns a batch of one;
    UPDATED, NO_UPDATE or NEEDS_ROOM (nothing changed)."""
    if log_needs_room(n, log_counts, log_cols, counters, max_voters, max_entries):
        return NEEDS_ROOM
    if not prequential_voted:
        return learn_unvoted(
            columns, values, n, dense, target, weights, weight_sums, row_sq, log_counts,
            log_rows, log_start, log_len, log_cols, log_old, counters, max_voters, max_entries,
            np.empty(PARTIAL_SUMS),
        )  # fmt: skip
    indptr = np.zeros(2, dtype=np.int64)
    indptr[1] = n
    y = np.full(1, target)
    updates = np.empty(1, dtype=np.bool_)
    predictions = np.empty(1)
    margins = np.empty(1)
    learn_binary(
        indptr, columns[:n], values[:n], n if dense else 0, y, weights, weight_sums, row_sq,
        log_counts, log_rows, log_start, log_len, log_cols, log_old, counters,
        np.zeros(1, dtype=np.uint64), voter_columns, np.zeros(0, dtype=np.int64),
        np.zeros((0, LINK_FIELDS), dtype=np.int64), max_voters, max_entries, prequential_voted,
        NO_CHECK, updates, predictions, margins,
    )  # fmt: skip
    return UPDATED if updates[0] else NO_UPDATE


@jit_held
def predict_binary_one(  # noqa: PLR0917 - numba kernels take positional arrays
    columns: Ints,
    values: Floats,
    n: int,
    dense: bool,
    weights: Floats,
    weight_sums: Floats,
    counters: Ints,
    which: int,
) -> float:
    """±1 of ``last`` or ``averaged`` for the row ``columns[:n]``, ``values[:n]`` (columns
    within the weights), as :func:`learning._scoring.predict_binary` decides it."""
    seen = counters[SEEN]
    partial = np.empty(PARTIAL_SUMS)
    score, total = row_scores(
        weights[0], weight_sums[0], seen, columns[:n], values[:n], dense, partial
    )
    code, _ = point_prediction(which, score, total, seen)
    return code


LEARN_ONE_TYPES = (
    INTS, FLOATS, INT, BOOL, FLOAT, FLOAT_MATRIX, FLOAT_MATRIX, FLOATS,
    INTS, INT_MATRIX, INTS, INTS, INTS, FLOAT_MATRIX, INTS, FLOAT_MATRIX, INT,
    INT, BOOL,
)  # fmt: skip
"""The argument types of :func:`learn_binary_one` as learn_one passes them."""
PREDICT_ONE_TYPES = (
    INTS, FLOATS, INT, BOOL, FLOAT_MATRIX, FLOAT_MATRIX, INTS, INT,
)  # fmt: skip
"""The argument types of :func:`predict_binary_one` as predict_one passes them."""


@cache
def learn_one_entry() -> Callable[..., int]:
    """The compiled :func:`learn_binary_one` for LEARN_ONE_TYPES (compiled or loaded once)."""
    return compiled_entry(learn_binary_one, LEARN_ONE_TYPES)


@cache
def predict_one_entry() -> Callable[..., float]:
    """The compiled :func:`predict_binary_one` for PREDICT_ONE_TYPES (compiled or loaded once)."""
    return compiled_entry(predict_binary_one, PREDICT_ONE_TYPES)
