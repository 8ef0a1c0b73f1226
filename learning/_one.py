"""The single-event paths of the learners: river's ``learn_one`` and ``predict_one``.

A river-style caller hands over one dict at a time, so what counts is the cost of one call:
encoding the event, then one kernel. Both are kept lean:

* an object-valued encoder writes the row into buffers this learner reuses
  (``encode_sparse_into``: no arrays are built and handed back), and a dense one returns its
  vector, whose columns 0 .. n-1 are a cached range;
* when ``learn_one`` gets the event ``predict_one`` just encoded, the row still in the buffers
  is reused: a murmur3 hashing learner keeps the walk of the event's dict and tells an event
  with the same content by it (:mod:`learning.encoders._walk`); any other keeps the event with
  a copy of it (:func:`buffered_row` says exactly when a row is reused; a dict changed in
  between is encoded afresh); the encoders' own content keys (``RowKey``) still serve an equal
  event in another dict;
* a binary learner with a murmur3 hashing or a vocabulary encoder predicts a fresh event in
  one compiled call that builds the row and predicts it (:mod:`learning._fused`): the hashing
  learner's event walked into its buffers first (:func:`learning.encoders._walk.walker`);
* a binary learner runs the one-event kernels of :mod:`learning._single`, which take fewer
  arguments than the batch kernels, allocate nothing of a batch's and run the same per-event
  code, so the results are bit-identical to ``learn_batch`` on the same rows; with a buffered
  encoder (``SingleEvent.binary_buffered``) through one Python frame per call
  (:mod:`learning._one_binary`, the Perceptron's methods) and the kernels' compiled
  entries, the state's arrays passed as one :mod:`learning._state_pack` structure when the
  prequential vote is not counted. Multiclass learners and the voted predictor take
  the batch kernels with a batch of one.

Encoders that do not vouch for their output (``validated_output`` false) go through
``learn_batch``'s checks, so a bad value is refused with nothing changed.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from learning import _kernels as k
from learning import _single
from learning._arrays import (
    BINARY_ROWS_TOUCHED,
    MULTICLASS_ROWS_TOUCHED,
    LinearState,
    entry_bytes,
)
from learning._fused import ROW_LENGTH_BYTES, Source, fused_source, walked_constants
from learning._rows import Rows, prediction_rows
from learning._single import NO_CHECK
from learning._state_pack import event_pack, state_pack
from learning._voter_index import empty_index
from learning.encoders import RowKey
from learning.encoders._common import PLAIN_NUMBER_TYPES
from learning.encoders._packed import PACKED_FLOAT_BYTES
from learning.encoders._walk import NAMES_FULL, Walker, walker
from learning.predictor import PREDICTOR_CODES, predict_codes, predictor_code
from learning.sparse import CSRBatch

if TYPE_CHECKING:
    from learning._base import LinearLearner

Outputs = tuple[NDArray[np.bool_], NDArray[Any], NDArray[np.float64]]
"""Per-event kernel outputs: (mistakes, predictions, margins)."""
KernelArgs = tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64], int]
"""The leading (indptr, indices, values, width) of every batch kernel call (see learning._rows)."""
NO_ROW_BUFFER = 0
"""Row buffer capacity of an encoder without ``encode_sparse_into``."""
NAMES_BYTES = 4096
"""First size of a walked event's names buffer (doubled whenever an event's names need more)."""
SINGLE_EVENT_KEY = "_single_event"
"""Where a learner keeps its :class:`SingleEvent` (derived: made on first use)."""
EventSnapshot = tuple[Any, dict[Any, Any], tuple[Any, ...] | None, int]
"""(the event, a copy of it, its names in order or None when the row does not depend on their
order, the length of its row in the buffers); see :func:`buffered_row`."""


@dataclass
class SingleEvent:
    """Reused buffers of the single-event paths (they hold nothing between calls)."""

    indptr: NDArray[np.int64]
    target: NDArray[np.float64]
    outputs: Outputs
    columns: NDArray[np.int64]
    """A sparse row's columns (capacity: the encoder's ``max_features_per_event`` + 1)."""
    values: NDArray[np.float64]
    dense_columns: NDArray[np.int64]
    """0 .. n-1: the columns of a dense row of n values (grown on demand)."""
    key: RowKey | None = None
    """The encoder's key of the row in ``columns`` / ``values`` (None: no reuse)."""
    event: EventSnapshot | None = None
    """The event whose row ``columns`` / ``values`` hold, as :func:`buffered_row` saw it (None:
    no reuse)."""
    binary_buffered: bool = False
    """A binary learner whose encoder vouches for its rows and writes them into the buffers:
    its events take :mod:`learning._one_binary`."""
    source: Source | None = None
    """The fused prediction of a ``binary_buffered`` learner's fresh events
    (:func:`learning._fused.fused_source`), or None."""
    constants: tuple[int, int] = (0, 0)
    """Its encoder's constants (a walked learner's: :func:`learning._fused.walked_constants`)."""
    row: array[int] = field(default_factory=lambda: array("q", bytes(ROW_LENGTH_BYTES)))
    """The length of the row a fused prediction wrote to ``columns`` / ``values``."""
    order_free: int = -1
    """Most names its fused rows may merge into other names' columns with the row still not
    depending on the order of the names (-1: the rows always depend on it)."""
    entry_size: int = 1
    """Bytes of one entry of the learner's voters' log (``max_voter_bytes`` // this = entries)."""
    raw: bytearray = field(default_factory=bytearray)
    """An event's values packed as float64 (room for the encoder's ``max_features_per_event``)."""
    names: bytearray = field(default_factory=bytearray)
    """A walked event's names as UTF-8 (:mod:`learning.encoders._walk`; grown on demand)."""
    ends: bytearray = field(default_factory=bytearray)
    """A walked event's name ends as int64 (room for ``max_features_per_event``)."""
    walker: Walker | None = None
    """The walk of a murmur3 hashing learner's events (None: its rows are not walked)."""
    limit: int = 0
    """Its encoder's ``max_features_per_event`` (a hyperparameter)."""
    walked: int = 0
    """The entries of the walk ``names``, ``ends``, ``raw`` hold when it is the walk of the
    event whose row ``columns`` / ``values`` hold (its ``Walker.same`` tells an event with that
    content; the row's length is ``row[0]``), else 0. Whatever writes the buffers
    first sets it to 0."""
    pack: Any = None
    """The event pack of the buffers and of ``pack_state`` (:func:`learner_pack`; None: made on
    next use, as after a copy or a pickle, which forget it, or after ``names`` grew)."""
    pack_state: Any = None
    """The state pack ``pack`` holds (:func:`learning._state_pack.state_pack`)."""


