"""A learner's state arrays as one compiled structure, the argument of the one-event kernel.

A call into compiled code costs about 55 ns per array argument (each is unboxed; measured), so
the ten state arrays cost more than the one-event kernel's work on a short row. A
:class:`learning._pack_type.StatePack` (a numba ``StructRef``) holds references to those same
arrays: the kernel reads and writes the state's own memory, and the call unboxes one object
instead of ten.

A pack is made for a state whose arrays are all writable and C-contiguous (the types of
``PACK_TYPE``) and kept in the state's ``__dict__`` under ``PACK_KEY``;
``LinearState.__setattr__`` drops it whenever an array is replaced, so a kept pack always holds
the state's current arrays. Copies and pickles of a state forget the pack (it is derived: the
next event builds a new one over the copy's arrays).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from learning.jit import FLOAT_MATRIX, FLOATS, INT_MATRIX, INTS

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
"""The state arrays a pack holds, with the types the one-event kernel takes them as.

The numba side of a pack (its type, its Python class, the kernel making one) is
:mod:`learning._pack_type`, imported on a pack's first use: importing it imports numba
(:mod:`learning.jit`, Deferred numba)."""


def pack_type() -> Any:
    """numba's type of a pack (:data:`learning._pack_type.PACK_TYPE`)."""
    from learning._pack_type import PACK_TYPE  # noqa: PLC0415 - numba on first use

    return PACK_TYPE


def state_pack(state: LinearState) -> Any:
    """The state's pack, made when it has none; only for a state whose ``irregular`` is empty."""
    pack = state.__dict__.get(PACK_KEY)
    if pack is None:
        from learning._pack_type import new_pack  # noqa: PLC0415 - numba on first use

        pack = new_pack(*(getattr(state, name) for name, _ in PACK_FIELDS))
        state.__dict__[PACK_KEY] = pack
    return pack
