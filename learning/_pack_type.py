"""numba's side of :mod:`learning._state_pack`: the packs' structure types, their Python class
and the kernels that make them. Imported on a pack's first use only (it imports numba)."""

from __future__ import annotations

from typing import Any

from numba.core import types
from numba.experimental import structref

from learning._kernels import _jit
from learning._state_pack import EVENT_PACK_FIELDS, EVENT_STATE_FIELD, PACK_FIELDS
from learning.jit import numba_types


@structref.register
class StatePackType(types.StructRef):
    """numba's type of a :class:`StatePack`."""

    def preprocess_fields(self, fields: Any) -> tuple[tuple[str, Any], ...]:
        unliteral: Any = types.unliteral
        return tuple((name, unliteral(kind)) for name, kind in fields)


def forgotten() -> None:
    """What a copied or unpickled pack becomes (see learning._state_pack): nothing."""


class StatePack(structref.StructRefProxy):
    """The Python side of a pack: opaque, passed to compiled code only."""

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return forgotten, ()


_numba_structref: Any = structref  # numba ships no type information
_numba_structref.define_boxing(StatePackType, StatePack)
_pack_type: Any = StatePackType


def struct_type(fields: tuple[tuple[str, str], ...]) -> Any:
    """numba's type of a pack holding arrays named and typed as ``fields``."""
    names = tuple(name for name, _ in fields)
    kinds = numba_types(tuple(kind for _, kind in fields))
    return _pack_type(tuple(zip(names, kinds, strict=True)))


PACK_TYPE = struct_type(PACK_FIELDS)
"""numba's type of a state pack (the arrays of ``PACK_FIELDS``)."""
EVENT_PACK_TYPE = struct_type((*EVENT_PACK_FIELDS, (EVENT_STATE_FIELD, PACK_TYPE)))
"""numba's type of an event pack (the buffers of ``EVENT_PACK_FIELDS``, then the state pack)."""


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


@_jit
def new_event_pack(  # noqa: PLR0917 - numba kernels take positional arrays
    raw: Any,
    columns: Any,
    values: Any,
    partial: Any,
    names: Any,
    ends: Any,
    row: Any,
    state: Any,
) -> Any:
    """A pack of EVENT_PACK_TYPE holding these arrays."""
    pack = _numba_structref.new(EVENT_PACK_TYPE)
    pack.raw = raw
    pack.columns = columns
    pack.values = values
    pack.partial = partial
    pack.names = names
    pack.ends = ends
    pack.row = row
    pack.state = state
    return pack
