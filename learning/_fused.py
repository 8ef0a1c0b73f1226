"""``predict_one`` of a fresh event in one compiled call: the encoder's row, then the prediction;
``learn_one`` of the row it left in the buffers in another.

The encoders' compiled row builders (:func:`learning.encoders._murmur.walked_row` for murmur3
hashing, from one walk of the event's dict, :mod:`learning.encoders._walk`;
:func:`learning.encoders._packed.values_row` for a vocabulary event listing the whole vocabulary
in order) write the row into the learner's buffers and, in the same call,
:func:`learning._single.predict_binary_one`'s code predicts it, so a river-style loop pays one
call's arguments instead of two (see :mod:`learning._single`). The row is exactly the one
``encode_sparse_into`` writes (the same hash, buckets, order and sums on the same float64
values) and stays in the buffers for ``learn_one``: a walked event's ``Walker.same`` (from
``learning._one_binary.learn_one``), any other's ``learning._one.buffered_row``. The kernels
take the learner's single-event buffers and its state arrays as one pack
(:mod:`learning._state_pack`): the arguments of a call cost more than its work on a short row.
Their loops run in functions compiled without numba's runtime (``jit_no_runtime``): with it, each
array handed to an inlined helper inside a loop costs two atomic reference counts (measured: a
walked prediction of 18 names took 1.80 µs a call with them, 1.07 µs without).

A prediction kernel returns a code: the prediction ±1; ``NO_CODE`` when the row reaches beyond
the weights (the caller then predicts the general way); ``NOT_BUILT`` when the builder could not
vouch for the row (the caller then encodes the event the precise way, which names any error).
The row's length is in the event pack's ``row``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from learning._kernels import (
    SEEN,
    Floats,
    Ints,
    compiled_entry,
    row_scores,
)
from learning._scoring import point_prediction
from learning._single import NEEDS_WIDTH, learn_unvoted
from learning._state_pack import event_pack_type
from learning.encoders._common import MAX_ABS_FEATURE
from learning.encoders._murmur import walked_row
from learning.encoders._packed import NO_ROW, values_row
from learning.jit import FLOAT, INT, jit_held, jit_no_runtime

NO_CODE = 0.0
"""The code of a row the weights do not cover (a prediction is ±1)."""
NOT_BUILT = 2.0
"""The code of an event the compiled builder does not take (a prediction is ±1)."""
ROW_LENGTH_BYTES = 8
"""Bytes of the row length a fused prediction writes to the event pack's ``row`` (an int64):
written there rather than returned, as a returned tuple costs more to box than the call's work
on a short row (measured, two packs: a float 0.30 µs a call, a five-tuple 0.58 µs)."""


@jit_no_runtime
def row_prediction(  # noqa: PLR0917 - numba kernels take positional arrays
    columns: Ints,
    values: Floats,
    partial: Floats,
    weights: Floats,
    weight_sums: Floats,
    counters: Ints,
    n: int,
    which: int,
    row: Ints,
) -> float:
    """:func:`learning._single.predict_binary_one`'s code of the row ``columns[:n]``,
    ``values[:n]`` (dense when its columns are 0 .. n-1) on these weights, n written to
    ``row[0]``; NO_CODE when the row reaches beyond the weights. ``partial``: scratch of
    PARTIAL_SUMS entries."""
    row[0] = n
    if n <= 0 or columns[n - 1] >= weights.shape[1]:
        return NO_CODE
    seen = counters[SEEN]
    dense = columns[n - 1] == n - 1
    score, total = row_scores(
        weights[0], weight_sums[0], seen, columns[:n], values[:n], dense, partial
    )
    code, _ = point_prediction(which, score, total, seen)
    return code


@jit_no_runtime
def packed_prediction(  # noqa: PLR0917 - numba kernels take positional arrays
    raw: Floats,
    columns: Ints,
    values: Floats,
    partial: Floats,
    weights: Floats,
    weight_sums: Floats,
    counters: Ints,
    count: int,
    offset: int,
    which: int,
    row: Ints,
) -> float:
    """:func:`row_prediction` of a whole-vocabulary event whose ``count`` values are in
    ``raw``, its row written to ``columns`` / ``values``; NOT_BUILT when ``values_row`` refuses
    it."""
    n = values_row(raw, count, offset, MAX_ABS_FEATURE, columns, values)
    if n < 0:
        return NOT_BUILT
    return row_prediction(columns, values, partial, weights, weight_sums, counters, n, which, row)


@jit_held
def predict_walked(
    event: Any,
    count: int,
    n_buckets: int,
    offset: int,
    which: int,
) -> float:
    """:func:`row_prediction` of a murmur3 event whose ``count`` entries were walked into the
    event pack's ``names``, ``ends`` and ``raw`` (:mod:`learning.encoders._walk`), with the
    encoder's constants and the predictor; its row is written to the pack's ``columns`` /
    ``values``, its length to the pack's ``row``; NOT_BUILT when ``walked_row`` refuses it."""
    state = event.state
    columns = event.columns
    values = event.values
    n = walked_row(
        event.names, event.ends, event.raw, count, n_buckets, offset, MAX_ABS_FEATURE, columns,
        values,
    )  # fmt: skip
    if n < 0:
        return NOT_BUILT
    return row_prediction(
        columns, values, event.partial, state.weights, state.weight_sums, state.counters, n,
        which, event.row,
    )  # fmt: skip


