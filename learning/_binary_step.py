"""The binary learner's per-event steps, shared by the batch kernel and the one-event kernel.

:func:`learning._learn.learn_binary` runs them for every row of a batch, with the prequential
vote between them; :func:`learning._single.learn_binary_one` runs them for one event of a
learner that does not count the vote, without allocating the batch's outputs and scratch. The
same code in the same order on the same row, so the two are bit-identical.
"""

from __future__ import annotations

from learning._kernels import (
    BORN_MODEL,
    PQ_AVERAGED,
    PQ_LAST,
    SEEN,
    UPDATES,
    Floats,
    Ints,
    _inline,
    count_touched,
    row_scores,
    sign,
)
from learning._voters import NO_ROW, open_entry


@_inline
def count_predictions(  # noqa: PLR0917 - numba kernels take positional arrays
    w: Floats,
    a: Floats,
    cols: Ints,
    vals: Floats,
    dense: bool,
    target: float,
    counters: Ints,
    partial: Floats,
) -> tuple[float, int, int]:
    """Score the row with the live weights and the averaged sums and count the two predictors'
    prequential mistakes; returns (score, seen, live): w·x, the events seen before this one and
    the live weights' survival count."""
    seen = counters[SEEN]
    live = seen - counters[BORN_MODEL]
    score, total = row_scores(w, a, seen, cols, vals, dense, partial)
    if sign(score) != target:
        counters[PQ_LAST] += 1
    if sign(total) != target:
        counters[PQ_AVERAGED] += 1
    return score, seen, live


@_inline
def open_update(  # noqa: PLR0917 - numba kernels take positional arrays
    vals: Floats,
    live: int,
    log_counts: Ints,
    log_rows: Ints,
    log_start: Ints,
    log_len: Ints,
    counters: Ints,
    max_voters: int,
    max_entries: int,
    pool_capacity: int,
) -> tuple[int, int]:
    """Retire the live weights as a voter before an update: (its first log entry or a negative
    value when nothing is logged, the coordinates the update touches)."""
    touched = count_touched(vals) if live > 0 else 0
    entry = open_entry(
        live, touched, 0, NO_ROW, log_counts, log_rows, log_start, log_len, counters,
        max_voters, max_entries, pool_capacity,
    )  # fmt: skip
    return entry, touched


@_inline
def close_update(counters: Ints, seen: int) -> None:
    """Count an update made at event ``seen``: the new live weights are born there."""
    counters[BORN_MODEL] = seen
    counters[UPDATES] += 1
