"""The whole-batch checks of the orjson tier: each answers for all rows at once, and a failing one
is asked row by row only to find the rows to diagnose precisely."""

from __future__ import annotations

import logging
from itertools import chain
from typing import Any

import orjson

from consumers.decoding.precise import _check_id
from consumers.decoding.scan import count_markers, count_markers_each, count_text_markers
from consumers.decoding.timestamps import all_valid_text_timestamps, valid_timestamp
from consumers.decoding.wire import (
    FEATURES,
    FIXED_FIELD_MARKERS,
    ID,
    LABEL,
    MAX_ID_LENGTH,
    QUOTES_PER_STRING,
    TS,
    InvalidEventError,
    _get_features,
    _get_label,
)

logger = logging.getLogger(__name__)


def _decode_values(values: list[Any]) -> tuple[list[Any], set[int]]:
    """orjson on every value; values it refuses are suspects (``None`` in their place)."""
    loads = orjson.loads
    try:
        return list(map(loads, values)), set()
    except orjson.JSONDecodeError:
        pass
    objs: list[Any] = []
    suspects: set[int] = set()
    for i, value in enumerate(values):
        try:
            objs.append(loads(value))
        except orjson.JSONDecodeError:
            objs.append(None)
            suspects.add(i)
    return objs, suspects


def _with_required_fields(objs: list[Any], suspects: set[int]) -> list[int] | None:
    """Indices of objects with ``features`` and ``label`` (``None``: all of them)."""
    if not suspects:
        try:
            list(map(_get_features, objs))
            list(map(_get_label, objs))
        except (KeyError, TypeError, IndexError):
            pass
        else:
            return None
    candidates: list[int] = []
    for i, obj in enumerate(objs):
        if type(obj) is dict and FEATURES in obj and LABEL in obj:
            candidates.append(i)
        else:
            suspects.add(i)
    return candidates


def _ids_fit(ids: list[Any]) -> bool:
    """Whether every id is a string of acceptable length."""
    if set(map(type, ids)) != {str}:
        return False
    lengths = list(map(len, ids))
    return min(lengths) >= 1 and max(lengths) <= MAX_ID_LENGTH


def _all_valid_ts(stamps: list[Any]) -> bool:
    kinds = set(map(type, stamps))
    if not kinds <= {str, int, float}:
        return False
    if kinds == {str}:
        return all_valid_text_timestamps(stamps)
    return all(map(valid_timestamp, stamps))


def _row_ts_ok(row: dict[str, Any]) -> bool:
    return TS not in row or valid_timestamp(row[TS])


def _strings(labels: list[Any], ids: list[Any], stamps: list[Any]) -> list[str]:
    """Every decoded string value of the rows (the field names are accounted for separately)."""
    label_types = set(map(type, labels))
    if label_types == {int}:
        strings: list[str] = []
    elif label_types == {str}:
        strings = list(labels)
    else:
        strings = [label for label in labels if type(label) is str]
    strings.extend(ids)
    if stamps:
        strings.extend(stamp for stamp in stamps if type(stamp) is str)
    return strings


def _expected_markers(
    keys: int,
    rows: int,
    strings: list[str],
    named_features: list[Any],
    joined_names: bytes | None = None,
) -> int:
    """Marker bytes the decoded rows account for (see :mod:`consumers.decoding.scan`).

    ``joined_names``: the feature names as the encoder joined them
    (:meth:`~learning.encoders.SparseEncoder.join_names`), counted instead of joining the names
    again. The count is the same: the markers are ASCII, no byte of a multi-byte UTF-8 sequence
    is ASCII, and the NUL separator is no marker.
    """
    total = (
        QUOTES_PER_STRING * keys
        + FIXED_FIELD_MARKERS * rows
        + QUOTES_PER_STRING * len(strings)
        + count_text_markers("".join(strings))
    )
    if named_features:
        total += QUOTES_PER_STRING * sum(map(len, named_features))
        if joined_names is None:
            total += count_text_markers("".join(chain.from_iterable(named_features)))
        else:
            total += count_markers([joined_names])
    return total


def _markers_balance(
    values: list[Any],
    rows: list[dict[str, Any]],
    keys: int,
    strings: list[str],
    named_features: list[Any],
    *,
    joined_names: bytes | None,
) -> bool:
    """Whether the raw values hold exactly the marker bytes the rows account for
    (``named_features``: the rows' feature objects when they are name → number, else empty)."""
    try:
        raw = count_markers(values)
    except TypeError:
        return False
    return raw == _expected_markers(keys, len(rows), strings, named_features, joined_names)


def _marker_verdict(values: list[Any], rows: list[dict[str, Any]], named: bool) -> list[bool]:
    if set(map(type, values)) != {bytes}:
        return [type(value) is bytes for value in values]
    found = count_markers_each(values)
    verdict: list[bool] = []
    for count, row in zip(found.tolist(), rows, strict=True):
        ids = [row[ID]] if ID in row else []
        stamps = [row[TS]] if TS in row else []
        strings = _strings([row[LABEL]], ids, stamps)
        features = [row[FEATURES]] if named else []
        verdict.append(count == _expected_markers(len(row), 1, strings, features))
    return verdict


def _row_id_ok(row: dict[str, Any]) -> bool:
    if ID not in row:
        return True
    try:
        _check_id(row[ID])
    except InvalidEventError:
        return False
    return True
