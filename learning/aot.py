"""Ahead-of-time compiled kernels: the ones the ingest pipeline calls, built with the package.

A package whose kernels the ingest pipeline calls from Python names them in a :class:`Spec`
(``learning._aot.SPEC``, ``consumers._aot.SPEC``: the module ``_aot`` of the package that defines
the kernel). ``setup.py`` compiles each spec's kernels with ``numba.pycc`` into one extension
module (:func:`extension`) when the package is installed, with the digest of the kernels' source
modules (:func:`source_digest`) compiled in. At run time a :class:`learning.jit.Deferred` kernel
asks :func:`serving` for its function: the extension's, when the extension is present and was built
from the same sources, else None and numba compiles the kernel on first use. Either way the
results are the same: the extension compiles the same source with the same numba options.

The pipeline process then never imports numba (about 160 MiB resident with LLVM's code
generator). :func:`status` says, per spec, whether its extension serves (``"serving"``) or not
(``"missing"``, ``"stale"``); :func:`serving` logs it once per spec.

Argument types are written as numba's signature strings: ``int64``, ``float64``, ``boolean``;
``int64[::1]`` (a writable C-contiguous array of one dimension), ``float64[:, ::1]`` (two); and
``Array(uint8, 1, 'C', readonly=True)`` (an array the kernel only reads);
``Bytes(uint8, 1, 'C', readonly=True)`` (a ``bytes`` object). An extension function
trusts its arguments' types (numba's dispatcher checks them, the extension does not), so
:meth:`Export.accepts` checks them on every call and any other call goes to numba.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import importlib
import importlib.metadata
import importlib.util
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["Export", "Spec", "extension", "serving", "source_digest", "status"]

SPEC_MODULE: Final = "_aot"
"""The module of a package that holds its :class:`Spec` (as ``SPEC``)."""
DIGEST_SYMBOL: Final = "source_digest"
"""The extension's function returning the digest it was built from."""
DIGEST_BITS: Final = 63
"""Bits of the sha-256 of the sources an extension keeps (a positive int64)."""
COMPILER: Final = "numba"
"""The distribution whose version the digest includes (it compiles both ways)."""
CPU_INFO: Final = Path("/proc/cpuinfo")
CPU_FLAGS: Final = "flags"
"""The line of :data:`CPU_INFO` naming the CPU's features."""
TARGET_CPU: Final = "host"
"""The CPU the extension is compiled for: the building machine's, as numba compiles for the
machine it runs on (the digest includes the CPU's features, so another CPU finds it stale)."""
Status = Literal["serving", "missing", "stale"]

_NUMPY_DTYPES: Final = {
    "boolean": np.dtype(np.bool_),
    "int64": np.dtype(np.int64),
    "uint64": np.dtype(np.uint64),
    "uint8": np.dtype(np.uint8),
    "float64": np.dtype(np.float64),
}
_SCALARS: Final[dict[str, tuple[type, ...]]] = {
    "int64": (int, np.int64),
    "float64": (float, np.float64),
    "boolean": (bool, np.bool_),
    "Bytes(uint8, 1, 'C', readonly=True)": (bytes,),
}
_WRITABLE_ARRAY = re.compile(r"^(\w+)\[((?::, )*)::1\]$")
_READ_ONLY_ARRAY = re.compile(r"^Array\((\w+), (\d), 'C', readonly=True\)$")


@dataclass(frozen=True, slots=True)
class _ArrayCheck:
    dtype: np.dtype[Any]
    ndim: int
    writable: bool

    def accepts(self, value: Any) -> bool:
        if type(value) is not np.ndarray:
            return False
        dtype = value.dtype
        if not (dtype is self.dtype or dtype == self.dtype) or value.ndim != self.ndim:
            return False
        flags = value.flags
        if self.writable:
            return bool(flags.carray)  # C-contiguous, aligned and writable
        return bool(flags.c_contiguous and flags.aligned)


@dataclass(frozen=True, slots=True)
class _ScalarCheck:
    kinds: tuple[type, ...]

    def accepts(self, value: Any) -> bool:
        return type(value) in self.kinds


