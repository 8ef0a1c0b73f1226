"""A compiled reader for the common shape of a dense ``POST /predict`` batch, exact or silent.

:func:`parse_dense_instances` reads ``{"instances": [{"features": [numbers]}, ...]}`` (with an
optional ``"predictor": "name"`` before or after) in one numba pass straight into the feature
matrix, without a Python object per number. Like the consumer's compiled event parser
(:mod:`consumers._fastjson`, whose exact number conversion it reuses) it accepts only a strict
subset of valid requests and returns ``None`` for anything else, so the caller then takes the
general path (orjson and per-instance checks), which gives the precise error for bad input. A
body accepted here is one the general path accepts, with bit-identical values.

Accepted here
    ASCII-only bodies: one object with the key ``instances`` (an array of 1 to ``max_instances``
    objects, each with the single key ``features``: an array of exactly ``n_features`` JSON
    numbers within ±``max_abs``) and optionally ``predictor`` (a string without escapes), each key
    at most once, JSON whitespace anywhere allowed, nothing after the closing brace.
Left to the general path
    Anything else: other or repeated keys, escapes, non-ASCII bytes, booleans, nulls, numbers out
    of range or not decided exactly by the fast conversion, empty or oversized batches, trailing
    bytes, and so on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numba
import numpy as np
from numpy.typing import NDArray

from consumers._fastjson import parse_number, powers_of_five

logger = logging.getLogger(__name__)

NOT_FAST = -1

_QUOTE = 0x22
_BACKSLASH = 0x5C
_COMMA = 0x2C
_COLON = 0x3A
_OPEN_BRACE = 0x7B
_CLOSE_BRACE = 0x7D
_OPEN_BRACKET = 0x5B
_CLOSE_BRACKET = 0x5D
_SPACE = 0x20
_TAB = 0x09
_NEWLINE = 0x0A
_RETURN = 0x0D
_LAST_ASCII = 0x7E

_INSTANCES_KEY = np.frombuffer(b"instances", dtype=np.uint8)
_PREDICTOR_KEY = np.frombuffer(b"predictor", dtype=np.uint8)
_FEATURES_KEY = np.frombuffer(b"features", dtype=np.uint8)

# The shortest instance, {"features":[0]}, is 16 bytes; each further number adds 2 (",0").
_MIN_INSTANCE_BYTES = 14
_BYTES_PER_NUMBER = 2

_Function = TypeVar("_Function", bound=Callable[..., Any])


def _kernel(function: _Function) -> _Function:
    """Compile with numba, without its runtime (these kernels never allocate)."""
    compiled = numba.njit(  # type: ignore[call-overload]
        nogil=True, cache=True, _nrt=False, error_model="numpy"
    )(function)
    return cast(_Function, compiled)


@_kernel
def _skip_space(data: Any, position: int, end: int) -> int:  # pragma: no cover - compiled
    while position < end:
        byte = data[position]
        if byte != _SPACE and byte != _TAB and byte != _NEWLINE and byte != _RETURN:  # noqa: PLR1714
            break
        position += 1
    return position


@_kernel
def _plain_string_end(data: Any, position: int, end: int) -> int:  # pragma: no cover - compiled
    """Index of the closing quote of a printable-ASCII string without escapes, else -1."""
    while position < end:
        byte = data[position]
        if byte == _QUOTE:
            return position
        if byte < _SPACE or byte > _LAST_ASCII or byte == _BACKSLASH:
            return -1
        position += 1
    return -1


@_kernel
def _is_key(data: Any, start: int, stop: int, word: Any) -> bool:  # pragma: no cover - compiled
    if stop - start != word.shape[0]:
        return False
    for i in range(word.shape[0]):  # noqa: SIM110 - a plain loop compiles to a tight loop
        if data[start + i] != word[i]:
            return False
    return True


@_kernel
def _key(data: Any, position: int, end: int, word: Any) -> int:  # pragma: no cover - compiled
    """Position after ``"word"`` and its colon (and spaces) at ``position``, else -1."""
    if position >= end or data[position] != _QUOTE:
        return -1
    stop = _plain_string_end(data, position + 1, end)
    if stop < 0 or not _is_key(data, position + 1, stop, word):
        return -1
    position = _skip_space(data, stop + 1, end)
    if position >= end or data[position] != _COLON:
        return -1
    return _skip_space(data, position + 1, end)


@_kernel
def _instance(  # noqa: PLR0917 - numba kernels take positional arrays
    data: Any,
    position: int,
    end: int,
    row: Any,
    offset: int,
    n_features: int,
    max_abs: float,
    high: Any,
    low: Any,
) -> int:  # pragma: no cover - compiled
    """Read ``{"features": [numbers]}`` into ``row[offset:]``; the position after it, else -1."""
    if position >= end or data[position] != _OPEN_BRACE:
        return -1
    position = _key(data, _skip_space(data, position + 1, end), end, _FEATURES_KEY)
    if position < 0 or position >= end or data[position] != _OPEN_BRACKET:
        return -1
    position = _skip_space(data, position + 1, end)
    count = 0
    while True:
        if count >= n_features:
            return -1
        position, value, _ = parse_number(data, position, end, high, low)
        if position < 0 or not (-max_abs <= value <= max_abs):
            return -1
        row[offset + count] = value
        count += 1
        position = _skip_space(data, position, end)
        if position < end and data[position] == _COMMA:
            position = _skip_space(data, position + 1, end)
            continue
        if position < end and data[position] == _CLOSE_BRACKET:
            break
        return -1
    if count != n_features:
        return -1
    position = _skip_space(data, position + 1, end)
    if position >= end or data[position] != _CLOSE_BRACE:
        return -1
    return position + 1


@_kernel
def _instances(  # noqa: PLR0917 - numba kernels take positional arrays
    data: Any,
    position: int,
    end: int,
    X: Any,
    offset: int,
    n_features: int,
    max_abs: float,
    high: Any,
    low: Any,
) -> tuple[int, int]:  # pragma: no cover - compiled
    """Read the instances array into ``X``; (position after it, rows), or (-1, 0)."""
    if position >= end or data[position] != _OPEN_BRACKET:
        return -1, 0
    position = _skip_space(data, position + 1, end)
    rows = 0
    while True:
        if rows >= X.shape[0]:
            return -1, 0
        position = _instance(data, position, end, X[rows], offset, n_features, max_abs, high, low)
        if position < 0:
            return -1, 0
        rows += 1
        position = _skip_space(data, position, end)
        if position < end and data[position] == _COMMA:
            position = _skip_space(data, position + 1, end)
            continue
        if position < end and data[position] == _CLOSE_BRACKET:
            return position + 1, rows
        return -1, 0


@_kernel
def _parse_body(  # noqa: PLR0917 - numba kernels take positional arrays
    data: Any,
    X: Any,
    bias: bool,
    n_features: int,
    max_abs: float,
    high: Any,
    low: Any,
    predictor_span: Any,
) -> int:  # pragma: no cover - compiled
    """Rows read into ``X``, or :data:`NOT_FAST`; ``predictor_span`` gets the name's bytes."""
    end = data.shape[0]
    offset = 1 if bias else 0
    rows = NOT_FAST
    predictor_span[0] = -1
    predictor_span[1] = -1
    position = _skip_space(data, 0, end)
    if position >= end or data[position] != _OPEN_BRACE:
        return NOT_FAST
    position = _skip_space(data, position + 1, end)
    while True:
        after_instances = _key(data, position, end, _INSTANCES_KEY)
        if after_instances >= 0:
            if rows != NOT_FAST:
                return NOT_FAST
            position, rows = _instances(
                data, after_instances, end, X, offset, n_features, max_abs, high, low
            )
            if position < 0:
                return NOT_FAST
        else:
            position = _key(data, position, end, _PREDICTOR_KEY)
            if position < 0 or position >= end or predictor_span[0] >= 0:
                return NOT_FAST
            if data[position] != _QUOTE:
                return NOT_FAST
            stop = _plain_string_end(data, position + 1, end)
            if stop < 0:
                return NOT_FAST
            predictor_span[0] = position + 1
            predictor_span[1] = stop
            position = stop + 1
        position = _skip_space(data, position, end)
        if position < end and data[position] == _COMMA:
            position = _skip_space(data, position + 1, end)
            continue
        if position < end and data[position] == _CLOSE_BRACE:
            break
        return NOT_FAST
    if rows == NOT_FAST or _skip_space(data, position + 1, end) != end:
        return NOT_FAST
    if bias:
        for i in range(rows):
            X[i, 0] = 1.0
    return rows


