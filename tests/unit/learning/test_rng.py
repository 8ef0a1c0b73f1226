"""The Python and the compiled SplitMix64 are the same generator."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from learning import _kernels, _rng


@given(st.integers(0, 2**64 - 1), st.integers(1, 1000))
def test_python_and_numba_draws_agree(state: int, count: int) -> None:
    compiled_draw = int(_kernels.peek(np.uint64(state)))
    assert compiled_draw == _rng.peek(state)
    assert _kernels.choose(np.uint64(compiled_draw), count) == _rng.choose(compiled_draw, count)
    assert 0 <= _rng.choose(compiled_draw, count) < count


def test_known_splitmix64_outputs() -> None:
    # Reference values of SplitMix64 seeded with 0 (Vigna's splitmix64.c).
    state = 0
    outputs = []
    for _ in range(3):
        outputs.append(_rng.peek(state))
        state = _rng.advance(state)
    assert outputs == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
