"""The ahead-of-time compiled kernels (learning.aot): numba's results, without numba.

The installed package carries the extensions ``setup.py`` built (``pip install -e '.[dev]'``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import consumers._aot
import learning._aot
from consumers.decoding import scan
from learning import _kernels, aot
from learning.encoders import _murmur
from learning.jit import Deferred

ROOT = Path(__file__).resolve().parents[2]
SEEDS = (0, 1, 2)
EVENTS = 3000
SERVING = {"learning": "serving", "consumers": "serving"}
MISSING = {"learning": "missing", "consumers": "missing"}
REBUILD = "rebuild the compiled kernels: pip install -e '.[dev]'"


def pipeline_run(seed: int, mode: str) -> dict[str, Any]:
    """tests/unit/aot_pipeline_run.py in a fresh interpreter (its module docs)."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.unit.aot_pipeline_run", str(seed), str(EVENTS), mode],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("seed", SEEDS)
def test_pipeline_learns_the_same_without_numba_when_the_extensions_serve(seed: int) -> None:
    ahead = pipeline_run(seed, "aot")
    jit = pipeline_run(seed, "jit")
    assert ahead["status"] == SERVING, f"{REBUILD} (the extensions are not current)"
    assert not ahead["numba"]
    # Control: with the extensions hidden numba serves, and the pipeline imports it.
    assert jit["status"] == MISSING
    assert jit["numba"]
    assert ahead["state"] == jit["state"]
    assert ahead["reports"] == jit["reports"]
    rejected = sum(counts[1] for counts in ahead["reports"][::2])
    learned = sum(counts[0] for counts in ahead["reports"][::2])
    assert rejected > 0  # poison events went through the precise tier
    assert learned > 0


def numba_kernel(kernel: Any) -> Any:
    """numba's dispatcher of a kernel, deferred or already bound (learning.jit, activate)."""
    return kernel.made if isinstance(kernel, Deferred) else kernel


def served(kernel: str) -> aot.Served:
    module, _, name = kernel.rpartition(".")
    found = aot.serving(module, name)
    assert found is not None, f"{kernel} is not served ahead of time"
    return found


finite_or_not = st.floats(allow_nan=True, allow_infinity=True, width=64)


@settings(max_examples=60, deadline=None)
@given(
    values=hnp.arrays(np.float64, st.integers(0, 40), elements=finite_or_not),
    limit=st.floats(0.0, 1e300),
)
def test_first_invalid_value_agrees(values: np.ndarray, limit: float) -> None:
    args = (values, limit)
    ahead = served("learning._kernels.first_invalid_value")
    assert ahead.accepts(args)
    assert ahead.function(*args) == numba_kernel(_kernels.first_invalid_value)(*args)


@settings(max_examples=60, deadline=None)
@given(
    h=st.integers(-(2**31), 2**31 - 1),
    bits=st.integers(0, 24),
)
def test_murmur_bucket_agrees(h: int, bits: int) -> None:
    ahead = served("learning.encoders._murmur.murmur_bucket")
    assert ahead.function(h, 1 << bits) == numba_kernel(_murmur.murmur_bucket)(h, 1 << bits)


json_bytes = st.binary(max_size=80) | st.lists(
    st.sampled_from([b"{", b"}", b"[", b"]", b'"', b"\\", b"null", b"true", b"1", b",", b" "]),
    max_size=40,
).map(b"".join)


@settings(max_examples=60, deadline=None)
@given(value=json_bytes)
def test_structural_scans_agree(value: bytes) -> None:
    data = np.frombuffer(value, dtype=np.uint8)
    depth = served("consumers.decoding.scan._nesting_depth")
    assert depth.function(data) == numba_kernel(scan._nesting_depth)(data)
    padded = value + b" " * (-len(value) % 8)
    words = np.frombuffer(padded, dtype=np.uint64)
    markers = served("consumers.decoding.scan._count_marker_words")
    assert markers.function(words) == numba_kernel(scan._count_marker_words)(words)


def test_a_call_outside_the_exported_types_goes_to_numba() -> None:
    ints = np.array([10], dtype=np.int64)
    ahead = served("learning._kernels.first_invalid_value")
    assert not ahead.accepts((ints, 5.0))
    # Control: the extension trusts its argument types and reads the int64 10 as a double.
    assert ahead.function(ints, 5.0) == -1
    kernel = Deferred(
        _kernels.first_invalid_value.py_func,
        lambda: numba_kernel(_kernels.first_invalid_value),
        {},
    )
    assert kernel(ints, 5.0) == 0
    assert kernel(ints.astype(np.float64), 5.0) == 0


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        (np.zeros(3), True),
        (np.zeros(3, dtype=np.float32), False),
        (np.zeros((3, 1)), False),
        (np.zeros(6)[::2], False),
        (np.zeros(3).astype(">f8"), False),
        ([0.0, 0.0], False),
    ],
)
def test_float_arrays_are_checked(value: Any, accepted: bool) -> None:
    assert aot.argument_check("float64[::1]").accepts(value) is accepted


def test_read_only_arrays_pass_only_where_the_kernel_only_reads() -> None:
    frozen = np.frombuffer(b"abcd", dtype=np.uint8)
    assert aot.argument_check("Array(uint8, 1, 'C', readonly=True)").accepts(frozen)
    assert not aot.argument_check("uint8[::1]").accepts(frozen)
    assert aot.argument_check("uint8[::1]").accepts(frozen.copy())


def test_scalars_are_checked_by_type() -> None:
    assert aot.argument_check("int64").accepts(3)
    assert not aot.argument_check("int64").accepts(True)
    assert not aot.argument_check("int64").accepts(3.0)
    assert aot.argument_check("float64").accepts(3.0)
    assert not aot.argument_check("float64").accepts(3)
    assert aot.argument_check("Bytes(uint8, 1, 'C', readonly=True)").accepts(b"x")
    assert not aot.argument_check("Bytes(uint8, 1, 'C', readonly=True)").accepts(bytearray(b"x"))


@pytest.mark.parametrize("spec", [learning._aot.SPEC, consumers._aot.SPEC])
def test_the_installed_extensions_serve(spec: aot.Spec) -> None:
    assert aot.load(spec)[0] == "serving", REBUILD


def test_an_extension_built_from_other_sources_is_stale() -> None:
    spec = learning._aot.SPEC
    other = aot.Spec(spec.extension, (*spec.sources, "learning.aot"), spec.exports)
    assert aot.load(other) == ("stale", None)
    # Control: the digest is of the named sources.
    assert aot.source_digest(other.sources) != aot.source_digest(spec.sources)


def test_an_absent_extension_is_missing() -> None:
    spec = learning._aot.SPEC
    absent = aot.Spec("learning._no_such_kernels", spec.sources, spec.exports)
    assert aot.load(absent) == ("missing", None)
