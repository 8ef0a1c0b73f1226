"""Byte-level scans used to check decoded events exactly without re-parsing them.

The decoder compares, for a whole batch at once, how many *marker bytes* the raw JSON holds with
how many the decoded objects account for. The markers are ``"``, ``u``, ``l`` and ``\\``:

* every string token carries two ``"``; an extra string (a duplicated key, a string where a number
  belongs) therefore adds at least two;
* the literals ``true``, ``false`` and ``null`` each contain ``u`` or ``l``, numbers contain none;
* every escape sequence adds at least one marker more than its decoded character accounts for.

So the raw count is never below the accounted count, and equality proves that a record has no
duplicate keys, no booleans or nulls, no stray strings and no escapes. The count runs as a SWAR
(SIMD-within-a-register) loop over 64-bit words, compiled with numba on first use.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from learning.jit import jit

logger = logging.getLogger(__name__)

MARKERS = b'"ul\\'
"""The bytes counted by :func:`count_markers` (quote, ``u``, ``l``, backslash)."""

WORD_BYTES = 8
PAD_BYTE = b" "
_QUOTE, _SMALL_U, _SMALL_L, _BACKSLASH = MARKERS
_OPEN_BRACKET = 0x5B
_OPEN_BRACE = 0x7B
_CLOSE_BRACKET = 0x5D
_CLOSE_BRACE = 0x7D
_ONES = np.uint64(0x0101010101010101)
_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_SHIFT_TOP = np.uint64(56)


@jit
def _zero_lanes(word: Any) -> Any:  # pragma: no cover - compiled
    """0x80 in every byte lane of ``word`` that is zero, 0x00 elsewhere (exact, no borrows)."""
    spread = (word & _LOW7) + _LOW7
    return ~(spread | word | _LOW7)


@jit
def _popcount(word: Any) -> Any:  # pragma: no cover - compiled
    word = word - ((word >> np.uint64(1)) & _M1)
    word = (word & _M2) + ((word >> np.uint64(2)) & _M2)
    word = (word + (word >> np.uint64(4))) & _M4
    return (word * _ONES) >> _SHIFT_TOP


@jit
def _count_marker_words(words: Any) -> int:  # pragma: no cover - compiled
    quote = np.uint64(_QUOTE) * _ONES
    small_u = np.uint64(_SMALL_U) * _ONES
    small_l = np.uint64(_SMALL_L) * _ONES
    backslash = np.uint64(_BACKSLASH) * _ONES
    total = np.uint64(0)
    for index in range(words.shape[0]):
        word = words[index]
        hits = (
            _zero_lanes(word ^ quote)
            | _zero_lanes(word ^ small_u)
            | _zero_lanes(word ^ small_l)
            | _zero_lanes(word ^ backslash)
        )
        total += _popcount(hits)
    return int(total)


@jit
def _count_marker_segments(data: Any, starts: Any, ends: Any) -> Any:  # pragma: no cover
    counts = np.zeros(starts.shape[0], dtype=np.int64)
    for segment in range(starts.shape[0]):
        found = 0
        for index in range(starts[segment], ends[segment]):
            byte = data[index]
            if byte == _QUOTE or byte == _SMALL_U or byte == _SMALL_L or byte == _BACKSLASH:  # noqa: PLR1714, SIM109 (numba)
                found += 1
        counts[segment] = found
    return counts


def count_markers(values: list[bytes]) -> int:
    """Total number of marker bytes in ``values``.

    Examples
    --------
    >>> count_markers([b'{"a": null}', b'true'])
    6
    """
    joined = b"".join(values)
    joined += PAD_BYTE * (-len(joined) % WORD_BYTES)
    return _count_marker_words(np.frombuffer(joined, dtype=np.uint64))


def count_markers_each(values: list[bytes]) -> np.ndarray:
    """Number of marker bytes in each value (slower than :func:`count_markers`; for diagnosis)."""
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    ends = np.cumsum(lengths)
    starts = ends - lengths
    data = np.frombuffer(b"".join(values), dtype=np.uint8)
    result: np.ndarray = _count_marker_segments(data, starts, ends)
    return result


def count_text_markers(text: str) -> int:
    """Number of marker characters in a decoded string."""
    return text.count('"') + text.count("u") + text.count("l") + text.count("\\")


def nesting_depth(value: bytes) -> int:
    """Deepest nesting of arrays and objects in JSON text, ignoring brackets inside strings.

    Linear in the size of ``value`` and defined for any bytes (valid JSON or not), so it is safe
    on huge or hostile records.

    Examples
    --------
    >>> nesting_depth(b'{"a": [[1], "]]]"]}')
    3
    >>> nesting_depth(b'42')
    0
    """
    return int(_nesting_depth(np.frombuffer(value, dtype=np.uint8)))


@jit
def _nesting_depth(data: Any) -> int:  # pragma: no cover - compiled
    depth = 0
    deepest = 0
    in_string = False
    escaped = False
    for index in range(data.shape[0]):
        byte = data[index]
        if in_string:
            if escaped:
                escaped = False
            elif byte == _BACKSLASH:
                escaped = True
            elif byte == _QUOTE:
                in_string = False
        elif byte == _QUOTE:
            in_string = True
        elif byte == _OPEN_BRACKET or byte == _OPEN_BRACE:  # noqa: PLR1714, SIM109 (numba)
            depth += 1
            deepest = max(deepest, depth)
        elif byte == _CLOSE_BRACKET or byte == _CLOSE_BRACE:  # noqa: PLR1714, SIM109 (numba)
            depth -= 1
    return deepest
