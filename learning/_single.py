"""Kernels of one event: the binary learners' ``learn_one`` and ``predict_one``.

The batch kernels serve one event too, but for one event a call costs mostly its arguments
(about 0.1 µs an array, measured): these take fewer, the row being the leading ``n`` entries of
the learner's reusable buffers, and run the very code the batch kernels run per event
(:func:`learning._learn.binary_event`, :func:`learning._scoring.point_prediction`), so the
results are bit-identical. They size nothing: when the voters' log needs room,
:func:`learn_binary_one` returns ``NEEDS_ROOM`` before changing anything and the caller grows it.
"""

from __future__ import annotations

import numpy as np

from learning._kernels import SEEN, UNROLL, Floats, Ints, _jit, row_scores
from learning._learn import binary_event
from learning._scoring import point_prediction
from learning._voters import log_needs_room

NEEDS_ROOM = -1
NO_UPDATE = 0
UPDATED = 1


@_jit
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
    ``columns`` is 0 .. n-1); UPDATED, NO_UPDATE or NEEDS_ROOM (nothing changed)."""
    if log_needs_room(n, log_counts, log_cols, counters, max_voters, max_entries):
        return NEEDS_ROOM
    view = np.empty(n if prequential_voted else 0)
    lanes = np.empty((UNROLL, voter_columns.shape[1] if prequential_voted else 0))
    update, _, _ = binary_event(
        columns[:n], values[:n], dense, target, weights, weight_sums, row_sq, log_counts,
        log_rows, log_start, log_len, log_cols, log_old, counters, voter_columns, lanes, view,
        max_voters, max_entries, prequential_voted,
    )  # fmt: skip
    return UPDATED if update else NO_UPDATE


@_jit
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
    score, total = row_scores(weights[0], weight_sums[0], seen, columns[:n], values[:n], dense)
    code, _ = point_prediction(which, score, total, seen)
    return code
