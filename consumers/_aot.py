"""The kernel of ``consumers`` the ingest pipeline calls from Python, compiled ahead of time.

The extension ``consumers._aot_kernels`` (:mod:`learning.aot`) is built from this spec by
``setup.py``: the hashed bag-of-words reader (:mod:`consumers.decoding.fastsparse`) and the
structural scans of the batches it refuses (:mod:`consumers.decoding.scan`), with the argument
types the pipeline passes.
"""

from __future__ import annotations

from learning.aot import Export, Spec
from learning.jit import FLOAT, FLOATS, INT, INTS, READ_BYTES, READ_WORDS, UINTS

PARSE_ALL_ARGS = (
    READ_BYTES, INTS, INTS, INT, INT, INT, INT, FLOAT, UINTS, UINTS, INTS,
    READ_BYTES, INTS, INTS, INTS, INTS, FLOATS, INTS, INTS, INTS, INTS, INTS, INTS,
    INTS, FLOATS,
)  # fmt: skip
"""The argument types of the hashed reader's kernel as
:func:`consumers.decoding.fastsparse.parse_hashed` passes them."""

SPEC = Spec(
    extension="consumers._aot_kernels",
    sources=(
        "consumers.decoding.fastjson",
        "consumers.decoding.fastsparse",
        "consumers.decoding.scan",
        "learning._kernels",
        "learning._lanes",
        "learning.encoders._murmur",
        "learning.jit",
    ),
    exports=(
        Export("consumers.decoding.fastsparse._parse_all", PARSE_ALL_ARGS, INT),
        Export("consumers.decoding.scan._count_marker_words", (READ_WORDS,), "uint64"),
        Export("consumers.decoding.scan._count_marker_segments", (READ_BYTES, INTS, INTS), INTS),
        Export("consumers.decoding.scan._nesting_depth", (READ_BYTES,), INT),
    ),
)
"""The exports of ``consumers._aot_kernels`` and the modules they compile from."""