def outputs(n: int, multiclass: bool) -> Outputs:
    """Fresh per-event outputs of a batch kernel for n events."""
    prediction_type = np.int64 if multiclass else np.float64
    return np.empty(n, dtype=np.bool_), np.empty(n, dtype=prediction_type), np.empty(n)


def single_event(learner: LinearLearner) -> SingleEvent:
    """The learner's reusable buffers, made on first use."""
    single: SingleEvent | None = learner.__dict__.get(SINGLE_EVENT_KEY)
    if single is None:
        limit = getattr(learner.encoder, "max_features_per_event", None)
        into = getattr(learner.encoder, "encode_sparse_into", None)
        capacity = limit + 1 if limit is not None and into is not None else NO_ROW_BUFFER
        single = SingleEvent(
            indptr=np.zeros(2, dtype=np.int64),
            target=np.empty(1),
            outputs=outputs(1, learner.multiclass),
            columns=np.empty(capacity, dtype=np.int64),
            values=np.empty(capacity),
            dense_columns=np.arange(0, dtype=np.int64),
            binary_buffered=capacity > 0
            and not learner.multiclass
            and getattr(learner.encoder, "validated_output", False),
        )
        touched = MULTICLASS_ROWS_TOUCHED if learner.multiclass else BINARY_ROWS_TOUCHED
        single.entry_size = entry_bytes(touched)
        single.raw = bytearray(max(capacity - 1, 0) * PACKED_FLOAT_BYTES)
        walked = walked_constants(learner.encoder) if single.binary_buffered else None
        fused = fused_source(learner.encoder) if single.binary_buffered else None
        if walked is not None:
            single.walker = walker()
            single.constants = walked
            single.limit = limit or 0
            single.names = bytearray(NAMES_BYTES)
            single.ends = bytearray(len(single.raw))
        elif fused is not None:
            single.source, single.constants, single.order_free = fused
        learner.__dict__[SINGLE_EVENT_KEY] = single
    return single