@jit_held
def predict_packed(event: Any, count: int, offset: int, which: int) -> float:
    """:func:`packed_prediction` on an event pack (the event's values in its ``raw``) and its
    state pack, with the encoder's offset and the predictor."""
    state = event.state
    return packed_prediction(
        event.raw, event.columns, event.values, event.partial, state.weights,
        state.weight_sums, state.counters, count, offset, which, event.row,
    )  # fmt: skip


PREDICT_WALKED_TYPES = (INT, INT, INT, INT)
"""The argument types of :func:`predict_walked` after the event pack (:func:`event_pack_type`)."""
PREDICT_PACKED_TYPES = (INT, INT, INT)
"""The argument types of :func:`predict_packed` after the event pack (:func:`event_pack_type`)."""


@jit_no_runtime
def learn_row(  # noqa: PLR0917 - numba kernels take positional arrays
    columns: Ints,
    values: Floats,
    partial: Floats,
    n: int,
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
) -> int:
    """:func:`learning._single.learn_unvoted` of the row ``columns[:n]``, ``values[:n]``, dense
    when its columns are 0 .. n-1 (decided here, not by the caller); NEEDS_WIDTH, with nothing
    changed, when the row reaches beyond the weights."""
    if n > 0 and columns[n - 1] >= weights.shape[1]:
        return NEEDS_WIDTH
    dense = n > 0 and columns[n - 1] == n - 1
    return learn_unvoted(
        columns, values, n, dense, target, weights, weight_sums, row_sq, log_counts, log_rows,
        log_start, log_len, log_cols, log_old, counters, max_voters, max_entries, partial,
    )  # fmt: skip


@jit_held
def learn_buffered(
    event: Any,
    n: int,
    target: float,
    max_voters: int,
    max_entries: int,
) -> int:
    """:func:`learn_row` of the row in an event pack's buffers on the arrays of its state pack
    (:mod:`learning._state_pack`: one argument instead of twelve)."""
    state = event.state
    return learn_row(
        event.columns, event.values, event.partial, n, target, state.weights,
        state.weight_sums, state.row_sq, state.log_counts, state.log_rows, state.log_start,
        state.log_len, state.log_cols, state.log_old, state.counters, max_voters, max_entries,
    )  # fmt: skip


LEARN_BUFFERED_TYPES = (INT, FLOAT, INT, INT)
"""The argument types of :func:`learn_buffered` after the event pack (:func:`event_pack_type`)."""


@cache
def learn_buffered_entry() -> Callable[..., int]:
    """The compiled :func:`learn_buffered` for the event pack and LEARN_BUFFERED_TYPES."""
    return compiled_entry(learn_buffered, (event_pack_type(), *LEARN_BUFFERED_TYPES))


@cache
def predict_walked_entry() -> Callable[..., float]:
    """The compiled :func:`predict_walked` for the event pack and PREDICT_WALKED_TYPES."""
    return compiled_entry(predict_walked, (event_pack_type(), *PREDICT_WALKED_TYPES))


@cache
def predict_packed_entry() -> Callable[..., float]:
    """The compiled :func:`predict_packed` for the event pack and PREDICT_PACKED_TYPES."""
    return compiled_entry(predict_packed, (event_pack_type(), *PREDICT_PACKED_TYPES))


Source = Callable[..., float]
"""A fused prediction of one encoder kind: (x, encoder, single, event pack, which) → the code
of :func:`row_prediction` (the row's length in the event pack's ``row``), NOT_BUILT when the
event is not for the compiled builder; ``single`` is the learner's ``learning._one.SingleEvent``
(the encoder's constants, ``raw``), the event pack that of its buffers."""


PACKED_ORDER_FREE_MERGES = 0
"""A whole-vocabulary row merges nothing: each name has its own column, and the precise path
writes the same sorted row whatever the order of the names."""


def walked_constants(encoder: Any) -> tuple[int, int] | None:
    """(n_buckets, offset) of a murmur3 hashing encoder, whose events are walked
    (:func:`predict_walked`; hyperparameters, fixed for the encoder's life); ``None`` for any
    other encoder."""
    if getattr(encoder, "kind", None) == "hashing" and encoder.hash == "murmur3":
        return encoder.n_buckets, encoder.offset
    return None


def fused_source(encoder: Any) -> tuple[Source, tuple[int, int], int] | None:
    """The fused prediction of ``encoder``'s events, its constants (0, offset: hyperparameters,
    fixed for the encoder's life) and the merges its rows may have without depending on the
    order of the names; ``None`` when it has none."""
    if getattr(encoder, "kind", None) == "vocabulary":
        return predict_vocabulary_event, (0, encoder.offset), PACKED_ORDER_FREE_MERGES
    return None


def predict_vocabulary_event(x: Any, encoder: Any, single: Any, event: Any, which: int) -> float:
    """The code of a whole-vocabulary event (see :data:`Source`): its values packed into the
    event pack's ``raw``."""
    count = encoder._pack_in_order_into(x, single.raw)
    if count == NO_ROW:
        return NOT_BUILT
    return predict_packed_entry()(event, count, single.constants[1], which)
