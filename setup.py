"""Builds the ahead-of-time compiled kernels with the package (see ``learning/aot.py``).

The kernel modules are imported without their packages' ``__init__`` (which import the runtime
dependencies: river, kafka-python, ...): the build environment holds only ``[build-system]
requires``. numba compiles into an empty cache directory, so no cached machine code is linked.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import types
from pathlib import Path

from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent
PACKAGES = ("learning", "learning.encoders", "consumers", "consumers.decoding")
"""The packages whose modules the kernels import, made without running their ``__init__``."""
SPECS = ("learning._aot", "consumers._aot")
"""The modules holding the specs of the extensions (learning.aot.Spec)."""
DICT_WALK = Extension(
    "learning.encoders._dictwalk", ["learning/encoders/_dictwalk.c"], optional=True
)
"""One walk of an event dict from C (learning/encoders/_walk.py; its Python twin serves when it
cannot be built)."""


def bare_packages() -> None:
    for name in PACKAGES:
        package = types.ModuleType(name)
        package.__path__ = [str(ROOT.joinpath(*name.split(".")))]
        sys.modules[name] = package
    encoders = importlib.import_module("learning.encoders._murmur")
    sys.modules["learning.encoders"].__dict__.update(
        murmur3_32=encoders.murmur3_32, murmur_bucket=encoders.murmur_bucket
    )


def extensions() -> list[object]:
    sys.path.insert(0, str(ROOT))
    bare_packages()
    aot = importlib.import_module("learning.aot")
    # Without a C compiler the package installs without them (numba serves, see
    # learning/aot.py); a kernel that numba cannot compile still fails the build.
    built = [aot.extension(importlib.import_module(name).SPEC, optional=True) for name in SPECS]
    return [extension for extension in built if extension is not None] + [DICT_WALK]


with tempfile.TemporaryDirectory(prefix="novikoff-aot-") as cache:
    os.environ["NUMBA_CACHE_DIR"] = cache
    setup(ext_modules=extensions())
