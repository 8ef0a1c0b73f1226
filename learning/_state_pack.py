"""A learner's state arrays as one compiled structure, the argument of the one-event kernel.

A call into compiled code costs about 55 ns per array argument (each is unboxed; measured), so
the ten state arrays cost more than the one-event kernel's work on a short row. A
:class:`StatePack` (a numba ``StructRef``) holds references to those same arrays: the kernel
reads and writes the state's own memory, and the call unboxes one object instead of ten.

A pack is made for a state whose arrays are all writable and C-contiguous (the types of
``PACK_TYPE``) and kept in the state's ``__dict__`` under ``PACK_KEY``;
``LinearState.__setattr__`` drops it whenever an array is replaced, so a kept pack always holds
the state's current arrays. Copies and pickles of a state forget the pack (it is derived: the
next event builds a new one over the copy's arrays).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from numba.core import types
from numba.experimental import structref

from learning._kernels import FLOAT_MATRIX, FLOATS, INT_MATRIX, INTS, _jit

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