def learner_pack(single: SingleEvent, state: LinearState) -> Any:
    """The event pack of the single-event buffers holding ``state``'s pack, made anew when the
    kept one holds another (the state's arrays were replaced, or it is another state) or none
    is kept. The hot paths test ``single.pack_state is state.__dict__.get(PACK_KEY)`` inline."""
    current = state_pack(state)
    if single.pack is None or single.pack_state is not current:
        single.pack = event_pack(
            single.raw, single.columns, single.values, single.names, single.ends, single.row,
            current,
        )  # fmt: skip
        single.pack_state = current
    return single.pack


def walk_with_room(single: SingleEvent, x: Any) -> int:
    """``Walker.pack`` of ``x`` into the buffers after its names did not fit: ``names`` doubled
    (and the event pack made anew over it) until they do; the pack's result."""
    assert single.walker is not None
    count = NAMES_FULL
    while count == NAMES_FULL:
        single.names = bytearray(2 * len(single.names))
        single.pack = single.pack_state = None
        count = single.walker.pack(x, single.limit, single.names, single.ends, single.raw)
    return count


def dense_columns(single: SingleEvent, n: int) -> NDArray[np.int64]:
    """A range of at least n columns (0 .. n-1 first)."""
    if single.dense_columns.shape[0] < n:
        single.dense_columns = np.arange(n, dtype=np.int64)
    return single.dense_columns


def sparse_row(
    learner: LinearLearner, x: Any, grow: bool
) -> tuple[NDArray[np.int64], NDArray[np.float64], int, bool]:
    """One event encoded by an object-valued encoder: (columns, values, n, complete), the row
    being the first n entries (the learner's buffers when the encoder writes into them).

    ``complete``: the row holds every column 0 .. n-1 (a vocabulary event listing the whole
    vocabulary), so it runs as a dense row: the same results, vectorised. Strictly increasing
    columns from 0 whose last is n - 1 are exactly 0 .. n-1.
    """
    encoder: Any = learner.encoder
    single = single_event(learner)
    if single.columns.shape[0] > 0:
        columns = single.columns
        n = buffered_row(encoder, single, x, grow)
        return columns, single.values, n, n > 0 and int(columns[n - 1]) == n - 1
    indices, values = encoder.encode_sparse(x, grow=grow)
    n = int(values.shape[0])
    return indices, values, n, n > 0 and int(indices[n - 1]) == n - 1


def holds(event: EventSnapshot, x: Any) -> bool:
    """Whether the buffers' row is the row of ``x`` (see :func:`buffered_row`)."""
    names = event[2]
    return (
        x is event[0]
        and x == event[1]
        and PLAIN_NUMBER_TYPES.issuperset(map(type, x.values()))
        and (names is None or names == tuple(x))
    )


def snapshot(x: Any, n: int, ordered: bool) -> EventSnapshot:
    """The :data:`EventSnapshot` of event ``x`` whose row of length n is in the buffers;
    ``ordered``: the row depends on the order of the names."""
    return x, dict(x), tuple(x) if ordered else None, n


