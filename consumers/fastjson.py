"""Compiled JSON reading blocks, for exact-or-silent readers outside the event decoder.

The event decoder's compiled tier (:func:`consumers.events.EventDecoder.decode_batch`) is built
from these numba kernels; they are public so that another compiled reader, such as the service's
``POST /predict`` body reader, converts numbers and recognises tokens exactly as the decoder does
instead of repeating the code. Every kernel reads a ``uint8`` array ``data`` between ``position``
and ``end`` and answers ``-1`` where it cannot decide; the caller then takes its general path.

Kernels (call them from code compiled with :func:`kernel`)
    :func:`skip_space`, :func:`plain_string_end`, :func:`matches`, :func:`parse_number` (a JSON
    number, bit-identical to ``float()`` and orjson) and :func:`read_number_array` (an array of an
    exact number of bounded numbers, into a row of a matrix). :func:`parse_number` and
    :func:`read_number_array` take the ``(high, low)`` tables of :func:`powers_of_five`.
Bytes
    The structural bytes of the grammar: :data:`QUOTE`, :data:`COMMA`, :data:`COLON`,
    :data:`OPEN_BRACE`, :data:`CLOSE_BRACE`, :data:`OPEN_BRACKET`, :data:`CLOSE_BRACKET`.
Plain Python
    :func:`count_markers`, the SWAR count of the bytes ``"``, ``u``, ``l`` and ``\\`` that proves
    a parsed body holds no string, boolean, null or escape beyond the ones it accounts for.
"""

from __future__ import annotations

import logging

from consumers._fastjson import (
    CLOSE_BRACE,
    CLOSE_BRACKET,
    COLON,
    COMMA,
    OPEN_BRACE,
    OPEN_BRACKET,
    QUOTE,
    kernel,
    matches,
    parse_number,
    plain_string_end,
    powers_of_five,
    read_number_array,
    skip_space,
)
from consumers._scan import count_markers

logger = logging.getLogger(__name__)

__all__ = [
    "CLOSE_BRACE",
    "CLOSE_BRACKET",
    "COLON",
    "COMMA",
    "OPEN_BRACE",
    "OPEN_BRACKET",
    "QUOTE",
    "count_markers",
    "kernel",
    "matches",
    "parse_number",
    "plain_string_end",
    "powers_of_five",
    "read_number_array",
    "skip_space",
]
