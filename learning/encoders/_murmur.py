"""One event's hashed sparse row, compiled: MurmurHash3 of each name, buckets, sort, sums.

The Python side hands over the names as one UTF-8 byte string, separated by ``NAME_SEPARATOR``
(a NUL byte), and the values as packed float64 (see :meth:`HashingEncoder.encode_sparse`); this
module does the rest in one compiled call. Every result equals the precise path of
:mod:`learning.encoders.hashing` bit for bit:

* h = MurmurHash3_x86_32 (seed 0) of the name's bytes, read as a signed 32-bit integer, exactly
  as ``mmh3.hash(name)``; bucket |h| mod 2^b (for h = -2^31 scikit-learn's
  (2^31 - 1 - (2^b - 1)) mod 2^b), sign - when h < 0;
* the signed values of names sharing a column are summed in the event's order starting from 0.0
  (so -0.0 becomes 0.0), columns increasing, the bias (column 0, value 1.0) first.

Whenever the compiled path cannot vouch for the row (a name holding a NUL byte, so the split is
ambiguous; a value or a column sum that is not finite or beyond ±limit) it returns no row and the
caller takes the precise path, which names the error.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np
from numpy.typing import NDArray

from learning._kernels import _inline, _jit, compiled_entry
from learning.jit import BYTES, FLOAT, FLOATS, INT, INTS, jit_no_runtime

MURMUR_C1 = 0xCC9E2D51
MURMUR_C2 = 0x1B873593
MURMUR_ROUND_ADD = 0xE6546B64
MURMUR_ROUND_MULTIPLIER = 5
MURMUR_FMIX_1 = 0x85EBCA6B
MURMUR_FMIX_2 = 0xC2B2AE35
BLOCK_ROTATION = 15
ROUND_ROTATION = 13
FMIX_SHIFT_1 = 16
FMIX_SHIFT_2 = 13
FMIX_SHIFT_3 = 16
WORD_MASK = 0xFFFFFFFF
WORD_BITS = 32
SIGN_BIT_32 = 0x80000000
BLOCK_BYTES = 4
BYTE_BITS = 8
SEPARATOR_BYTE = 0
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INSERTION_SORT_MAX = 64
"""Rows of at most this many names are sorted in place by insertion (no allocation)."""


@_jit
def rotl32(x: int, r: int) -> int:
    """32-bit left rotation of x (0 ≤ x < 2^32)."""
    return ((x << r) | (x >> (WORD_BITS - r))) & WORD_MASK


@_jit
def murmur3_32(data: bytes | NDArray[np.uint8], start: int, stop: int) -> int:
    """Signed MurmurHash3_x86_32 (seed 0) of ``data[start:stop]``, as ``mmh3.hash``."""
    length = stop - start
    h = 0
    blocks_end = start + (length // BLOCK_BYTES) * BLOCK_BYTES
    for i in range(start, blocks_end, BLOCK_BYTES):
        k = (
            int(data[i])
            | (int(data[i + 1]) << BYTE_BITS)
            | (int(data[i + 2]) << (2 * BYTE_BITS))
            | (int(data[i + 3]) << (3 * BYTE_BITS))
        )
        k = (k * MURMUR_C1) & WORD_MASK
        k = rotl32(k, BLOCK_ROTATION)
        k = (k * MURMUR_C2) & WORD_MASK
        h ^= k
        h = rotl32(h, ROUND_ROTATION)
        h = (h * MURMUR_ROUND_MULTIPLIER + MURMUR_ROUND_ADD) & WORD_MASK
    tail = stop - blocks_end
    if tail > 0:
        k = 0
        if tail > 2:
            k ^= int(data[blocks_end + 2]) << (2 * BYTE_BITS)
        if tail > 1:
            k ^= int(data[blocks_end + 1]) << BYTE_BITS
        k ^= int(data[blocks_end])
        k = (k * MURMUR_C1) & WORD_MASK
        k = rotl32(k, BLOCK_ROTATION)
        k = (k * MURMUR_C2) & WORD_MASK
        h ^= k
    h ^= length & WORD_MASK
    h ^= h >> FMIX_SHIFT_1
    h = (h * MURMUR_FMIX_1) & WORD_MASK
    h ^= h >> FMIX_SHIFT_2
    h = (h * MURMUR_FMIX_2) & WORD_MASK
    h ^= h >> FMIX_SHIFT_3
    return h - (1 << WORD_BITS) if h & SIGN_BIT_32 else h


@_jit
def murmur_bucket(h: int, n_buckets: int) -> int:
    """scikit-learn's bucket of a signed 32-bit hash for ``n_buckets`` a power of two (2^b):
    |h| mod 2^b, taken as |h|'s low b bits (a division costs more than the hash of a short
    name)."""
    if h == INT32_MIN:
        return (INT32_MAX - (n_buckets - 1)) % n_buckets
    return abs(h) & (n_buckets - 1)


@_jit
def sort_entries(columns: NDArray[np.int64], values: NDArray[np.float64], start: int) -> None:
    """Sort ``columns[start:]`` (and ``values`` alike) by column, stably: equal columns keep their
    order. Insertion sort for short rows (no allocation), a stable argsort otherwise."""
    stop = columns.shape[0]
    if stop - start <= INSERTION_SORT_MAX:
        for i in range(start + 1, stop):
            c = columns[i]
            v = values[i]
            j = i - 1
            while j >= start and columns[j] > c:
                columns[j + 1] = columns[j]
                values[j + 1] = values[j]
                j -= 1
            columns[j + 1] = c
            values[j + 1] = v
        return
    order = np.argsort(columns[start:], kind="mergesort")
    sorted_columns = columns[start:][order]
    sorted_values = values[start:][order]
    columns[start:] = sorted_columns
    values[start:] = sorted_values


@_jit
def hashed_row(  # noqa: PLR0917 - numba kernels take positional arrays
    names: bytes,
    packed: bytes,
    count: int,
    n_buckets: int,
    offset: int,
    limit: float,
    out_columns: NDArray[np.int64],
    out_values: NDArray[np.float64],
) -> int:
    """Write one event's row (see the module docs) to ``out_*[:n]``; returns n, or -1.

    ``names``: ``count`` UTF-8 names joined by NUL bytes; ``packed``: their ``count`` float64
    values. ``offset`` is 1 with a bias (column 0, value 1.0, first), else 0. The buffers hold at
    least ``count + offset`` entries.
    """
    values = np.frombuffer(packed, dtype=np.float64)
    n, position = write_row(
        names, 0, values, 0, count, True, n_buckets, offset, limit, out_columns, out_values
    )
    return n if position >= 0 else -1


@_jit
def hashed_batch(  # noqa: PLR0917 - numba kernels take positional arrays
    names: bytes,
    values: NDArray[np.float64],
    lengths: NDArray[np.int64],
    n_buckets: int,
    offset: int,
    limit: float,
    out_indptr: NDArray[np.int64],
    out_columns: NDArray[np.int64],
    out_values: NDArray[np.float64],
) -> int:
    """The rows of a batch as CSR, each exactly :func:`hashed_row`'s: ``out_indptr`` (one entry
    more than rows) and the first returned-count entries of ``out_columns`` / ``out_values``;
    -1 when the compiled path cannot vouch for some row (the caller then takes another path).

    ``names``: every event's names in order, joined by NUL bytes; ``values`` theirs;
    ``lengths``: names per event. The outputs hold at least len(values) + rows x ``offset``.
    """
    rows = lengths.shape[0]
    position = 0
    first = 0
    entry = 0
    out_indptr[0] = 0
    for r in range(rows):
        count = lengths[r]
        last = r == rows - 1
        n, position = write_row(
            names, position, values, first, count, last, n_buckets, offset, limit,
            out_columns[entry:], out_values[entry:],
        )  # fmt: skip
        if position < 0:
            return -1
        first += count
        entry += n
        out_indptr[r + 1] = entry
    return entry


@_inline
def write_row(  # noqa: PLR0917 - numba kernels take positional arrays
    names: bytes,
    position: int,
    values: NDArray[np.float64],
    first: int,
    count: int,
    last: bool,
    n_buckets: int,
    offset: int,
    limit: float,
    out_columns: NDArray[np.int64],
    out_values: NDArray[np.float64],
) -> tuple[int, int]:
    """One event's row (module docs) from its ``count`` names starting at byte ``position`` and
    its values ``values[first:first + count]``: (n, the position after its names), or (0, -1)
    when it cannot vouch for the row. ``last``: the event's last name ends ``names``."""
    size = len(names)
    for i in range(count):
        end = position
        while end < size and names[end] != SEPARATOR_BYTE:
            end += 1
        if (end == size) != (last and i == count - 1):
            return 0, -1
        if not put_entry(
            names, position, end, values[first + i], i, n_buckets, offset, limit, out_columns,
            out_values,
        ):  # fmt: skip
            return 0, -1
        position = end + 1
    n = finish_row(count, offset, limit, out_columns, out_values)
    return (n, position) if n >= 0 else (0, -1)


