"""The kernels of ``learning`` the ingest pipeline calls from Python, compiled ahead of time.

The extension ``learning._aot_kernels`` (:mod:`learning.aot`) is built from this spec by
``setup.py``. The exports are the kernels one run of the pipeline on hashed bag-of-words events
calls from Python (found by listing the dispatchers numba compiled in runs with and without
invalid events), with the argument types it passes; ``hashed_row`` is called through its
compiled entry (:func:`learning._kernels.compiled_entry`).
"""

from __future__ import annotations

from learning.aot import Export, Spec
from learning.encoders._murmur import HASHED_ROW_TYPES
from learning.jit import (
    BOOL,
    BOOLS,
    BYTES,
    FLOAT,
    FLOAT_CUBE,
    FLOAT_MATRIX,
    FLOATS,
    INT,
    INT_MATRIX,
    INTS,
    UINTS,
)

LEARN_BINARY_ARGS = (
    INTS, INTS, FLOATS, INT, FLOATS, FLOAT_MATRIX, FLOAT_MATRIX, FLOATS, INTS,
    INT_MATRIX, INTS, INTS, INTS, FLOAT_MATRIX, INTS, UINTS, FLOAT_MATRIX, INTS,
    INT_MATRIX, INT, INT, BOOL, FLOAT, BOOLS, FLOATS, FLOATS,
)  # fmt: skip
"""The argument types of :func:`learning._learn.learn_binary` as the batch learner passes them."""
OBSERVE_ARGS = (
    INTS, INTS, FLOATS, INT, FLOATS, BOOLS, FLOAT_CUBE, INT, FLOAT, FLOATS,
    INT_MATRIX, FLOATS, FLOATS, INTS, INTS, INTS, FLOATS, FLOAT,
)  # fmt: skip
"""The argument types of :func:`learning._scoring.observe` as the bound tracker passes them."""

HASHED_BATCH_ARGS = (BYTES, FLOATS, INTS, INT, INT, FLOAT, INTS, INTS, FLOATS)
"""The argument types of :func:`learning.encoders._murmur.hashed_batch` as the hashing encoder
passes them."""

SPEC = Spec(
    extension="learning._aot_kernels",
    sources=(
        "learning._binary_step",
        "learning._kernels",
        "learning._lanes",
        "learning._learn",
        "learning._rng",
        "learning._scoring",
        "learning._voter_index",
        "learning._voters",
        "learning.encoders._murmur",
        "learning.jit",
        "learning.sparse",
    ),
    exports=(
        Export("learning._kernels.first_invalid_value", (FLOATS, FLOAT), INT),
        Export("learning.sparse.csr_breach", (INTS, INTS, INT), INT),
        Export(
            "learning._voter_index.build_index",
            (INTS, INTS, INTS, INTS, INTS, INT),
            f"Tuple(({INTS}, {INT_MATRIX}))",
        ),
        Export("learning._learn.learn_binary", LEARN_BINARY_ARGS, INT),
        Export("learning._scoring.observe", OBSERVE_ARGS, "none"),
        Export("learning.encoders._murmur.murmur_bucket", (INT, INT), INT),
        Export("learning.encoders._murmur.hashed_row", HASHED_ROW_TYPES, INT),
        Export("learning.encoders._murmur.hashed_batch", HASHED_BATCH_ARGS, INT),
    ),
)
"""The exports of ``learning._aot_kernels`` and the modules they compile from."""
