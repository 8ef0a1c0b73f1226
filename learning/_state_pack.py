"""Arrays passed to the one-event kernels as one compiled structure: a learner's state arrays
(:func:`state_pack`) and its single-event buffers (:func:`event_pack`).

A call into compiled code costs about 55 ns per array argument (each is unboxed; measured), so
the ten state arrays cost more than the one-event kernel's work on a short row. A
:class:`learning._pack_type.StatePack` (a numba ``StructRef``) holds references to those same
arrays: the kernel reads and writes their own memory, and the call unboxes one object instead
of ten.

A pack is made for a state whose arrays are all writable and C-contiguous (the types of
``PACK_TYPE``) and kept in the state's ``__dict__`` under ``PACK_KEY``;
``LinearState.__setattr__`` drops it whenever an array is replaced, so a kept pack always holds
the state's current arrays. Copies and pickles of a state forget the pack (it is derived: the
next event builds a new one over the copy's arrays).

An event pack holds a learner's single-event buffers (``learning._one.SingleEvent``: the event's
values packed as float64 or walked, the row's columns and values, scratch) and the state pack of
the learner's state, so a one-event kernel takes one pack. It is made anew whenever its state
pack is not the state's current one (``learning._one.learner_pack``) or a buffer was replaced;
copies and pickles forget it too (the copy's next event makes one over its own buffers).

The numba side of both packs (their types, their Python class, the kernels making them) is
:mod:`learning._pack_type`, imported on a pack's first use: importing it imports numba
(:mod:`learning.jit`, Deferred numba).
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Any

import numpy as np

from learning._kernels import PARTIAL_SUMS
from learning.jit import BYTE_BUFFER, FLOAT_MATRIX, FLOATS, INT_MATRIX, INTS

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
    ("names", BYTE_BUFFER),
    ("ends", INTS),
    ("row", INTS),
)
"""An event pack's buffers: the event's values packed as float64 (``raw``, written by
``struct.pack_into`` or a walk of the event, :mod:`learning.encoders._walk`), the row's columns
and values, PARTIAL_SUMS of scratch, the walk's names and their ends, and the scores of a fused
prediction (``row``: the length of the row it wrote)."""
EVENT_STATE_FIELD = "state"
"""The event pack's last field: the state pack of the learner's state (the kernels take one
pack: each pack unboxed costs a call about 0.12 µs, measured)."""


def event_pack_type() -> Any:
    """numba's type of an event pack (:data:`learning._pack_type.EVENT_PACK_TYPE`)."""
    from learning._pack_type import EVENT_PACK_TYPE  # noqa: PLC0415 - numba on first use

    return EVENT_PACK_TYPE


def state_pack(state: LinearState) -> Any:
    """The state's pack, made when it has none; only for a state whose ``irregular`` is empty."""
    pack = state.__dict__.get(PACK_KEY)
    if pack is None:
        from learning._pack_type import new_pack  # noqa: PLC0415 - numba on first use

        pack = new_pack(*(getattr(state, name) for name, _ in PACK_FIELDS))
        state.__dict__[PACK_KEY] = pack
    return pack


def event_pack(  # noqa: PLR0917 - the buffers, in the pack's order
    raw: bytearray,
    columns: Any,
    values: Any,
    names: bytearray,
    ends: bytearray,
    row: array[int],
    state: Any,
) -> Any:
    """A pack of the single-event buffers: ``raw`` seen as float64, the row's ``columns`` and
    ``values`` (C-contiguous int64 and float64), fresh scratch, ``names`` seen as bytes,
    ``ends`` and ``row`` (an ``array("q")``) as int64; and a state pack."""
    from learning._pack_type import new_event_pack  # noqa: PLC0415 - numba on first use

    return new_event_pack(
        np.frombuffer(raw, dtype=np.float64),
        columns,
        values,
        np.zeros(PARTIAL_SUMS),
        np.frombuffer(names, dtype=np.uint8),
        np.frombuffer(ends, dtype=np.int64),
        np.frombuffer(row, dtype=np.int64),
        state,
    )