@_inline
def walked_row(  # noqa: PLR0917 - numba kernels take positional arrays
    names: NDArray[np.uint8],
    ends: NDArray[np.int64],
    values: NDArray[np.float64],
    count: int,
    n_buckets: int,
    offset: int,
    limit: float,
    out_columns: NDArray[np.int64],
    out_values: NDArray[np.float64],
) -> int:
    """One event's row (module docs) from a walk of its dict (:mod:`learning.encoders._walk`):
    name i is ``names[ends[i - 1]:ends[i]]`` (from 0 for i = 0), its value ``values[i]``; the
    row's length n, or -1 when it cannot vouch for the row. No separator is scanned for, so a
    name may hold any byte."""
    if not put_walked(
        names, ends, values, count, n_buckets, offset, limit, out_columns, out_values
    ):
        return -1
    return finish_row(count, offset, limit, out_columns, out_values)


@jit_no_runtime
def put_walked(  # noqa: PLR0917 - numba kernels take positional arrays
    names: NDArray[np.uint8],
    ends: NDArray[np.int64],
    values: NDArray[np.float64],
    count: int,
    n_buckets: int,
    offset: int,
    limit: float,
    out_columns: NDArray[np.int64],
    out_values: NDArray[np.float64],
) -> bool:
    """:func:`put_entry` of each walked name; False when a value is refused. Compiled without
    numba's runtime: the loop then passes its arrays to the inlined helpers with no atomic
    reference counting (with it, measured: about 40 ns per name, as much as the hash)."""
    start = 0
    for i in range(count):
        end = ends[i]
        if not put_entry(
            names, start, end, values[i], i, n_buckets, offset, limit, out_columns, out_values
        ):
            return False
        start = end
    return True