@dataclass(frozen=True, slots=True)
class DenseInstances:
    """A batch body read by :func:`parse_dense_instances`.

    Attributes
    ----------
    X
        The augmented feature vectors x̃ (bias first when the encoder has one), one row each.
    predictor
        The ``predictor`` field when the body has one (unchecked: the caller validates it).
    """

    X: NDArray[np.float64]
    predictor: str | None


def parse_dense_instances(
    body: bytes, *, n_features: int, bias: bool, max_abs: float, max_instances: int
) -> DenseInstances | None:
    """Read a dense batch body with the compiled reader, or ``None`` (see the module docs).

    Examples
    --------
    >>> batch = parse_dense_instances(
    ...     b'{"instances": [{"features": [2, -0.25]}], "predictor": "last"}',
    ...     n_features=2, bias=True, max_abs=1e100, max_instances=10)
    >>> batch.X.tolist(), batch.predictor
    ([[1.0, 2.0, -0.25]], 'last')
    >>> parse_dense_instances(b'{"instances": [{"features": [true, 1]}]}',
    ...     n_features=2, bias=True, max_abs=1e100, max_instances=10) is None
    True
    """
    width = n_features + (1 if bias else 0)
    smallest = _MIN_INSTANCE_BYTES + _BYTES_PER_NUMBER * n_features
    capacity = min(max_instances, len(body) // smallest + 1)
    X = np.empty((capacity, width), dtype=np.float64)
    span = np.empty(2, dtype=np.int64)
    high, low = powers_of_five()
    rows = _parse_body(
        np.frombuffer(body, dtype=np.uint8), X, bias, n_features, max_abs, high, low, span
    )
    if rows <= 0:
        return None
    start, stop = int(span[0]), int(span[1])
    predictor = body[start:stop].decode("ascii") if start >= 0 else None
    return DenseInstances(X[:rows], predictor)
