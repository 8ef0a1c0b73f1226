"""One walk of an event dict: its names' UTF-8 bytes and its values as float64, written into a
learner's reused buffers, from which one compiled call hashes the row and predicts it
(:func:`learning.encoders._murmur.walked_row`, :mod:`learning._fused`).

Two functions, with one contract (:class:`Walker`):

``pack(mapping, limit, names, ends, values) -> int``
    ``mapping`` a ``dict`` (exactly) of 1 .. ``limit`` entries, every name a ``str`` (exactly)
    of valid Unicode, every value an ``int`` or a ``float`` (exactly; an int that converts to a
    float64). ``names``, ``ends``, ``values``: bytearrays. Entry i's name is written as
    ``names[ends[i - 1]:ends[i]]`` (from 0 for i = 0), ``ends[i]`` an int64 and ``values[i]`` a
    float64 in native byte order, in the dict's order. Returns the number of entries;
    ``NOT_WALKED`` when the mapping is not of that form (the caller then takes the encoder's
    precise path, which names the error); ``NAMES_FULL`` when the names do not fit in ``names``
    (the caller retries with a larger one, which gives the final answer). Nothing is raised for
    any mapping, and the buffers' content is defined only after a count is returned.
``same(mapping, count, names, ends, values) -> bool``
    Whether ``pack`` would write exactly the first ``count`` entries the buffers hold: the same
    names in the same order byte for byte, the same values bit for bit. Equal content is the
    same row, so a predict-then-learn loop builds each event's row once.

The C extension ``learning.encoders._dictwalk`` serves both when it was built (``setup.py``);
this module's Python functions, with the same contract, serve otherwise (no C compiler at
install). ``tests/unit/learning/test_walk.py`` holds them to the same results.

Measured (one run, 2026-12-01 17:55 UTC, load 0.6; the 20-of-100,000-words events of
:mod:`bench.sparse_stream`): ``pack`` of one event, 0.62 µs from C; the encoder's content in
Python (``HashingEncoder._murmur_content``: type checks, a join, ``struct.pack``), 3.75 µs.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from itertools import accumulate
from typing import Any

from learning.encoders._common import PLAIN_NUMBER_TYPES

NOT_WALKED = -1
"""``pack``: the mapping is not a dict of str names and plain number values within the limit."""
NAMES_FULL = -2
"""``pack``: the names do not fit in the ``names`` bytearray."""
ENTRY_BYTES = 8
"""Bytes of one entry's end (int64) and of its value (float64)."""
PLAIN_NAME_TYPES = frozenset({str})
"""The one type of a walked name (a ``str`` subclass takes the precise path)."""

Pack = Callable[[Any, int, bytearray, bytearray, bytearray], int]
Same = Callable[[Any, int, bytearray, bytearray, bytearray], bool]


@dataclass(frozen=True)
class Walker:
    """The two functions of the module's contract, and who serves them."""

    pack: Pack
    same: Same
    compiled: bool
    """Whether the C extension serves them."""


def plain_content(mapping: Any, limit: int, room: int) -> tuple[list[bytes], bytes] | None:
    """The names' UTF-8 bytes and the values packed as float64 of a mapping of the contract's
    form with at most ``min(limit, room)`` entries, else None."""
    if type(mapping) is not dict:
        return None
    count = len(mapping)
    if not 0 < count <= min(limit, room):
        return None
    if not PLAIN_NUMBER_TYPES.issuperset(map(type, mapping.values())):
        return None
    if not PLAIN_NAME_TYPES.issuperset(map(type, mapping)):
        return None
    try:
        encoded = list(map(str.encode, mapping))  # UTF-8, strict: a lone surrogate raises
        packed = struct.pack(f"{count}d", *mapping.values())
    except (UnicodeEncodeError, OverflowError, struct.error):
        return None
    return encoded, packed


def packed_ends(encoded: list[bytes]) -> bytes:
    """The int64 ends of these names written one after the other."""
    return struct.pack(f"{len(encoded)}q", *accumulate(map(len, encoded)))


def pack_python(
    mapping: Any, limit: int, names: bytearray, ends: bytearray, values: bytearray
) -> int:
    """``pack`` of the module docs, in Python."""
    content = plain_content(mapping, limit, min(len(ends), len(values)) // ENTRY_BYTES)
    if content is None:
        return NOT_WALKED
    encoded, packed = content
    joined = b"".join(encoded)
    if len(joined) > len(names):
        return NAMES_FULL
    names[: len(joined)] = joined
    ends[: len(packed)] = packed_ends(encoded)
    values[: len(packed)] = packed
    return len(encoded)


def same_python(
    mapping: Any, count: int, names: bytearray, ends: bytearray, values: bytearray
) -> bool:
    """``same`` of the module docs, in Python."""
    room = min(len(ends), len(values)) // ENTRY_BYTES
    if type(mapping) is not dict or len(mapping) != count:
        return False
    content = plain_content(mapping, count, room)
    if content is None:
        return False
    encoded, packed = content
    joined = b"".join(encoded)
    return (
        values[: len(packed)] == packed
        and ends[: len(packed)] == packed_ends(encoded)
        and names[: len(joined)] == joined
    )


PYTHON_WALKER = Walker(pack_python, same_python, compiled=False)


@cache
def walker() -> Walker:
    """The C extension's walker when it was built, else :data:`PYTHON_WALKER`."""
    try:
        from learning.encoders import _dictwalk  # noqa: PLC0415 - optional, built by setup.py
    except ImportError:
        return PYTHON_WALKER
    return Walker(_dictwalk.pack, _dictwalk.same, compiled=True)
