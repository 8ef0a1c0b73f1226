"""Arrays passed to the one-event kernels as one compiled structure: a learner's state arrays
(:func:`state_pack`) and its single-event buffers (:func:`event_pack`).

A call into compiled code costs about 55 ns per array argument (each is unboxed; measured), so
the ten state arrays cost more than the one-event kernel's work on a short row. A
:class:`StatePack` (a numba ``StructRef``) holds references to those same arrays: the kernel
reads and writes their own memory, and the call unboxes one object instead of ten.

A pack is made for a state whose arrays are all writable and C-contiguous (the types of
``PACK_TYPE``) and kept in the state's ``__dict__`` under ``PACK_KEY``;
``LinearState.__setattr__`` drops it whenever an array is replaced, so a kept pack always holds
the state's current arrays. Copies and pickles of a state forget the pack (it is derived: the
next event builds a new one over the copy's arrays).

An event pack holds a learner's single-event buffers (``learning._one.SingleEvent``: the event's
values packed as float64, the row's columns and values, the scratch of a sparse row's scores).
Those buffers are never replaced, so it is made once and kept with them; copies and pickles
forget it too (the copy's next event makes one over its own buffers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np
from numba.core import types
from numba.experimental import structref

from learning._kernels import FLOAT_MATRIX, FLOATS, INT_MATRIX, INTS, PARTIAL_SUMS, _jit

if TYPE_CHECKING:
    from learning._arrays import LinearState

PACK_KEY = "_pack"
"""Where a state keeps its pack (see the module docs)."""
PACK_FIELDS = (
    ("weights", FLOAT_MATRIX),
    ("weight_sums", FLOAT_MATRIX),
    ("row_sq", FLOATS),
    ("log_counts", INTS),
    ("log_rows", INT_MATRIX),
    ("log_start", INTS),
    ("log_len", INTS),
    ("log_cols", INTS),
    ("log_old", FLOAT_MATRIX),
    ("counters", INTS),
)
"""The state arrays a pack holds, with the types the one-event kernel takes them as."""
EVENT_PACK_FIELDS = (
    ("raw", FLOATS),
    ("columns", INTS),
    ("values", FLOATS),
    ("partial", FLOATS),
)
"""An event pack's buffers: the event's values packed as float64 (``raw``, written by
``struct.pack_into``), the row's columns and values, PARTIAL_SUMS of scratch."""


@structref.register
class StatePackType(types.StructRef):
    """numba's type of a :class:`StatePack`."""

    def preprocess_fields(self, fields: Any) -> tuple[tuple[str, Any], ...]:
        unliteral: Any = types.unliteral
        return tuple((name, unliteral(kind)) for name, kind in fields)


def forgotten() -> None:
    """What a copied or unpickled pack becomes (see the module docs): nothing."""


class StatePack(structref.StructRefProxy):
    """The Python side of a pack: opaque, passed to compiled code only."""

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return forgotten, ()


_numba_structref: Any = structref  # numba ships no type information
_numba_structref.define_boxing(StatePackType, StatePack)
_pack_type: Any = StatePackType
PACK_TYPE = _pack_type(PACK_FIELDS)
EVENT_PACK_TYPE = _pack_type(EVENT_PACK_FIELDS)


@_jit
def new_pack(  # noqa: PLR0917 - numba kernels take positional arrays
    weights: Any,
    weight_sums: Any,
    row_sq: Any,
    log_counts: Any,
    log_rows: Any,
    log_start: Any,
    log_len: Any,
    log_cols: Any,
    log_old: Any,
    counters: Any,
) -> Any:
    """A :class:`StatePack` holding these arrays."""
    pack = _numba_structref.new(PACK_TYPE)
    pack.weights = weights
    pack.weight_sums = weight_sums
    pack.row_sq = row_sq
    pack.log_counts = log_counts
    pack.log_rows = log_rows
    pack.log_start = log_start
    pack.log_len = log_len
    pack.log_cols = log_cols
    pack.log_old = log_old
    pack.counters = counters
    return pack


def state_pack(state: LinearState) -> StatePack:
    """The state's pack, made when it has none; only for a state whose ``irregular`` is empty."""
    pack = state.__dict__.get(PACK_KEY)
    if pack is None:
        pack = new_pack(*(getattr(state, name) for name, _ in PACK_FIELDS))
        state.__dict__[PACK_KEY] = pack
    return cast(StatePack, pack)


@_jit
def new_event_pack(raw: Any, columns: Any, values: Any, partial: Any) -> Any:
    """A pack of EVENT_PACK_TYPE holding these arrays."""
    pack = _numba_structref.new(EVENT_PACK_TYPE)
    pack.raw = raw
    pack.columns = columns
    pack.values = values
    pack.partial = partial
    return pack


def event_pack(raw: bytearray, columns: Any, values: Any) -> StatePack:
    """A pack of the single-event buffers: ``raw`` seen as float64, the row's ``columns`` and
    ``values`` (C-contiguous int64 and float64), and fresh scratch."""
    floats = np.frombuffer(raw, dtype=np.float64)
    return cast(StatePack, new_event_pack(floats, columns, values, np.zeros(PARTIAL_SUMS)))