def argument_check(numba_type: str) -> _ArrayCheck | _ScalarCheck:
    """What a Python value must be to have the numba type ``numba_type`` (module docs).

    >>> argument_check("float64[:, ::1]")
    _ArrayCheck(dtype=dtype('float64'), ndim=2, writable=True)
    >>> argument_check("int64").accepts(True)
    False
    """
    if numba_type in _SCALARS:
        return _ScalarCheck(_SCALARS[numba_type])
    writable = _WRITABLE_ARRAY.match(numba_type)
    if writable is not None:
        return _ArrayCheck(_NUMPY_DTYPES[writable[1]], writable[2].count(":") + 1, writable=True)
    read_only = _READ_ONLY_ARRAY.match(numba_type)
    if read_only is not None:
        return _ArrayCheck(_NUMPY_DTYPES[read_only[1]], int(read_only[2]), writable=False)
    raise ValueError(f"no ahead-of-time argument type {numba_type!r}")


@dataclass(frozen=True)
class Export:
    """One kernel an extension exports: ``module.qualname`` and its numba signature."""

    kernel: str
    args: tuple[str, ...]
    result: str
    _plan: tuple[tuple[Any, int, bool, tuple[type, ...]], ...] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        plan: list[tuple[Any, int, bool, tuple[type, ...]]] = []
        for kind in self.args:
            check = argument_check(kind)
            if isinstance(check, _ArrayCheck):
                plan.append((check.dtype, check.ndim, check.writable, ()))
            else:
                plan.append((None, 0, False, check.kinds))
        object.__setattr__(self, "_plan", tuple(plan))

    @property
    def symbol(self) -> str:
        """The extension's name of the function (the kernel's path, dots as underscores)."""
        return self.kernel.replace(".", "_")

    @property
    def signature(self) -> str:
        """numba's signature string, as ``numba.pycc`` compiles it."""
        return f"{self.result}({', '.join(self.args)})"

    def accepts(self, args: Sequence[Any]) -> bool:
        """Whether ``args`` have exactly the exported types (else numba serves the call).

        :func:`argument_check`'s checks, inlined: this runs on every call (about 0.3 µs per
        argument, measured, against about 0.5 µs through the check objects).
        """
        plan = self._plan
        if len(args) != len(plan):
            return False
        for (dtype, ndim, writable, kinds), value in zip(plan, args, strict=True):
            if dtype is None:
                if type(value) not in kinds:
                    return False
                continue
            if type(value) is not np.ndarray or value.ndim != ndim:
                return False
            found = value.dtype
            if found is not dtype and found != dtype:
                return False
            flags = value.flags
            if not (flags.carray if writable else flags.c_contiguous and flags.aligned):
                return False
        return True


@dataclass(frozen=True)
class Spec:
    """One extension module: its import name, the modules its kernels compile from, exports.

    ``sources`` must name every module whose source any exported kernel compiles, callees
    included (:func:`extension` checks it): the digest covers exactly those files.
    """

    extension: str
    sources: tuple[str, ...]
    exports: tuple[Export, ...]


@dataclass(frozen=True)
class Served:
    """An extension's function for one kernel, with the export whose types it takes."""

    export: Export
    function: Callable[..., Any]

    def accepts(self, args: Sequence[Any]) -> bool:
        """:meth:`Export.accepts`."""
        return self.export.accepts(args)


def cpu_features() -> bytes:
    """The running CPU's feature flags (Linux's ``/proc/cpuinfo``; empty where there is none)."""
    try:
        text = CPU_INFO.read_text(encoding="ascii", errors="replace")
    except OSError:
        return b""
    for line in text.splitlines():
        if line.startswith(CPU_FLAGS):
            return line.encode()
    return b""


def source_digest(sources: Sequence[str]) -> int:
    """The digest of the named modules' source files, the compiler's version and the CPU's
    features (:data:`TARGET_CPU`), as a positive int64."""
    digest = hashlib.sha256(importlib.metadata.version(COMPILER).encode())
    digest.update(cpu_features())
    for name in sorted(sources):
        found = importlib.util.find_spec(name)
        if found is None or found.origin is None:
            raise ValueError(f"no source file for module {name}")
        digest.update(name.encode())
        digest.update(Path(found.origin).read_bytes())
    return int.from_bytes(digest.digest(), "big") >> (8 * digest.digest_size - DIGEST_BITS)


def load(spec: Spec) -> tuple[Status, Any]:
    """``spec``'s extension module and whether it serves: present and built from the sources."""
    try:
        module = importlib.import_module(spec.extension)
    except ImportError:
        return "missing", None
    if getattr(module, DIGEST_SYMBOL)() != source_digest(spec.sources):
        return "stale", None
    return "serving", module