@_inline
def put_entry(  # noqa: PLR0917 - numba kernels take positional arrays
    names: bytes | NDArray[np.uint8],
    start: int,
    end: int,
    value: float,
    i: int,
    n_buckets: int,
    offset: int,
    limit: float,
    out_columns: NDArray[np.int64],
    out_values: NDArray[np.float64],
) -> bool:
    """Write name i's column and signed value (the name ``names[start:end]``) to entry
    ``offset + i``; False when the value is not finite or beyond ±``limit``."""
    if not abs(value) <= limit:
        return False
    h = murmur3_32(names, start, end)
    out_columns[offset + i] = murmur_bucket(h, n_buckets) + offset
    out_values[offset + i] = -value if h < 0 else value
    return True


@_inline
def finish_row(
    count: int,
    offset: int,
    limit: float,
    out_columns: NDArray[np.int64],
    out_values: NDArray[np.float64],
) -> int:
    """The row from its ``count`` entries put at ``offset`` (:func:`put_entry`): sorted by
    column, the signed values of a shared column summed in the event's order from 0.0, the bias
    first when ``offset`` is 1; its length n, or -1 when a sum is beyond ±``limit``."""
    columns = out_columns[: count + offset]
    signed = out_values[: count + offset]
    sort_entries(columns, signed, offset)
    if offset:
        columns[0] = 0
        signed[0] = 1.0
    n = offset
    previous = -1
    for k in range(offset, count + offset):
        c = columns[k]
        v = signed[k]
        if c != previous:
            columns[n] = c
            signed[n] = 0.0 + v
            n += 1
            previous = c
        else:
            total = signed[n - 1] + v
            if not abs(total) <= limit:
                return -1
            signed[n - 1] = total
    return n


HASHED_ROW_TYPES = (
    BYTES, BYTES, INT, INT, INT, FLOAT, INTS, FLOATS,
)  # fmt: skip


@cache
def hashed_row_entry() -> Callable[..., int]:
    """:func:`hashed_row` compiled for HASHED_ROW_TYPES (see learning._kernels.compiled_entry)."""
    return compiled_entry(hashed_row, HASHED_ROW_TYPES)