def buffered_row(encoder: Any, single: SingleEvent, x: Any, grow: bool) -> int:
    """Write the row of event ``x`` into the buffers (``encode_sparse_into``); its length.

    When the buffers already hold the row of ``x`` (a predict-then-learn loop encodes each
    event twice) nothing is written. That takes the same mapping object equal to the copy
    taken when the row was written, its values all still plain ``int`` / ``float`` (what the
    encoder's compiled path, the only one that keys its rows, accepted), and its names in the
    same order unless the row cannot depend on it. Values equal by ``==`` of those types are the
    same float64 up to the sign of a zero, which no result depends on (every sum starts at
    +0.0, so a weight, a sum or a score is never -0.0, and s + (±0.0) = s for every other s);
    names are compared as the encoders look them up, by equality. The order of the names
    matters to a hashed row only through the sums of three or more names sharing a bucket
    (two summed from 0.0 commute), so a hashed row with at most one name merged into another's
    bucket keeps no order. Anything else is encoded afresh, so a dict changed in between is
    learned as it is then.
    """
    event = single.event
    if event is not None and holds(event, x):
        return event[3]
    single.event = None  # the buffers are being written: nothing to reuse
    single.walked = 0
    previous = single.key
    single.key = None
    n: int
    n, single.key = encoder.encode_sparse_into(
        x, single.columns, single.values, grow=grow, previous=previous
    )
    if single.key is not None:
        single.event = snapshot(x, n, True)
    return n


def learn_binary_row(
    learner: LinearLearner,
    columns: NDArray[np.int64],
    values: NDArray[np.float64],
    n: int,
    *,
    dense: bool,
    target: float,
) -> bool:
    """One encoded row of a binary learner through :func:`learning._single.learn_binary_one`
    (its compiled entry when the row is in the learner's buffers and the state's arrays regular).

    The encoder vouches for the values; the state is already wide enough for the row.
    """
    state = learner._state
    max_entries = learner._max_entries
    buffered = values is single_event(learner).values
    for _ in range(2):
        kernel = (
            _single.learn_one_entry()
            if buffered and not state.irregular
            else _single.learn_binary_one
        )
        result = kernel(
            columns, values, n, dense, target, state.weights, state.weight_sums, state.row_sq,
            state.log_counts, state.log_rows, state.log_start, state.log_len, state.log_cols,
            state.log_old, state.counters, learner._voter_columns(), learner.max_voters,
            max_entries, learner.prequential_voted,
        )  # fmt: skip
        if result != _single.NEEDS_ROOM:
            return bool(result == _single.UPDATED)
        state.ensure_log_capacity(1, n, learner.max_voters, max_entries)
    raise AssertionError("the voters' log was grown to the room one update needs")


def forget_event(learner: LinearLearner) -> None:
    """Drop the learner's single-event buffers and what they remember (rebuilt on next use):
    for code that changes the weights other than by learning."""
    learner.__dict__.pop(SINGLE_EVENT_KEY, None)


def learn_sparse(
    learner: LinearLearner,
    row: tuple[NDArray[np.int64], NDArray[np.float64], int, bool],
    code: NDArray[Any],
) -> bool:
    """One row of :func:`sparse_row`: O(nnz), no dense row of the model's width."""
    columns, values, n, complete = row
    encoder = learner.encoder
    dimension = encoder.dimension
    single = single_event(learner)
    if not getattr(encoder, "validated_output", False):
        indptr = np.array([0, n], dtype=np.int64)
        batch = CSRBatch(indptr, columns[:n].copy(), values[:n].copy(), dimension)
        return bool(learner.learn_batch(batch, code).mistakes[0])
    state = learner._state
    if dimension > state.weights.shape[1] or state.weights.shape[0] != learner._rows():
        state.ensure_shape(learner._rows(), dimension)
    if not learner.multiclass:
        return learn_binary_row(learner, columns, values, n, dense=complete, target=float(code[0]))
    single.indptr[1] = n
    return learn_batch_of_one(learner, (single.indptr, columns[:n], values[:n], 0), n, code)


