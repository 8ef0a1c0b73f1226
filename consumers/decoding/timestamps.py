"""Event timestamps: RFC 3339 strings or epoch seconds, checked exactly and in bulk.

An event's optional ``ts`` is either

* an RFC 3339 ``date-time`` string (``2024-05-01T12:30:00Z``, ``2024-05-01t12:30:00.25+02:00``):
  ``T`` and ``Z`` in either case, a fraction of any length, second 60 allowed for leap seconds,
  and a real calendar day (no 30 February); or
* a number of seconds since the Unix epoch (an integer or a float, not a boolean) within the
  years RFC 3339 can write, 0000 to 9999.

:func:`valid_timestamp` decides one value exactly; :func:`all_valid_text_timestamps` decides a
whole batch of strings with one regular-expression match and may answer ``False`` for a batch
that is in fact valid (then the caller checks the strings one by one), never ``True`` for one
that is not.
"""

from __future__ import annotations

import calendar
import logging
import math
import re

logger = logging.getLogger(__name__)

MIN_EPOCH_SECONDS = -62_167_219_200
"""0000-01-01T00:00:00Z."""
MAX_EPOCH_SECONDS = 253_402_300_800
"""10000-01-01T00:00:00Z (exclusive)."""

LONGEST_SAFE_DAY = 28
"""Every month has at least this many days, so the bulk check needs no calendar."""

_RFC3339 = re.compile(
    r"(?P<year>[0-9]{4})-(?P<month>0[1-9]|1[0-2])-(?P<day>0[1-9]|[12][0-9]|3[01])"
    r"[Tt](?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?"
    r"(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
)
_SAFE_ITEM = (
    r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])"
    r"[Tt](?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?"
    r"(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
)
_SAFE_BATCH = re.compile(rf"(?:{_SAFE_ITEM}\n)*{_SAFE_ITEM}")
_SEPARATOR = "\n"


def valid_text_timestamp(text: str) -> bool:
    """Whether ``text`` is an RFC 3339 date-time on a real calendar day.

    Examples
    --------
    >>> valid_text_timestamp("2024-02-29T23:59:60.5Z"), valid_text_timestamp("2023-02-29T00:00:00Z")
    (True, False)
    """
    match = _RFC3339.fullmatch(text)
    if match is None:
        return False
    year, month, day = int(match["year"]), int(match["month"]), int(match["day"])
    return day <= calendar.monthrange(year, month)[1] if year > 0 else day <= _days_year_zero(month)


def _days_year_zero(month: int) -> int:
    # calendar refuses year 0; the proleptic Gregorian year 0 is a leap year, like 2000.
    return calendar.monthrange(2000, month)[1]


def valid_epoch_seconds(value: int | float) -> bool:
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
    """``True`` only if every string is a valid timestamp (checked with one match).

    ``False`` means "check them one by one": days 29 to 31 and leap seconds are not decided here.
    """
    if not texts:
        return True
    joined = _SEPARATOR.join(texts)
    if joined.count(_SEPARATOR) != len(texts) - 1:
        return False
    return _SAFE_BATCH.fullmatch(joined) is not None
