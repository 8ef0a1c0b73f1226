"""``predict_one`` of a fresh event in one compiled call: the encoder's row, then the prediction;
``learn_one`` of the row it left in the buffers in another.

The encoders' compiled row builders (:func:`learning.encoders._murmur.hashed_row` for murmur3
hashing, :func:`learning.encoders._packed.values_row` for a vocabulary event listing the whole
vocabulary in order) write the row into the learner's buffers and, in the same call,
:func:`learning._single.predict_binary_one`'s code predicts it, so a river-style loop pays one
call's arguments instead of two (see :mod:`learning._single`). The row is exactly the one
``encode_sparse_into`` writes (the same builder on the same float64 values) and stays in the
buffers for ``learn_one`` (see ``learning._one.buffered_row``). The kernels take the learner's
state arrays and its single-event buffers as two packs (:mod:`learning._state_pack`): the
arguments of a call cost more than its work on a short row.

A kernel returns (n, code): n the row's length, or ``NO_ROW`` when the builder could not vouch
for it (the caller then encodes the event the precise way, which names any error), and code the
prediction ±1, or ``NO_CODE`` when the row reaches beyond the weights (the caller then predicts
the general way).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from learning._kernels import (
    SEEN,
    _inline,
    compiled_entry,
    row_scores,
)
from learning._scoring import point_prediction
from learning._single import learn_unvoted
from learning._state_pack import pack_types
from learning.encoders._common import MAX_ABS_FEATURE
from learning.encoders._murmur import hashed_row
from learning.encoders._packed import NO_ROW, values_row
from learning.jit import BYTES, FLOAT, INT, jit_held

NO_CODE = 0.0
"""The code of a row the weights do not cover (a prediction is ±1)."""
Scored = tuple[int, float, float, float, int]
"""What a fused prediction returns: (n, code, score, total, seen): the row's length (NO_ROW:
none), the prediction ±1 (NO_CODE: none), w·x̃ and (Σ post-event w)·x̃ as
:func:`learning._kernels.row_scores` computes them, and the events seen then."""


@_inline
def buffered_prediction(
    event: Any,
    n: int,
    state: Any,
    which: int,
) -> Scored:
    """:func:`learning._single.predict_binary_one` of the row ``columns[:n]``, ``values[:n]`` of
    an event pack (dense when its columns are 0 .. n-1) on a state pack's weights, with what it
    was computed from: (n, code, score, total, seen) (see :data:`Scored`); code NO_CODE when the
    row reaches beyond the weights."""
    columns = event.columns
    weights = state.weights
    seen = state.counters[SEEN]
    if n <= 0 or columns[n - 1] >= weights.shape[1]:
        return n, NO_CODE, 0.0, 0.0, seen
    dense = columns[n - 1] == n - 1
    score, total = row_scores(
        weights[0], state.weight_sums[0], seen, columns[:n], event.values[:n], dense,
        event.partial,
    )  # fmt: skip
    code, _ = point_prediction(which, score, total, seen)
    return n, code, score, total, seen


@jit_held
def predict_hashed(  # noqa: PLR0917 - numba kernels take positional arrays
    state: Any,
    event: Any,
    names: bytes,
    packed: bytes,
    count: int,
    n_buckets: int,
    offset: int,
    which: int,
) -> Scored:
    """:data:`Scored` of a murmur3 event (a state pack, an event pack, the arguments of
    ``hashed_row`` but its limit and buffers, then the predictor)."""
    n = hashed_row(
        names, packed, count, n_buckets, offset, MAX_ABS_FEATURE, event.columns, event.values
    )
    if n < 0:
        return NO_ROW, NO_CODE, 0.0, 0.0, 0
    return buffered_prediction(event, n, state, which)


@jit_held
def predict_packed(state: Any, event: Any, count: int, offset: int, which: int) -> Scored:
    """:data:`Scored` of a whole-vocabulary event whose ``count`` values are packed in the
    event pack's ``raw`` (the arguments of ``values_row`` but its limit and buffers, with a
    state pack and the predictor)."""
    n = values_row(event.raw, count, offset, MAX_ABS_FEATURE, event.columns, event.values)
    if n < 0:
        return NO_ROW, NO_CODE, 0.0, 0.0, 0
    return buffered_prediction(event, n, state, which)


PREDICT_HASHED_TYPES = (BYTES, BYTES, INT, INT, INT, INT)
"""The argument types of :func:`predict_hashed` after the two packs (:func:`pack_types`)."""
PREDICT_PACKED_TYPES = (INT, INT, INT)
"""The argument types of :func:`predict_packed` after the two packs (:func:`pack_types`)."""


@jit_held
def learn_buffered(  # noqa: PLR0917 - numba kernels take positional arrays
    state: Any,
    event: Any,
    n: int,
    target: float,
    max_voters: int,
    max_entries: int,
) -> int:
    """:func:`learning._single.learn_unvoted` of the row in an event pack's buffers on the arrays
    of a state pack (:mod:`learning._state_pack`: two arguments instead of twelve), dense when
    its columns are 0 .. n-1 (decided here, not by the caller)."""
    columns = event.columns
    dense = n > 0 and columns[n - 1] == n - 1
    return learn_unvoted(
        columns, event.values, n, dense, target, state.weights, state.weight_sums, state.row_sq,
        state.log_counts, state.log_rows, state.log_start, state.log_len, state.log_cols,
        state.log_old, state.counters, max_voters, max_entries,
    )  # fmt: skip


LEARN_BUFFERED_TYPES = (INT, FLOAT, INT, INT)
"""The argument types of :func:`learn_buffered` after the two packs (:func:`pack_types`)."""


@cache
def learn_buffered_entry() -> Callable[..., int]:
    """The compiled :func:`learn_buffered` for the two packs and LEARN_BUFFERED_TYPES."""
    return compiled_entry(learn_buffered, (*pack_types(), *LEARN_BUFFERED_TYPES))


@cache
def predict_hashed_entry() -> Callable[..., Scored]:
    """The compiled :func:`predict_hashed` for the two packs and PREDICT_HASHED_TYPES."""
    return compiled_entry(predict_hashed, (*pack_types(), *PREDICT_HASHED_TYPES))


@cache
def predict_packed_entry() -> Callable[..., Scored]:
    """The compiled :func:`predict_packed` for the two packs and PREDICT_PACKED_TYPES."""
    return compiled_entry(predict_packed, (*pack_types(), *PREDICT_PACKED_TYPES))


NOT_BUILT: Scored = (NO_ROW, NO_CODE, 0.0, 0.0, 0)
"""The :data:`Scored` of an event the compiled builder does not take."""
Source = Callable[..., Scored]
"""A fused prediction of one encoder kind: (x, encoder, single, event pack, state pack,
which) → :data:`Scored`, NOT_BUILT when the event is not for the compiled builder; ``single`` is
the learner's ``learning._one.SingleEvent`` (the encoder's constants, ``raw``), the event pack
that of its buffers."""


HASHED_ORDER_FREE_MERGES = 1
"""Names a hashed row may merge into other names' columns with the row not depending on the
order of the names: two values summed from 0.0 commute, three need not."""
PACKED_ORDER_FREE_MERGES = 0
"""A whole-vocabulary row merges nothing: each name has its own column, and the precise path
writes the same sorted row whatever the order of the names."""


def fused_source(encoder: Any) -> tuple[Source, tuple[int, int], int] | None:
    """The fused prediction of ``encoder``'s events, its constants (n_buckets, offset:
    hyperparameters, fixed for the encoder's life) and the merges its rows may have without
    depending on the order of the names; ``None`` when it has none."""
    kind = getattr(encoder, "kind", None)
    if kind == "hashing" and encoder.hash == "murmur3":
        return (predict_hashed_event, (encoder.n_buckets, encoder.offset), HASHED_ORDER_FREE_MERGES)
    if kind == "vocabulary":
        return predict_vocabulary_event, (0, encoder.offset), PACKED_ORDER_FREE_MERGES
    return None


def predict_hashed_event(  # noqa: PLR0917 - the kernel's arguments, passed on
    x: Any, encoder: Any, single: Any, event: Any, state: Any, which: int
) -> Scored:
    """:data:`Scored` of a murmur3 event (see :data:`Source`)."""
    mapping = encoder._mapping(x)
    content = encoder._murmur_content(mapping)
    if content is None:
        return NOT_BUILT
    n_buckets, offset = single.constants
    return predict_hashed_entry()(
        state, event, content[0], content[1], len(mapping), n_buckets, offset, which
    )


def predict_vocabulary_event(  # noqa: PLR0917 - the kernel's arguments, passed on
    x: Any, encoder: Any, single: Any, event: Any, state: Any, which: int
) -> Scored:
    """:data:`Scored` of a whole-vocabulary event (see :data:`Source`): its values packed into
    the event pack's ``raw``."""
    count = encoder._pack_in_order_into(x, single.raw)
    if count == NO_ROW:
        return NOT_BUILT
    return predict_packed_entry()(state, event, count, single.constants[1], which)