def learn_vector(learner: LinearLearner, vector: NDArray[np.float64], code: NDArray[Any]) -> bool:
    """One dense row: the same kernels as learn_batch, minus the batch bookkeeping."""
    if not getattr(learner.encoder, "validated_output", False):
        return bool(learner.learn_batch(vector[None, :], code).mistakes[0])
    state = learner._state
    width = vector.shape[0]
    if width != state.dimension or state.rows != learner._rows():
        rows = learner._fit_learning_width(Rows.dense(vector[None, :]))
        state.ensure_shape(learner._rows(), rows.dimension)
        vector = rows.values
        width = vector.shape[0]
    if not learner.multiclass:
        columns = dense_columns(single_event(learner), width)
        return learn_binary_row(learner, columns, vector, width, dense=True, target=float(code[0]))
    return learn_batch_of_one(learner, Rows.dense(vector[None, :]).kernel_args(), width, code)


def learn_batch_of_one(
    learner: LinearLearner, rows: KernelArgs, entries: int, code: NDArray[Any]
) -> bool:
    """One row through the learner's batch kernel (multiclass)."""
    state = learner._state
    max_entries = learner._max_entries
    if state.needs_log_room(entries, learner.max_voters, max_entries):
        state.ensure_log_capacity(1, entries, learner.max_voters, max_entries)
    out = single_event(learner).outputs
    kernel: Callable[..., int] = learner._learning_kernel
    kernel(
        *rows, code, state.weights, state.weight_sums, state.row_sq, state.log_counts,
        state.log_rows, state.log_start, state.log_len, state.log_cols, state.log_old,
        state.counters, state.rng, learner._voter_columns(), *empty_index(), learner.max_voters,
        max_entries, learner.prequential_voted, NO_CHECK, *out,
    )  # fmt: skip
    return bool(out[0][0])


def predict_one_general(learner: LinearLearner, x: Any) -> Hashable:
    """The label the ``predictor`` hyperparameter predicts for one event (the model unchanged).

    A binary learner's ``last`` and ``averaged`` predictions of a checked row of the model's
    width take :func:`learning._single.predict_binary_one`; everything else the batch scoring.
    """
    encoder: Any = learner.encoder
    validated = getattr(encoder, "validated_output", False)
    state = learner._state
    dimension = state.dimension
    which = PREDICTOR_CODES[learner.predictor]
    lean = validated and not learner.multiclass and which != k.VOTED
    if getattr(encoder, "sparse", False):
        columns, values, n, complete = sparse_row(learner, x, grow=False)
        if lean and encoder.dimension <= dimension:
            buffered = values is single_event(learner).values and not state.irregular
            kernel = _single.predict_one_entry() if buffered else _single.predict_binary_one
            code = kernel(
                columns, values, n, complete, state.weights, state.weight_sums, state.counters,
                which,
            )  # fmt: skip
            return learner._decode(code)
        indptr = np.array([0, n], dtype=np.int64)
        batch = CSRBatch(indptr, columns[:n].copy(), values[:n].copy(), encoder.dimension)
        rows = prediction_rows(batch, dimension, encoder.growable)
    else:
        vector = encoder.encode(x)
        width = vector.shape[0]
        if lean and width == dimension:
            columns = dense_columns(single_event(learner), width)
            code = _single.predict_binary_one(
                columns, vector, width, True, state.weights, state.weight_sums, state.counters,
                which,
            )  # fmt: skip
            return learner._decode(code)
        row = vector[None, :]
        if validated and width == dimension:
            rows = Rows.dense(row)
        else:
            rows = prediction_rows(row, dimension, encoder.growable)
    codes, _ = predict_codes(state, rows, predictor_code(learner.predictor), learner.multiclass)
    return learner._decode(codes.tolist()[0])
