"""The compiled reader of hashed events: record values straight to CSR rows, names hashed in place.

For a model whose encoder is murmur3 feature hashing (:class:`learning.HashingEncoder`),
:func:`parse_hashed` reads a whole batch of record values (one joined byte buffer) in one numba
pass and writes the accepted events' rows directly: no Python object per event, per name or per
value. Like the dense reader (:mod:`consumers.decoding.fastjson`, whose kernels it shares) it
never rejects and never guesses: a record it accepts is one the other tiers accept, with the
bit-identical row; every other record is *escalated* to orjson and the precise diagnosis.

Accepted here
    What the dense reader accepts, except that ``features`` is a JSON object of 1 to
    ``max_features`` members whose names are printable-ASCII strings without escapes, all
    distinct, and whose values are numbers the dense reader accepts, within ±``max_abs``.
Escalated
    Anything else: an empty object, too many names, a repeated name, a name with an escape or a
    non-ASCII byte, a value that is not such a number, a column sum beyond ±``max_abs``, and
    whatever the dense reader escalates.

Rows
    A name's UTF-8 bytes are its bytes in the record (printable ASCII, no escape), so its hash is
    ``mmh3.hash(name)`` (:func:`learning.encoders.murmur3_32`). Each row is then built as
    :meth:`HashingEncoder.encode_sparse` builds it: scikit-learn's bucket plus the bias offset,
    the sign, the entries sorted by column in event order and the values of a shared column
    summed in event order from 0.0, the bias (column 0, value 1.0) first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from consumers.decoding.fastjson import (
    CLOSE_BRACE,
    COLON,
    COMMA,
    DAYS_IN_MONTH,
    KEY_FEATURES,
    KEY_ID,
    KEY_LABEL,
    OPEN_BRACE,
    QUOTE,
    REQUIRED_KEYS,
    LabelTable,
    event_id_reader,
    member_end,
    member_key,
    parse_number,
    plain_string_end,
    powers_of_five,
    scalar_member,
    skip_space,
)
from learning.encoders import murmur3_32, murmur_bucket
from learning.jit import jit_no_runtime
from learning.sparse import CSRBatch

logger = logging.getLogger(__name__)

MIN_MEMBER_BYTES = 4
"""The shortest member of a features object, ``"":0``: a record of n bytes has at most
n / MIN_MEMBER_BYTES names, which bounds the entries a batch can produce."""
SHORT_ROW = 64
"""Rows of at most this many names are sorted by insertion, longer ones by a heap sort."""
MAX_KEY_SPAN = 2**32
"""Most names per event the sort keys (column * span + position) can carry without overflow."""


@jit_no_runtime
def _sort_keys(keys: Any, count: int) -> None:  # pragma: no cover - compiled
    """Sort ``keys[:count]`` in place (distinct keys, so any correct sort gives one order):
    insertion for short rows, heapsort for long ones (neither allocates)."""
    if count <= SHORT_ROW:
        for i in range(1, count):
            key = keys[i]
            j = i - 1
            while j >= 0 and keys[j] > key:
                keys[j + 1] = keys[j]
                j -= 1
            keys[j + 1] = key
        return
    for top in range(count // 2 - 1, -1, -1):
        _sift_down(keys, top, count)
    for last in range(count - 1, 0, -1):
        keys[0], keys[last] = keys[last], keys[0]
        _sift_down(keys, 0, last)


@jit_no_runtime
def _sift_down(keys: Any, root: int, size: int) -> None:  # pragma: no cover - compiled
    while True:
        child = 2 * root + 1
        if child >= size:
            return
        if child + 1 < size and keys[child + 1] > keys[child]:
            child += 1
        if keys[root] >= keys[child]:
            return
        keys[root], keys[child] = keys[child], keys[root]
        root = child


@jit_no_runtime
def _same_name(data: Any, a: int, a_stop: int, b: int, b_stop: int) -> bool:  # pragma: no cover
    if a_stop - a != b_stop - b:
        return False
    for i in range(a_stop - a):  # noqa: SIM110 - a plain loop compiles to a tight loop
        if data[a + i] != data[b + i]:
            return False
    return True


@jit_no_runtime
def _read_features(  # noqa: PLR0917 - numba kernels take positional arrays
    data: Any,
    p: int,
    end: int,
    max_features: int,
    max_abs: float,
    high: Any,
    low: Any,
    n_buckets: int,
    offset: int,
    keys: Any,
    signed: Any,
    name_starts: Any,
    name_stops: Any,
) -> tuple[int, int]:  # pragma: no cover - compiled
    """Read the features object at ``p`` into the scratch arrays: name i's sort key (column *
    ``max_features`` + i), signed value and bytes. (The position after it, the count), or
    (-1, 0) when the object is not one this reader accepts."""
    if data[p] != OPEN_BRACE:
        return -1, 0
    p = skip_space(data, p + 1, end)
    count = 0
    while True:
        if p >= end or data[p] != QUOTE or count >= max_features:
            return -1, 0
        name_stop = plain_string_end(data, p + 1, end)
        if name_stop < 0:
            return -1, 0
        name_start = p + 1
        p = skip_space(data, name_stop + 1, end)
        if p >= end or data[p] != COLON:
            return -1, 0
        p = skip_space(data, p + 1, end)
        p, value, _ = parse_number(data, p, end, high, low)
        if p < 0 or not (-max_abs <= value <= max_abs):
            return -1, 0
        h = murmur3_32(data, name_start, name_stop)
        keys[count] = (murmur_bucket(h, n_buckets) + offset) * max_features + count
        signed[count] = -value if h < 0 else value
        name_starts[count] = name_start
        name_stops[count] = name_stop
        count += 1
        p = skip_space(data, p, end)
        if p < end and data[p] == COMMA:
            p = skip_space(data, p + 1, end)
            continue
        if p < end and data[p] == CLOSE_BRACE:
            return p + 1, count
        return -1, 0


@jit_no_runtime
def _write_row(  # noqa: PLR0917 - numba kernels take positional arrays
    data: Any,
    count: int,
    max_features: int,
    offset: int,
    max_abs: float,
    keys: Any,
    signed: Any,
    name_starts: Any,
    name_stops: Any,
    out_columns: Any,
    out_values: Any,
    entry: int,
) -> int:  # pragma: no cover - compiled
    """The row of the ``count`` names read (module docs, Rows) written from ``out_*[entry]``:
    its length, or -1 for a repeated name or a column sum beyond ±``max_abs``."""
    _sort_keys(keys, count)
    n = entry
    if offset:
        out_columns[n] = 0
        out_values[n] = 1.0
        n += 1
    previous = -1
    run = 0
    for k in range(count):
        column = keys[k] // max_features
        i = keys[k] - column * max_features
        value = signed[i]
        if column != previous:
            out_columns[n] = column
            out_values[n] = 0.0 + value
            n += 1
            previous = column
            run = k
            continue
        for m in range(run, k):
            j = keys[m] - column * max_features
            if _same_name(data, name_starts[i], name_stops[i], name_starts[j], name_stops[j]):
                return -1
        total = out_values[n - 1] + value
        if not abs(total) <= max_abs:
            return -1
        out_values[n - 1] = total
    return n - entry


@jit_no_runtime
def _parse_all(  # noqa: PLR0917 - numba kernels take positional arrays
    data: Any,
    starts: Any,
    stops: Any,
    n_buckets: int,
    offset: int,
    max_features: int,
    max_id_length: int,
    max_abs: float,
    high: Any,
    low: Any,
    int_labels: Any,
    text_bytes: Any,
    text_starts: Any,
    text_stops: Any,
    days: Any,
    keys: Any,
    signed: Any,
    name_starts: Any,
    name_stops: Any,
    slots: Any,
    id_starts: Any,
    id_stops: Any,
    out_indptr: Any,
    out_columns: Any,
    out_values: Any,
) -> int:  # pragma: no cover - compiled
    """Every record: its slot (-1: escalated) and id; the accepted records' rows as CSR in
    ``out_*`` (``out_indptr[: accepted + 1]``). Returns the number accepted."""
    accepted = 0
    entry = 0
    out_indptr[0] = 0
    for r in range(starts.shape[0]):
        end = stops[r]
        slots[r] = -1
        seen = 0
        label = -1
        id_start = -1
        id_stop = -1
        n = 0
        p = skip_space(data, starts[r], end)
        if p >= end or data[p] != OPEN_BRACE:
            continue
        p += 1
        closed = False
        while not closed:
            p, key, seen = member_key(data, p, end, seen)
            if p < 0:
                break
            if key == KEY_FEATURES:
                p, count = _read_features(
                    data, p, end, max_features, max_abs, high, low, n_buckets, offset,
                    keys, signed, name_starts, name_stops,
                )  # fmt: skip
                if p >= 0:
                    n = _write_row(
                        data, count, max_features, offset, max_abs, keys, signed,
                        name_starts, name_stops, out_columns, out_values, entry,
                    )  # fmt: skip
                    if n < 0:
                        p = -1
            else:
                p, slot, first, last = scalar_member(
                    data, p, end, key, max_id_length, high, low,
                    int_labels, text_bytes, text_starts, text_stops, days,
                )  # fmt: skip
                if key == KEY_LABEL:
                    label = slot
                elif key == KEY_ID:
                    id_start, id_stop = first, last
            if p < 0:
                break
            p, closed = member_end(data, p, end)
            if p < 0:
                break
        if p < 0 or skip_space(data, p, end) != end or seen & REQUIRED_KEYS != REQUIRED_KEYS:
            continue
        slots[r] = label
        id_starts[r] = id_start
        id_stops[r] = id_stop
        entry += n
        accepted += 1
        out_indptr[accepted] = entry
    return accepted


@dataclass(frozen=True, slots=True, kw_only=True)
class HashedParse:
    """The outcome of :func:`parse_hashed` on one batch.

    Attributes
    ----------
    X
        The accepted records' rows, in record order.
    slots
        Label-table slot per record, -1 for an escalated record.
    id_starts, id_stops
        Where each accepted record's ``id`` lies in ``buffer`` (-1 when it has none).
    buffer
        The joined record values.
    accepted
        How many records were accepted.
    """

    X: CSRBatch
    slots: np.ndarray
    id_starts: np.ndarray
    id_stops: np.ndarray
    buffer: bytes
    accepted: int

    def rows(self, accepted: np.ndarray | None) -> CSRBatch:
        """The accepted records' rows (``accepted``, the mask of them, is implied)."""
        return self.X

    def event_ids(self, records: np.ndarray) -> Callable[[], list[str | None]]:
        """A function giving the ``id`` of each of ``records`` (``None`` when it has none)."""
        return event_id_reader(self.buffer, self.id_starts[records], self.id_stops[records])


