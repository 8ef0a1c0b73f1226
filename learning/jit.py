"""The one numba configuration of novikoff's compiled code, for ``learning`` and ``consumers``.

Every compiled function is made by one of the decorators below, which share these flags:

* ``cache=True``: the machine code is cached on disk beside the source (``__pycache__/*.nbi``,
  ``*.nbc``), so a kernel is compiled once per machine, not once per process;
* ``nogil=True`` (all but :func:`jit_held`): compiled code runs without the GIL, so the HTTP
  thread answers while the consumer thread learns or decodes;
* no ``fastmath``: the rounding is fixed by the source (see :mod:`learning._kernels`,
  Determinism), so a checkpoint replays bit-identically on another machine.

:func:`jit` is the plain form. :func:`jit_inline` also inlines the function into every compiled
caller, for small per-row helpers (a call between compiled functions costs more than their work on
a sparse row). :func:`jit_no_runtime` compiles without numba's runtime and with numpy's error
model, for byte kernels that never allocate (the JSON reader's): passing an array to a helper then
costs no atomic reference counting (measured: 18 ns per call with the runtime, nothing without).
:func:`jit_held` keeps the GIL, for the one-event kernels of a river-style call: one call
works a few microseconds at most (one event's row), far below the interpreter's switch interval,
so holding the GIL keeps no other thread waiting long, while releasing and retaking it is a
measurable part of the call (measured: the compiled entry of
:func:`learning._fused.predict_packed` on a 10-value event takes 0.63 µs a call with the GIL
held, 0.71 µs without). :func:`intrinsic` defers a numba ``@intrinsic`` (LLVM IR written by
hand) the same way.

Deferred numba
    Importing numba maps LLVM (about 100 MiB resident) and its first compilation or cache load
    starts LLVM's code generator (about 60 MiB more). So nothing here imports numba when a module
    is imported: each decorator returns a :class:`Deferred`, and numba is imported by
    :func:`activate` on the first use of any deferred object that the ahead-of-time compiled
    kernels do not serve (:mod:`learning.aot`). :func:`activate` then makes every deferred
    object's numba counterpart and binds it, in place of the :class:`Deferred`, to every module
    global of the packages that defined one, so compiled callers see numba's own dispatchers and
    intrinsics (inlining, caching and typing work as with eager decoration). A deferred object
    made after :func:`activate` is numba's object itself.

    Invariant: a kernel gives the same result whichever serves it; an ahead-of-time function is
    called only with arguments of exactly its exported types (:meth:`learning.aot.Export.accepts`),
    any other call goes to numba.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

logger = logging.getLogger(__name__)

__all__ = [
    "BOOL",
    "BOOLS",
    "BYTES",
    "BYTE_BUFFER",
    "CACHE",
    "FLOAT",
    "FLOATS",
    "FLOAT_CUBE",
    "FLOAT_MATRIX",
    "INT",
    "INTS",
    "INT_MATRIX",
    "NOGIL",
    "READ_BYTES",
    "READ_WORDS",
    "UINTS",
    "Deferred",
    "activate",
    "intrinsic",
    "jit",
    "jit_held",
    "jit_inline",
    "jit_no_runtime",
    "numba_active",
    "numba_types",
]

CACHE: Final = True
"""Every compiled function caches its machine code on disk."""
NOGIL: Final = True
"""Every compiled function but :func:`jit_held`'s runs without the GIL."""
JIT_OPTIONS: Final = {"cache": CACHE, "nogil": NOGIL}
"""numba's options of :func:`jit` (the others add to them)."""
INLINE_OPTIONS: Final = {**JIT_OPTIONS, "inline": "always"}
"""numba's options of :func:`jit_inline`."""
HELD_OPTIONS: Final = {"cache": CACHE}
"""numba's options of :func:`jit_held` (the GIL held)."""
NO_RUNTIME_OPTIONS: Final = {**JIT_OPTIONS, "_nrt": False, "error_model": "numpy"}
"""numba's options of :func:`jit_no_runtime`."""

INT: Final = "int64"
FLOAT: Final = "float64"
BOOL: Final = "boolean"
INTS: Final = "int64[::1]"
UINTS: Final = "uint64[::1]"
FLOATS: Final = "float64[::1]"
BOOLS: Final = "boolean[::1]"
INT_MATRIX: Final = "int64[:, ::1]"
FLOAT_MATRIX: Final = "float64[:, ::1]"
FLOAT_CUBE: Final = "float64[:, :, ::1]"
READ_BYTES: Final = "Array(uint8, 1, 'C', readonly=True)"
READ_WORDS: Final = "Array(uint64, 1, 'C', readonly=True)"
BYTES: Final = "Bytes(uint8, 1, 'C', readonly=True)"
BYTE_BUFFER: Final = "uint8[::1]"
"""numba's types of kernel arguments, as signature strings (:func:`numba_types` reads them):
scalars, writable C-contiguous arrays, read-only arrays, a ``bytes`` object and a writable
byte buffer (a ``bytearray`` seen by numpy)."""

F = TypeVar("F", bound=Callable[..., Any])

_UNRESOLVED: Final = object()
"""A :class:`Deferred`'s ahead-of-time function before it was looked up."""
_registry: list[Deferred] = []
_lock = threading.RLock()
_active: list[bool] = [False]


def numba_active() -> bool:
    """Whether :func:`activate` ran: numba is imported and serves every rebound kernel."""
    return _active[0]


