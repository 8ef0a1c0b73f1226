"""A compiled reader for the common shape of a dense ``POST /predict`` batch, exact or silent.

:func:`parse_dense_instances` reads ``{"instances": [{"features": [numbers]}, ...]}`` (with an
optional ``"predictor": "name"`` before or after) in one numba pass straight into the feature
matrix, without a Python object per number. It is built from the consumer's compiled JSON
blocks (:mod:`consumers.decoding.fastjson`, exact number conversion included) and, like the
consumer's event parser, accepts only a strict subset of valid requests and returns ``None`` for
anything else, so the caller then takes the general path (orjson and per-instance checks), which
gives the precise error for bad input. A body accepted here is one the general path accepts, with
bit-identical values.

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
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from consumers.decoding.fastjson import (
    CLOSE_BRACE,
    CLOSE_BRACKET,
    COLON,
    COMMA,
    OPEN_BRACE,
    OPEN_BRACKET,
    QUOTE,
    matches,
    plain_string_end,
    powers_of_five,
    read_number_array,
    skip_space,
)
from learning.jit import jit_no_runtime

logger = logging.getLogger(__name__)

NOT_FAST = -1

_INSTANCES_KEY = np.frombuffer(b"instances", dtype=np.uint8)
_PREDICTOR_KEY = np.frombuffer(b"predictor", dtype=np.uint8)
_FEATURES_KEY = np.frombuffer(b"features", dtype=np.uint8)

# The shortest instance, {"features":[0]}, is 16 bytes; each further number adds 2 (",0").
_MIN_INSTANCE_BYTES = 14
_BYTES_PER_NUMBER = 2


@jit_no_runtime
def _key(data: Any, position: int, end: int, word: Any) -> int:  # pragma: no cover - compiled
    """Position after ``"word"`` and its colon (and spaces) at ``position``, else -1."""
    if position >= end or data[position] != QUOTE:
        return -1
    stop = plain_string_end(data, position + 1, end)
    if stop < 0 or not matches(data, position + 1, stop, word):
        return -1
    position = skip_space(data, stop + 1, end)
    if position >= end or data[position] != COLON:
        return -1
    return skip_space(data, position + 1, end)


@jit_no_runtime
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
    if position >= end or data[position] != OPEN_BRACE:
        return -1
    position = _key(data, skip_space(data, position + 1, end), end, _FEATURES_KEY)
    if position < 0:
        return -1
    position = read_number_array(data, position, end, row, offset, n_features, max_abs, high, low)
    if position < 0:
        return -1
    position = skip_space(data, position, end)
    if position >= end or data[position] != CLOSE_BRACE:
        return -1
    return position + 1


@jit_no_runtime
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
    if position >= end or data[position] != OPEN_BRACKET:
        return -1, 0
    position = skip_space(data, position + 1, end)
    rows = 0
    while True:
        if rows >= X.shape[0]:
            return -1, 0
        position = _instance(data, position, end, X[rows], offset, n_features, max_abs, high, low)
        if position < 0:
            return -1, 0
        rows += 1
        position = skip_space(data, position, end)
        if position < end and data[position] == COMMA:
            position = skip_space(data, position + 1, end)
            continue
        if position < end and data[position] == CLOSE_BRACKET:
            return position + 1, rows
        return -1, 0


@jit_no_runtime
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
    position = skip_space(data, 0, end)
    if position >= end or data[position] != OPEN_BRACE:
        return NOT_FAST
    position = skip_space(data, position + 1, end)
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
            if data[position] != QUOTE:
                return NOT_FAST
            stop = plain_string_end(data, position + 1, end)
            if stop < 0:
                return NOT_FAST
            predictor_span[0] = position + 1
            predictor_span[1] = stop
            position = stop + 1
        position = skip_space(data, position, end)
        if position < end and data[position] == COMMA:
            position = skip_space(data, position + 1, end)
            continue
        if position < end and data[position] == CLOSE_BRACE:
            break
        return NOT_FAST
    if rows == NOT_FAST or skip_space(data, position + 1, end) != end:
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
