"""Event timestamps: RFC 3339 strings or epoch seconds, with one definition of each.

An event's optional ``ts`` is either

* an RFC 3339 ``date-time`` string (``2024-05-01T12:30:00Z``, ``2024-05-01t12:30:00.25+02:00``):
  ``T`` and ``Z`` in either case, a fraction of any length, second 60 allowed for leap seconds,
  and a real calendar day (no 30 February); or
* a number of seconds since the Unix epoch (an integer or a float, not a boolean) within the
  years RFC 3339 can write, 0000 to 9999.

The string rule is one compiled check, :func:`consumers.decoding.fastjson.rfc3339_valid`, and
the number rule is one range, :data:`~consumers.decoding.fastjson.MIN_EPOCH_SECONDS` to
:data:`~consumers.decoding.fastjson.MAX_EPOCH_SECONDS`. The compiled tier applies both to the
record bytes; this module applies the same ones to decoded values: :func:`valid_timestamp` to
one (the precise path), :func:`all_valid_text_timestamps` to a batch of strings in one compiled
call (the orjson tier). So every tier accepts exactly the same ``ts`` values. The value is checked
and not kept: nothing downstream reads an event's time (see docs/DESIGN.md, Events).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from consumers.decoding.fastjson import (
    DAYS_IN_MONTH,
    MAX_EPOCH_SECONDS,
    MIN_EPOCH_SECONDS,
    rfc3339_valid,
)
from learning.jit import jit_no_runtime

logger = logging.getLogger(__name__)

_BYTES = np.uint8


@jit_no_runtime
def _all_rfc3339(data: Any, starts: Any, stops: Any, days: Any) -> bool:  # pragma: no cover
    """Whether every data[starts[i]:stops[i]] is an RFC 3339 date-time (compiled)."""
    for i in range(starts.shape[0]):  # noqa: SIM110 - a plain loop compiles to a tight loop
        if not rfc3339_valid(data, starts[i], stops[i], days):
            return False
    return True


def valid_text_timestamp(text: str) -> bool:
    """Whether ``text`` is an RFC 3339 date-time on a real calendar day.

    Examples
    --------
    >>> valid_text_timestamp("2024-02-29T23:59:60.5Z"), valid_text_timestamp("2023-02-29T00:00:00Z")
    (True, False)
    """
    return all_valid_text_timestamps([text])


def valid_epoch_seconds(value: float) -> bool:
    """Whether a number is a finite epoch time within years 0000 to 9999."""
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return MIN_EPOCH_SECONDS <= value < MAX_EPOCH_SECONDS


def valid_timestamp(value: object) -> bool:
    """Whether a decoded JSON value is an acceptable ``ts``.

    Examples
    --------
    >>> [valid_timestamp(v) for v in ("2024-01-01T00:00:00Z", 1.7e9, True, None, "yesterday")]
    [True, True, False, False, False]
    """
    kind = type(value)
    if kind is str:
        return valid_text_timestamp(value)  # type: ignore[arg-type]
    if kind is int or kind is float:
        return valid_epoch_seconds(value)  # type: ignore[arg-type]
    return False


def all_valid_text_timestamps(texts: list[str]) -> bool:
    """Whether every string is a valid timestamp, decided exactly in one compiled call.

    Examples
    --------
    >>> all_valid_text_timestamps(["2024-01-31T00:00:00Z", "2024-04-31T00:00:00Z"])
    False
    """
    if not texts:
        return True
    joined = "".join(texts)
    if not joined.isascii():  # every byte of a valid date-time is ASCII
        return False
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    stops = np.cumsum(lengths)
    data = np.frombuffer(joined.encode("ascii"), dtype=_BYTES)
    return bool(_all_rfc3339(data, stops - lengths, stops, DAYS_IN_MONTH))
