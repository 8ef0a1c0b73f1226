"""``predict_one`` of a fresh event in one compiled call: the encoder's row, then the prediction;
``learn_one`` of the row it left in the buffers in another.

The encoders' compiled row builders (:func:`learning.encoders._murmur.hashed_row` for murmur3
hashing, :func:`learning.encoders._packed.packed_row` for a vocabulary event listing the whole
vocabulary in order) write the row into the learner's buffers and, in the same call,
:func:`learning._single.predict_binary_one`'s code predicts it, so a river-style loop pays one
call's arguments instead of two (see :mod:`learning._single`). The row is exactly the one
``encode_sparse_into`` writes (the same builder on the same bytes) and stays in the buffers for
``learn_one`` (see ``learning._one.buffered_row``).

A kernel returns (n, code): n the row's length, or ``NO_ROW`` when the builder could not vouch
for it (the caller then encodes the event the precise way, which names any error), and code the
prediction ±1, or ``NO_CODE`` when the row reaches beyond the weights (the caller then predicts
the general way).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

from learning._kernels import (
    PARTIAL_SUMS,
    SEEN,
    Floats,
    Ints,
    _inline,
    _jit,
    compiled_entry,
    row_scores,
)
from learning._scoring import point_prediction
from learning._single import learn_unvoted
from learning._state_pack import pack_type
from learning.encoders._common import MAX_ABS_FEATURE
from learning.encoders._murmur import hashed_row
from learning.encoders._packed import NO_ROW, packed_row
from learning.jit import BYTES, FLOAT, FLOAT_MATRIX, FLOATS, INT, INTS

NO_CODE = 0.0
"""The code of a row the weights do not cover (a prediction is ±1)."""
Scored = tuple[int, float, float, float, int]
"""What a fused prediction returns: (n, code, score, total, seen): the row's length (NO_ROW:
none), the prediction ±1 (NO_CODE: none), w·x̃ and (Σ post-event w)·x̃ as
:func:`learning._kernels.row_scores` computes them, and the events seen then."""


@_inline
def buffered_prediction(  # noqa: PLR0917 - numba kernels take positional arrays
    columns: Ints,
    values: Floats,
    n: int,
    weights: Floats,
    weight_sums: Floats,
    counters: Ints,
    which: int,
) -> Scored:
    """:func:`learning._single.predict_binary_one` of the row ``columns[:n]``, ``values[:n]``
    (dense when its columns are 0 .. n-1) with what it was computed from: (n, code, score,
    total, seen) (see :data:`Scored`); code NO_CODE when the row reaches beyond the weights."""
    seen = counters[SEEN]
    if n <= 0 or columns[n - 1] >= weights.shape[1]:
        return n, NO_CODE, 0.0, 0.0, seen
    partial = np.empty(PARTIAL_SUMS)
    dense = columns[n - 1] == n - 1
    score, total = row_scores(
        weights[0], weight_sums[0], seen, columns[:n], values[:n], dense, partial
    )
    code, _ = point_prediction(which, score, total, seen)
    return n, code, score, total, seen


@_jit
def predict_hashed(  # noqa: PLR0917 - numba kernels take positional arrays
    names: bytes,
    packed: bytes,
    count: int,
    n_buckets: int,
    offset: int,
    limit: float,
    columns: Ints,
    values: Floats,
    weights: Floats,
    weight_sums: Floats,
    counters: Ints,
    which: int,
) -> Scored:
    """:data:`Scored` of a murmur3 event (the arguments of ``hashed_row``, then the
    predictor's)."""
    n = hashed_row(names, packed, count, n_buckets, offset, limit, columns, values)
    if n < 0:
        return NO_ROW, NO_CODE, 0.0, 0.0, 0
    return buffered_prediction(columns, values, n, weights, weight_sums, counters, which)


@_jit
def predict_packed(  # noqa: PLR0917 - numba kernels take positional arrays
    packed: bytes,
    offset: int,
    limit: float,
    columns: Ints,
    values: Floats,
    weights: Floats,
    weight_sums: Floats,
    counters: Ints,
    which: int,
) -> Scored:
    """:data:`Scored` of a whole-vocabulary event (the arguments of ``packed_row``, then the
    predictor's)."""
    n = packed_row(packed, offset, limit, columns, values)
    if n < 0:
        return NO_ROW, NO_CODE, 0.0, 0.0, 0
    return buffered_prediction(columns, values, n, weights, weight_sums, counters, which)


PREDICTOR_TYPES = (INTS, FLOATS, FLOAT_MATRIX, FLOAT_MATRIX, INTS, INT)
"""The buffers, the state's arrays and the predictor as both kernels take them."""
PREDICT_HASHED_TYPES = (
    BYTES, BYTES, INT, INT, INT, FLOAT, *PREDICTOR_TYPES,
)  # fmt: skip
PREDICT_PACKED_TYPES = (BYTES, INT, FLOAT, *PREDICTOR_TYPES)


@_jit
def learn_buffered(  # noqa: PLR0917 - numba kernels take positional arrays
    pack: Any,
    columns: Ints,
    values: Floats,
    n: int,
    target: float,
    max_voters: int,
    max_entries: int,
) -> int:
    """:func:`learning._single.learn_unvoted` of the row in the buffers on the arrays of a
    :class:`learning._pack_type.StatePack` (one argument instead of ten), dense when its
    columns are 0 .. n-1 (decided here, not by the caller)."""
    dense = n > 0 and columns[n - 1] == n - 1
    return learn_unvoted(
        columns, values, n, dense, target, pack.weights, pack.weight_sums, pack.row_sq,
        pack.log_counts, pack.log_rows, pack.log_start, pack.log_len, pack.log_cols,
        pack.log_old, pack.counters, max_voters, max_entries,
    )  # fmt: skip


LEARN_BUFFERED_TYPES = (INTS, FLOATS, INT, FLOAT, INT, INT)
"""The argument types of :func:`learn_buffered` after the pack (:func:`pack_type`)."""


@cache
def learn_buffered_entry() -> Callable[..., int]:
    """The compiled :func:`learn_buffered` for a pack and LEARN_BUFFERED_TYPES."""
    return compiled_entry(learn_buffered, (pack_type(), *LEARN_BUFFERED_TYPES))


@cache
def predict_hashed_entry() -> Callable[..., Scored]:
    """The compiled :func:`predict_hashed` for PREDICT_HASHED_TYPES."""
    return compiled_entry(predict_hashed, PREDICT_HASHED_TYPES)


@cache
def predict_packed_entry() -> Callable[..., Scored]:
    """The compiled :func:`predict_packed` for PREDICT_PACKED_TYPES."""
    return compiled_entry(predict_packed, PREDICT_PACKED_TYPES)


NOT_BUILT: Scored = (NO_ROW, NO_CODE, 0.0, 0.0, 0)
"""The :data:`Scored` of an event the compiled builder does not take."""
Source = Callable[..., Scored]
"""A fused prediction of one encoder kind: (x, encoder, constants, columns, values, weights,
weight_sums, counters, which) → :data:`Scored`, NOT_BUILT when the event is not for the
compiled builder."""


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
    x: Any,
    encoder: Any,
    constants: tuple[int, int],
    columns: Any,
    values: Any,
    weights: Any,
    weight_sums: Any,
    counters: Any,
    which: int,
) -> Scored:
    """:data:`Scored` of a murmur3 event (see :data:`Source`)."""
    mapping = encoder._mapping(x)
    content = encoder._murmur_content(mapping)
    if content is None:
        return NOT_BUILT
    n_buckets, offset = constants
    return predict_hashed_entry()(
        content[0], content[1], len(mapping), n_buckets, offset, MAX_ABS_FEATURE, columns,
        values, weights, weight_sums, counters, which,
    )  # fmt: skip


def predict_vocabulary_event(  # noqa: PLR0917 - the kernel's arguments, passed on
    x: Any,
    encoder: Any,
    constants: tuple[int, int],
    columns: Any,
    values: Any,
    weights: Any,
    weight_sums: Any,
    counters: Any,
    which: int,
) -> Scored:
    """:data:`Scored` of a whole-vocabulary event (see :data:`Source`)."""
    packed = encoder._packed_in_order(encoder._mapping(x))
    if packed is None:
        return NOT_BUILT
    return predict_packed_entry()(
        packed, constants[1], MAX_ABS_FEATURE, columns, values, weights, weight_sums, counters,
        which,
    )  # fmt: skip