def parse_hashed(
    values: list[bytes],
    *,
    n_bits: int,
    bias: bool,
    max_features: int,
    labels: LabelTable,
    max_id_length: int,
    max_abs: float,
) -> HashedParse:
    """Parse a batch of record values for murmur3 hashing into 2^``n_bits`` buckets (see the
    module docs). Raises ``TypeError`` when a value is not ``bytes`` (the caller then takes the
    slow road)."""
    buffer = b"".join(values)
    count = len(values)
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=count)
    stops = np.cumsum(lengths)
    starts = stops - lengths
    offset = 1 if bias else 0
    longest = int(lengths.max()) if count else 0
    scratch = max(1, min(max_features, longest // MIN_MEMBER_BYTES + 1))
    capacity = min(len(buffer) // MIN_MEMBER_BYTES, count * max_features) + count * offset
    keys = np.empty(scratch, dtype=np.int64)
    signed = np.empty(scratch)
    name_starts = np.empty(scratch, dtype=np.int64)
    name_stops = np.empty(scratch, dtype=np.int64)
    slots = np.empty(count, dtype=np.int64)
    id_starts = np.full(count, -1, dtype=np.int64)
    id_stops = np.full(count, -1, dtype=np.int64)
    indptr = np.empty(count + 1, dtype=np.int64)
    columns = np.empty(capacity, dtype=np.int64)
    data = np.empty(capacity)
    high, low = powers_of_five()
    accepted = int(
        _parse_all(
            np.frombuffer(buffer, dtype=np.uint8), starts, stops, 1 << n_bits, offset,
            max_features, max_id_length, max_abs, high, low,
            labels.int_labels, labels.text_bytes, labels.text_starts, labels.text_stops,
            DAYS_IN_MONTH, keys, signed, name_starts, name_stops, slots, id_starts, id_stops,
            indptr, columns, data,
        )
    )  # fmt: skip
    total = int(indptr[accepted])
    X = CSRBatch(
        indptr=indptr[: accepted + 1],
        indices=columns[:total],
        values=data[:total],
        dimension=(1 << n_bits) + offset,
    )
    return HashedParse(
        X=X, slots=slots, id_starts=id_starts, id_stops=id_stops, buffer=buffer, accepted=accepted
    )