@functools.cache
def _loaded(package: str) -> tuple[Spec | None, Status, Any]:
    try:
        spec: Spec = importlib.import_module(f"{package}.{SPEC_MODULE}").SPEC
    except ModuleNotFoundError:
        return None, "missing", None
    state, module = load(spec)
    if state == "serving":
        logger.info("ahead-of-time kernels serve: %s", spec.extension)
    else:
        logger.info("ahead-of-time kernels %s (%s): numba compiles them", state, spec.extension)
    return spec, state, module


def status(package: str) -> Status:
    """Whether ``package``'s extension serves its kernels (module docs)."""
    return _loaded(package)[1]


def serving(module: str, qualname: str) -> Served | None:
    """The extension function serving kernel ``module.qualname``, or None (numba serves it)."""
    spec, _, extension_module = _loaded(module.split(".", maxsplit=1)[0])
    if spec is None or extension_module is None:
        return None
    kernel = f"{module}.{qualname}"
    for export in spec.exports:
        if export.kernel == kernel:
            return Served(export, getattr(extension_module, export.symbol))
    return None


def extension(spec: Spec, **options: Any) -> Any:
    """The setuptools extension compiling ``spec``'s kernels (imports numba; ``setup.py`` only),
    or None where there is no C compiler (numba then serves the kernels).

    Each kernel is compiled with its own numba options (:mod:`learning.jit`): ``nogil`` releases
    the GIL, the error model and runtime are the kernel's. The compilation must not load numba's
    disk cache (cached machine code cannot be linked into the extension): ``setup.py`` points
    ``NUMBA_CACHE_DIR`` to an empty directory.
    """
    if not importlib.import_module("numba.pycc.platform").external_compiler_works():
        logger.warning("no C compiler: %s is not built (numba serves)", spec.extension)
        return None
    pycc: Any = importlib.import_module("numba.pycc")
    compiler: Any = importlib.import_module("numba.pycc.compiler")
    dispatcher_type: type = importlib.import_module("numba.core.registry").CPUDispatcher
    package, _, name = spec.extension.rpartition(".")
    cc = pycc.CC(name, source_module=f"{package}.{SPEC_MODULE}")
    cc.target_cpu = TARGET_CPU
    options_of: dict[Callable[..., Any], dict[str, Any]] = {}
    for export in spec.exports:
        module_name, _, qualname = export.kernel.rpartition(".")
        deferred = getattr(importlib.import_module(module_name), qualname)
        options_of[deferred.py_func] = deferred.options
        cc.export(export.symbol, export.signature)(deferred.py_func)
    digest = source_digest(spec.sources)
    cc.export(DIGEST_SYMBOL, "int64()")(lambda: digest)
    compile_extra = compiler.compile_extra

    def compile_with_options(*args: Any, **kwargs: Any) -> Any:
        flags = args[5]
        kernel_options = options_of.get(args[2], {})
        flags.release_gil = kernel_options.get("nogil", False)
        flags.error_model = kernel_options.get("error_model", "python")
        return compile_extra(*args, **kwargs)

    compiler.compile_extra = compile_with_options
    built = cc.distutils_extension(**options)
    prepare = built._prepare_object_files

    def prepare_and_check(build_ext: Any) -> Any:
        before = _compiled_modules(dispatcher_type)
        objects = prepare(build_ext)
        _check_sources(spec, _compiled_modules(dispatcher_type) - before)
        return objects

    built._prepare_object_files = prepare_and_check
    return built


def _compiled_modules(dispatcher_type: type) -> set[tuple[str, int]]:
    """The modules of the kernels numba has compiled so far, with each kernel's identity."""
    kernels: list[Any] = [item for item in gc.get_objects() if isinstance(item, dispatcher_type)]
    return {(item.py_func.__module__, id(item)) for item in kernels if item.overloads}


def _check_sources(spec: Spec, compiled: set[tuple[str, int]]) -> None:
    """Fail the build when a kernel compiled for ``spec`` is in a module not among its sources.

    A callee compiled for an earlier spec is not compiled again: a module both specs' kernels
    use must be listed in both (``learning._kernels``, ``learning.jit``).
    """
    modules = {name for name, _ in compiled}
    modules |= {export.kernel.rpartition(".")[0] for export in spec.exports}
    ours = {name.split(".")[0] for name in spec.sources}
    missing = {name for name in modules if name.split(".")[0] in ours} - set(spec.sources)
    if missing:
        raise RuntimeError(f"{spec.extension}: kernels of {sorted(missing)} not in its sources")
