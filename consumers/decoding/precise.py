"""The exact one-record path: strict JSON parsing with the reasons orjson does not give, the id and
ts checks, and the feature checks shared with the HTTP API."""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np
import orjson
from numpy.typing import NDArray

from consumers.decoding.scan import nesting_depth
from consumers.decoding.timestamps import valid_timestamp
from consumers.decoding.wire import (
    BAD_ID,
    BAD_TS,
    DUPLICATE_KEY,
    MAX_DOUBLE_DIGITS,
    MAX_ID_LENGTH,
    MAX_NESTING_DEPTH,
    NOT_JSON,
    NOT_UTF8,
    TOO_DEEP,
    WRONG_TYPE,
    InvalidEventError,
    _clip,
)
from learning.encoders import Encoder, SparseEncoder
from learning.errors import FeatureError
from learning.sparse import CSRBatch

logger = logging.getLogger(__name__)


def validate_features(payload: Any, encoder: Encoder, *, grow: bool = False) -> NDArray[np.float64]:
    """One event's features as the augmented vector x̃, or :class:`~learning.FeatureError`.

    Shared by the consumer and the HTTP API so both refuse the same inputs with the same codes.
    ``grow`` lets a vocabulary encoder learn new names (the consumer does, predictions do not).

    Examples
    --------
    >>> from learning import DenseEncoder
    >>> validate_features([2, -0.25], DenseEncoder(2)).tolist()
    [1.0, 2.0, -0.25]
    >>> validate_features([True, 1], DenseEncoder(2))
    Traceback (most recent call last):
    ...
    learning.errors.FeatureError: boolean_feature: feature 0 is a boolean (True); send 1 or 0
    """
    try:
        return encoder.encode(payload, grow=grow)
    except FeatureError:
        raise
    except (TypeError, ValueError, OverflowError, AttributeError) as exc:
        raise FeatureError(WRONG_TYPE, _clip(f"features cannot be read: {exc}")) from None


def validate_sparse_features(
    payload: Any, encoder: SparseEncoder, *, grow: bool = False
) -> CSRBatch:
    """One event's features as a one-row CSR batch, or :class:`~learning.FeatureError`.

    The sparse twin of :func:`validate_features`, shared the same way by the consumer and the
    HTTP API: the same inputs are refused with the same codes, and the row equals the dense x̃.

    Examples
    --------
    >>> from learning import HashingEncoder
    >>> row = validate_sparse_features({"colour": 2}, HashingEncoder(4))
    >>> row.indices.tolist(), row.values.tolist()
    ([0, 2], [1.0, 2.0])
    >>> validate_sparse_features({"colour": float("nan")}, HashingEncoder(4))
    Traceback (most recent call last):
    ...
    learning.errors.FeatureError: non_finite: feature 'colour' is nan
    """
    try:
        columns, values = encoder.encode_sparse(payload, grow=grow)
    except FeatureError:
        raise
    except (TypeError, ValueError, OverflowError, AttributeError) as exc:
        raise FeatureError(WRONG_TYPE, _clip(f"features cannot be read: {exc}")) from None
    indptr = np.array([0, columns.shape[0]], dtype=np.int64)
    return CSRBatch(indptr=indptr, indices=columns, values=values, dimension=encoder.dimension)


class _DuplicateKeyError(ValueError):
    pass


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKeyError(key)
            seen.add(key)
    return obj


class _NonFiniteTracker:
    """Parse hooks for the lenient parser: remember whether a number was NaN or infinite."""

    def __init__(self) -> None:
        self.seen = False

    def constant(self, text: str) -> float:
        self.seen = True
        return float(text)

    def number(self, text: str) -> float:
        value = float(text)
        if value in (float("inf"), float("-inf")):
            self.seen = True
        return value

    def integer(self, text: str) -> int | float:
        # A double holds at most 309 integer digits; longer integers overflow it (and Python
        # refuses to convert very long digit strings at all).
        if len(text.lstrip("-")) > MAX_DOUBLE_DIGITS:
            self.seen = True
            return float("-inf") if text.startswith("-") else float("inf")
        value = int(text)
        try:
            float(value)
        except OverflowError:
            self.seen = True
        return value


def duplicate_key(text: str) -> str | None:
    """The first key that appears twice in one object of the JSON ``text``, else ``None``.

    ``text`` must already be known to parse (orjson keeps the last of duplicate keys silently,
    so this is the check that HTTP bodies and record values share).

    >>> duplicate_key('{"features": [1], "features": [2]}')
    'features'
    >>> duplicate_key('{"instances": [{"features": {"a": 1, "a": 2}}]}')
    'a'
    >>> duplicate_key('{"features": {"a": 1}, "label": "a"}') is None
    True
    """
    try:
        json.loads(text, object_pairs_hook=_refuse_duplicates)
    except _DuplicateKeyError as exc:
        return str(exc.args[0])
    return None


def parse_event_json(value: object) -> Any:
    """Parse one record value exactly, or raise :class:`InvalidEventError` saying why not.

    orjson decides what is valid JSON; the standard library parser, with hooks, finds duplicate
    keys and tells non-finite numbers (which orjson refuses without saying where) from other
    syntax errors, so that ``NaN`` in ``features`` is reported as ``non_finite``.
    """
    if value is None:
        raise InvalidEventError(NOT_JSON, "the record has no value (a tombstone)")
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidEventError(NOT_JSON, f"the value is {type(value).__name__}, not bytes")
    raw = bytes(value)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidEventError(NOT_UTF8, f"byte {exc.start} is not UTF-8 ({exc.reason})") from None
    depth = nesting_depth(raw)
    if depth > MAX_NESTING_DEPTH:
        raise InvalidEventError(
            TOO_DEEP, f"JSON nested {depth} levels deep (at most {MAX_NESTING_DEPTH})"
        )
    strict_error: orjson.JSONDecodeError | None = None
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        strict_error = exc
    tracker = _NonFiniteTracker()
    try:
        lenient = json.loads(
            text,
            object_pairs_hook=_refuse_duplicates,
            parse_constant=tracker.constant,
            parse_float=tracker.number,
            parse_int=tracker.integer,
        )
    except _DuplicateKeyError as exc:
        raise InvalidEventError(
            DUPLICATE_KEY, _clip(f"key {exc.args[0]!r} appears more than once")
        ) from None
    except (ValueError, RecursionError) as exc:
        raise InvalidEventError(NOT_JSON, _clip(str(strict_error or exc))) from None
    if strict_error is None:
        return parsed
    if tracker.seen:
        return lenient
    raise InvalidEventError(NOT_JSON, _clip(str(strict_error)))


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def _check_id(event_id: object) -> str:
    if type(event_id) is not str:
        raise InvalidEventError(BAD_ID, f"id must be a string, got a JSON {_json_kind(event_id)}")
    if not 1 <= len(event_id) <= MAX_ID_LENGTH:
        raise InvalidEventError(
            BAD_ID, f"id must have 1 to {MAX_ID_LENGTH} characters, got {len(event_id)}"
        )
    return event_id


def _check_ts(ts: object) -> None:
    if not valid_timestamp(ts):
        shown = _clip(repr(ts))
        raise InvalidEventError(
            BAD_TS, f"ts {shown} is neither an RFC 3339 date-time nor epoch seconds"
        )
