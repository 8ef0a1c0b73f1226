"""SplitMix64, the tie-breaking generator, in plain Python.

The same generator runs inside the numba kernels (:mod:`learning._kernels`); this copy lets
tests and tools replay the exact draws of a model without compiled code. Its whole state is one
unsigned 64-bit integer, which is saved with the model so a replay breaks ties identically.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

MASK64 = (1 << 64) - 1
GOLDEN_GAMMA = 0x9E3779B97F4A7C15
MIX_MULTIPLIER_1 = 0xBF58476D1CE4E5B9
MIX_MULTIPLIER_2 = 0x94D049BB133111EB
MIX_SHIFT_1 = 30
MIX_SHIFT_2 = 27
MIX_SHIFT_3 = 31
HALF_WORD = 32


def mix64(z: int) -> int:
    """The SplitMix64 output function (a bijection on 64-bit integers)."""
    z = ((z ^ (z >> MIX_SHIFT_1)) * MIX_MULTIPLIER_1) & MASK64
    z = ((z ^ (z >> MIX_SHIFT_2)) * MIX_MULTIPLIER_2) & MASK64
    return z ^ (z >> MIX_SHIFT_3)


def peek(state: int) -> int:
    """The next output without advancing the state."""
    return mix64((state + GOLDEN_GAMMA) & MASK64)


def advance(state: int) -> int:
    """The state after one draw."""
    return (state + GOLDEN_GAMMA) & MASK64


def choose(draw: int, count: int) -> int:
    """Map a 64-bit draw to ``0 .. count-1`` (multiply-shift on the high 32 bits).

    Examples
    --------
    >>> [choose(peek(state), 3) for state in range(4)]
    [2, 1, 1, 0]
    """
    return ((draw >> HALF_WORD) * count) >> HALF_WORD
