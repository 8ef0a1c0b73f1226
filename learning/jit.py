"""The one numba configuration of novikoff's compiled code, for ``learning`` and ``consumers``.

Every compiled function is made by one of the decorators below, which share these flags:

* ``cache=True``: the machine code is cached on disk beside the source (``__pycache__/*.nbi``,
  ``*.nbc``), so a kernel is compiled once per machine, not once per process;
* ``nogil=True``: compiled code runs without the GIL, so the HTTP thread answers while the
  consumer thread learns or decodes;
* no ``fastmath``: the rounding is fixed by the source (see :mod:`learning._kernels`,
  Determinism), so a checkpoint replays bit-identically on another machine.

:func:`jit` is the plain form. :func:`jit_inline` also inlines the function into every compiled
caller, for small per-row helpers (a call between compiled functions costs more than their work on
a sparse row). :func:`jit_no_runtime` compiles without numba's runtime and with numpy's error
model, for byte kernels that never allocate (the JSON reader's): passing an array to a helper then
costs no atomic reference counting (measured: 18 ns per call with the runtime, nothing without).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

import numba

logger = logging.getLogger(__name__)

__all__ = ["CACHE", "NOGIL", "jit", "jit_inline", "jit_no_runtime"]

CACHE: Final = True
"""Every compiled function caches its machine code on disk."""
NOGIL: Final = True
"""Every compiled function runs without the GIL."""

F = TypeVar("F", bound=Callable[..., Any])


def jit(func: F) -> F:
    """Compile ``func`` with :data:`CACHE` and :data:`NOGIL` (typed for mypy)."""
    return cast(F, numba.njit(cache=CACHE, nogil=NOGIL)(func))


def jit_inline(func: F) -> F:
    """:func:`jit`, inlined into each compiled caller (numba's ``inline="always"``)."""
    return cast(F, numba.njit(cache=CACHE, nogil=NOGIL, inline="always")(func))


def jit_no_runtime(func: F) -> F:
    """:func:`jit` without numba's runtime, for kernels that never allocate."""
    compiled = numba.njit(  # type: ignore[call-overload]  # _nrt is not in numba's stubs
        cache=CACHE, nogil=NOGIL, _nrt=False, error_model="numpy"
    )(func)
    return cast(F, compiled)