class Deferred:
    """A numba object (dispatcher or intrinsic) made on first use (module docs).

    Calling it calls the ahead-of-time compiled function of the same kernel when
    :mod:`learning.aot` serves one and the arguments have its exported types, else numba's
    object (:func:`activate` first). Any other attribute is numba's object's.
    """

    def __init__(
        self, func: Callable[..., Any], make: Callable[[], Any], options: dict[str, Any]
    ) -> None:
        functools.update_wrapper(self, func)
        self.py_func = func
        self.options = options
        """numba's options of the kernel (empty for an intrinsic)."""
        self._make = make
        self._made: Any = None
        self._ahead: Any = _UNRESOLVED

    @property
    def made(self) -> Any:
        """numba's object (imports numba: :func:`activate`)."""
        if self._made is None:
            activate(f"{self.__module__}.{self.__qualname__}")
            self._build()
        return self._made

    def _build(self) -> None:
        if self._made is None:
            self._made = self._make()

    @property
    def _numba_type_(self) -> Any:
        # numba types a global or free variable holding this object as its numba object.
        from numba.core.registry import cpu_target  # noqa: PLC0415 - numba on first use

        context = cpu_target.typing_context
        context.refresh()
        return context.resolve_value_type(self.made)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in {"_made", "_make", "_ahead", "options", "py_func"}:
            raise AttributeError(name)
        return getattr(self.made, name)

    def __call__(self, *args: Any) -> Any:
        ahead = self._ahead
        if ahead is _UNRESOLVED:
            ahead = self._ahead = _ahead_of_time(self.py_func)
        if ahead is not None and ahead.accepts(args):
            return ahead.function(*args)
        return self.made(*args)

    def compiled(self, signature: tuple[str, ...]) -> Callable[..., Any]:
        """The machine code for exactly the argument types ``signature``: the ahead-of-time
        function when its export has those types, else numba's (``Dispatcher.compile``)."""
        ahead = self._ahead
        if ahead is _UNRESOLVED:
            ahead = self._ahead = _ahead_of_time(self.py_func)
        if ahead is not None and ahead.export.args == signature:
            return cast(Callable[..., Any], ahead.function)
        return cast(Callable[..., Any], self.made.compile(numba_types(signature)))

    def __repr__(self) -> str:
        return f"Deferred({self.__module__}.{self.__qualname__})"


def _ahead_of_time(func: Callable[..., Any]) -> Any:
    """The ahead-of-time export serving ``func`` (:func:`learning.aot.serving`), or None."""
    aot = importlib.import_module("learning.aot")
    return aot.serving(func.__module__, func.__qualname__)


def _defer(func: Callable[..., Any], make: Callable[[], Any], options: dict[str, Any]) -> Any:
    with _lock:
        if _active[0]:
            return make()
        deferred = Deferred(func, make, options)
        _registry.append(deferred)
        return deferred


def activate(first_use: str = "") -> None:
    """Import numba, make every deferred object and bind it where its :class:`Deferred` was
    (``first_use``: the object whose use needs numba, for the log).

    The binding covers the module globals of every package that defined a deferred object
    (compiled code reads its callees from its module's globals); other references keep the
    :class:`Deferred`, which forwards to numba's object.
    """
    with _lock:
        if _active[0]:
            return
        for deferred in _registry:
            deferred._build()
        _active[0] = True
        made = {id(deferred): deferred._made for deferred in _registry}
        roots = {deferred.__module__.split(".")[0] for deferred in _registry}
        for name, module in list(sys.modules.items()):
            if module is None or name.split(".")[0] not in roots:
                continue
            namespace = vars(module)
            for key, value in list(namespace.items()):
                if type(value) is Deferred:
                    namespace[key] = made[id(value)]
        logger.info("numba imported for %s: it serves %d deferred objects", first_use, len(made))


def _njit(func: Callable[..., Any], options: dict[str, Any]) -> Any:
    import numba  # noqa: PLC0415 - numba on first use

    return numba.njit(**options)(func)


def jit(func: F) -> F:
    """Compile ``func`` with :data:`CACHE` and :data:`NOGIL` (typed for mypy)."""
    return cast(F, _defer(func, lambda: _njit(func, JIT_OPTIONS), JIT_OPTIONS))


def jit_inline(func: F) -> F:
    """:func:`jit`, inlined into each compiled caller (numba's ``inline="always"``)."""
    return cast(F, _defer(func, lambda: _njit(func, INLINE_OPTIONS), INLINE_OPTIONS))


def jit_held(func: F) -> F:
    """:func:`jit` with the GIL held, for one-event kernels (module docs)."""
    return cast(F, _defer(func, lambda: _njit(func, HELD_OPTIONS), HELD_OPTIONS))


def jit_no_runtime(func: F) -> F:
    """:func:`jit` without numba's runtime, for kernels that never allocate."""
    return cast(F, _defer(func, lambda: _njit(func, NO_RUNTIME_OPTIONS), NO_RUNTIME_OPTIONS))


def numba_types(kinds: tuple[Any, ...]) -> tuple[Any, ...]:
    """numba's types of ``kinds``: signature strings (``"int64[::1]"``) or numba types."""
    sigutils: Any = importlib.import_module("numba.core.sigutils")
    return tuple(
        sigutils.normalize_signature(f"({kind},)")[0][0] if isinstance(kind, str) else kind
        for kind in kinds
    )


def _make_intrinsic(func: Callable[..., Any]) -> Any:
    from numba.core.extending import intrinsic as numba_intrinsic  # noqa: PLC0415 - numba on first use

    return numba_intrinsic(func)


def intrinsic(func: Callable[..., Any]) -> Any:
    """numba's ``@intrinsic`` of ``func`` (its typing and LLVM code), deferred like :func:`jit`."""
    return _defer(func, lambda: _make_intrinsic(func), {})
