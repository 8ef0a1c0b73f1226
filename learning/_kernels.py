"""Compiled inner loops: the state layout, the counters and the primitives every kernel shares.

Why numba
---------
The learner's per-event work is a handful of dot products and, on a mistake, a few vector
updates. In pure Python or a per-event numpy loop the interpreter and the ufunc dispatch cost
several microseconds per event, which is more than the arithmetic itself up to d ≈ 1000. numba
compiles these plain loops to machine code with no per-event overhead, needs no C toolchain or
build step (it is a wheel), keeps the kernels readable Python, and caches the machine code on
disk (``cache=True``) so the compile cost (a few seconds) is paid once per machine. Cython or a
Rust extension would need a build step; numpy alone cannot fuse predict → mistake → update →
statistics into one pass. The kernels live in :mod:`learning._learn` (learning),
:mod:`learning._voters` (the voted predictor's update log), :mod:`learning._scoring`
(prediction, bound tracking) and :mod:`learning._single` (one event, for ``learn_one`` and
``predict_one``). Small per-row helpers are decorated ``_inline``: numba inlines them into each
kernel, since a call between compiled functions costs more than their work on a sparse row.
numba's disk cache is keyed on each function's own source file: a kernel that calls into (or
inlines from) another kernel module keeps its cached machine code when only the callee's module
changes, so after editing one of these modules clear ``learning/__pycache__/*.nb[ic]`` (``make
clean`` does).

Rows: dense or sparse, one form
-------------------------------
Every kernel takes its batch as ``(indptr, indices, values, width)``: with ``width > 0`` the rows
are dense, row i being ``values[i·width : (i+1)·width]`` (``indices`` is then ``arange(width)``);
with ``width == 0`` they are CSR rows (:class:`learning.sparse.CSRBatch`: sorted, distinct
columns). A row is always handed to the helpers as ``(cols, vals, dense)``.

Determinism
-----------
The same kernel serves ``learn_one`` (a batch of one), ``learn_batch`` and ``fit_epochs``, and it
keeps nothing between calls except the state arrays it is given, so the results are bit-identical
however a stream is cut into batches. Dot products use four explicit partial sums, element j going
to partial sum j mod 4, combined in a fixed order, and no fast-math flags, so the rounding is fixed
by the source and does not depend on the vector width LLVM picks for a given CPU: a checkpoint
replays identically on another machine (a dense row's pass, :func:`dense_row_pass`, holds the four
partial sums as the four lanes of one vector: the same additions in the same order, see
:mod:`learning._lanes`). A sparse dot visits the non-zero columns in increasing
order and puts column j into partial sum j mod 4 too; the zeros a dense pass also adds change
nothing (a partial sum starts at +0.0 and can never become -0.0, so adding ±0.0 leaves it as it
is), so **sparse and dense rows of the same vector give bit-identical results**. The same fact lets
a sparse pass stay branch-free ("sparse lanes"; a column's lane is random, so a branch per entry
would be mispredicted half the time): compact_dot and gather_dot add each product to its own lane
and +0.0 to the three others, which leaves them exactly as they were; the hot row_scores keeps its
partial sums in a small array indexed by the lane (see sparse_row_scores). Updates touch
exactly the coordinates with x_j ≠ 0 in both forms (a stored zero is skipped).

State layout
------------
Weights are a matrix ``W`` of shape (rows, d): one row for a binary learner, one per class for a
multiclass one. Averaging is lazy **per coordinate** (the standard trick): an update Δ applied at
event t (0-based) is part of every post-event weight from event t on, so after T events the sum
of the post-event weights is Σ_k Δ_k·(T - t_k) = T·W - Σ_k t_k·Δ_k. ``weight_sums[r, j]`` holds
-Σ_k t_k·Δ_k for its coordinate, so Σ post-event W = ``weight_sums + T·W`` and w̄ is that over T.
An update changes only the coordinates it touches (weight_sums -= t·Δ there): O(nnz); the
averaged score of an event is weight_sums·x + T·(W·x), two dot products over its non-zeros.
``row_sq[r]`` is ‖W[r]‖², kept up to date by adding each touched coordinate's change of square (in
increasing column order), for the normalised margins.

The voted predictor's voters are kept as an update log (see :mod:`learning._voters`).

Scalar state lives in the int64 array ``counters`` (indices below) and the tie-breaking generator
(SplitMix64) in a one-element uint64 array. Both learning kernels take the same arguments (the
binary one ignores the generator), so one call site serves them alike.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from learning import _rng
from learning._lanes import lane_dots
from learning.jit import Deferred, jit, jit_inline, numba_types

logger = logging.getLogger(__name__)

SEEN = 0
UPDATES = 1
BORN_MODEL = 2
N_VOTERS = 3
VOTE_TOTAL = 4
DROPPED_VOTERS = 5
DROPPED_VOTES = 6
PQ_LAST = 7
PQ_AVERAGED = 8
PQ_VOTED = 9
PQ_VOTED_SEEN = 10
ACTIVE_CLASSES = 11
LOG_HEAD = 12
POOL_USED = 13
POOL_TAIL = 14
N_COUNTERS = 15

LAST = 0
AVERAGED = 1
VOTED = 2

TRACK_SEEN = 0
TRACK_MISTAKES = 1
N_TRACK_COUNTERS = 2
NO_VIOLATION = -1

GOLDEN_GAMMA = np.uint64(_rng.GOLDEN_GAMMA)
MIX_MULTIPLIER_1 = np.uint64(_rng.MIX_MULTIPLIER_1)
MIX_MULTIPLIER_2 = np.uint64(_rng.MIX_MULTIPLIER_2)
MIX_SHIFT_1 = np.uint64(_rng.MIX_SHIFT_1)
MIX_SHIFT_2 = np.uint64(_rng.MIX_SHIFT_2)
MIX_SHIFT_3 = np.uint64(_rng.MIX_SHIFT_3)
HALF_WORD = np.uint64(_rng.HALF_WORD)
BELOW_ANY_VOTE = -(2**62)
"""Smaller than any vote count (a sum of survival counts, each at most the events seen)."""
UNROLL = 4
LANE_MASK = UNROLL - 1
"""Column j goes to partial sum j & LANE_MASK (= j mod 4)."""
NO_LIMIT = math.inf
"""The ``limit`` of :func:`dense_row_pass` when the caller does not check the values."""
PARTIAL_SUMS = 2 * UNROLL
"""Scratch entries of a sparse row's two scores (see sparse_row_scores)."""

Floats = NDArray[np.float64]
Ints = NDArray[np.int64]


_jit = jit
"""The kernels' compile decorator: :func:`learning.jit.jit` (one configuration for all)."""
_inline = jit_inline
""":func:`learning.jit.jit_inline`, for small per-row helpers: a call between compiled functions
costs about 0.1 µs (measured), more than the helper's own work on a sparse row of twenty entries."""


def compiled_entry(kernel: Callable[..., Any], signature: tuple[Any, ...]) -> Callable[..., Any]:
    """The machine code of ``kernel`` for the argument types ``signature`` (numba's signature
    strings, :mod:`learning.jit`): the ahead-of-time compiled function when it serves exactly
    these types (:meth:`learning.jit.Deferred.compiled`), else compiled or loaded from numba's
    disk cache (``Dispatcher.compile`` returns it).

    Calling it skips the dispatcher's resolution of each argument's type (about half a call's
    cost for many arguments, measured), so a caller must pass exactly those types: writable,
    C-contiguous arrays of the declared dtype and dimensions; plain ints, floats and bools.
    """
    if isinstance(kernel, Deferred):
        return kernel.compiled(signature)
    dispatcher: Any = kernel
    return cast(Callable[..., Any], dispatcher.compile(numba_types(signature)))


# --------------------------------------------------------------------------- primitives


@_jit
def mix64(z: np.uint64) -> np.uint64:
    """SplitMix64 output function (same as :func:`learning._rng.mix64`)."""
    z = (z ^ (z >> MIX_SHIFT_1)) * MIX_MULTIPLIER_1
    z = (z ^ (z >> MIX_SHIFT_2)) * MIX_MULTIPLIER_2
    return z ^ (z >> MIX_SHIFT_3)


@_jit
def peek(state: np.uint64) -> np.uint64:
    """The generator's next output, without advancing it."""
    return mix64(state + GOLDEN_GAMMA)


@_jit
def choose(draw: np.uint64, count: int) -> int:
    """Map a draw to 0 .. count-1 (same as :func:`learning._rng.choose`)."""
    return int(((draw >> HALF_WORD) * np.uint64(count)) >> HALF_WORD)


# dot, compact_dot and dense_row_pass repeat the same four-lane sums on purpose: dense_row_pass
# reads x once for three products (as vector lanes, see learning._lanes); calling dot from it
# would read the vectors three times.


@_jit
def dot(a: Floats, b: Floats, d: int) -> float:
    """a[:d]·b[:d] with four partial sums in a fixed order.

    Element j always goes to partial sum j mod 4, so appending zero coordinates (a vocabulary
    that grew) leaves every partial sum, and hence the result, exactly unchanged.
    """
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    m = d - d % UNROLL
    for j in range(0, m, UNROLL):
        s0 += a[j] * b[j]
        s1 += a[j + 1] * b[j + 1]
        s2 += a[j + 2] * b[j + 2]
        s3 += a[j + 3] * b[j + 3]
    tail = d - m
    if tail > 0:
        s0 += a[m] * b[m]
    if tail > 1:
        s1 += a[m + 1] * b[m + 1]
    if tail > 2:
        s2 += a[m + 2] * b[m + 2]
    return (s0 + s1) + (s2 + s3)


@_inline
def sign(score: float) -> float:
    """sign with sign(0) = +1."""
    return 1.0 if score >= 0.0 else -1.0


@_jit
def vote_sign(score: float, count: int) -> int:
    """A voter's signed vote: +count when score ≥ 0, else -count."""
    return count if score >= 0.0 else -count


@_jit
def argmax_tie(values: Floats | Ints, n: int, state: np.uint64) -> tuple[int, bool]:
    """(argmax over values[:n], whether it was a tie); float scores or integer votes alike.

    Ties are broken by the generator's next output, which is not drawn (the state is unchanged).
    """
    best = values[0]
    tied = 1
    first = 0
    for c in range(1, n):
        if values[c] > best:
            best = values[c]
            tied = 1
            first = c
        elif values[c] == best:
            tied += 1
    if tied == 1:
        return first, False
    pick = choose(peek(state), tied)
    for c in range(first, n):
        if values[c] == best:
            if pick == 0:
                return c, True
            pick -= 1
    return first, True


@_jit
def vote_decided(votes: Ints, n: int, remaining: int) -> bool:
    """Whether the leader's lead over the runner-up exceeds the votes still to count."""
    lead = votes[0]
    second = BELOW_ANY_VOTE
    for c in range(1, n):
        v = votes[c]
        if v > lead:
            second = lead
            lead = v
        elif v > second:
            second = v
    return bool(lead - second > remaining)


@_jit
def first_invalid_value(values: Floats, limit: float) -> int:
    """Index of the first value that is not finite or exceeds ``limit`` in size; -1 if none.

    The common case (all valid) is one vectorisable pass with no early exit; only a failing
    array is scanned again for the index.
    """
    ok = True
    for j in range(values.shape[0]):
        ok &= abs(values[j]) <= limit
    if ok:
        return -1
    for j in range(values.shape[0]):
        if not abs(values[j]) <= limit:
            return j
    return -1


@_inline
def row_span(indptr: Ints, width: int, i: int) -> tuple[int, int]:
    """(start, stop) of row i's entries in ``values`` (dense when ``width`` > 0)."""
    if width > 0:
        return i * width, i * width + width
    return indptr[i], indptr[i + 1]


@_inline
def compact_dot(a: Floats, cols: Ints, vals: Floats, dense: bool) -> float:
    """Σ_k a[k]·vals[k] with column cols[k] in partial sum cols[k] mod 4 (same rounding as dot).

    ``a`` is compact (one entry per stored column of the row); dense rows use :func:`dot`.
    """
    n = vals.shape[0]
    if dense:
        return dot(a, vals, n)
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    for k in range(n):
        p = a[k] * vals[k]
        lane = cols[k] & LANE_MASK
        s0 += p if lane == 0 else 0.0  # branch-free: see "Sparse lanes" in the module docs
        s1 += p if lane == 1 else 0.0
        s2 += p if lane == 2 else 0.0
        s3 += p if lane == 3 else 0.0
    return (s0 + s1) + (s2 + s3)


@_jit
def gather_dot(a: Floats, cols: Ints, vals: Floats, dense: bool) -> float:
    """a·x over the row's columns (a is a full row of W), summed exactly like :func:`dot`."""
    n = vals.shape[0]
    if dense:
        return dot(a, vals, n)
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    for k in range(n):
        c = cols[k]
        p = a[c] * vals[k]
        lane = c & LANE_MASK
        s0 += p if lane == 0 else 0.0
        s1 += p if lane == 1 else 0.0
        s2 += p if lane == 2 else 0.0
        s3 += p if lane == 3 else 0.0
    return (s0 + s1) + (s2 + s3)


@_jit
def row_scores(  # noqa: PLR0917 - numba kernels take positional arrays
    w: Floats, sums: Floats, seen: int, cols: Ints, vals: Floats, dense: bool, partial: Floats
) -> tuple[float, float]:
    """(w·x, (Σ post-event w)·x): the score and ``seen`` times the averaged score.

    (Σ post-event w)·x = sums·x + seen·(w·x) (see the state layout); both dot products are summed
    in four partial sums by column mod 4, dense and sparse alike, then combined in this order.
    ``partial`` is scratch for a sparse row (PARTIAL_SUMS entries, see sparse_row_scores).
    """
    if not dense:
        return sparse_row_scores(w, sums, seen, cols, vals, partial)
    score, total, _, _, _ = dense_row_pass(w, sums, seen, vals, NO_LIMIT)
    return score, total


@_inline
def dense_row_pass(
    w: Floats, sums: Floats, seen: int, vals: Floats, limit: float
) -> tuple[float, float, float, bool, bool]:
    """(w·x, (Σ post-event w)·x, ‖x‖², valid, no_zeros) of a dense row, in one pass over it.

    The scores are :func:`row_scores`'s and ‖x‖² is ``dot(x, x, n)``: element j goes to partial
    sum j mod 4, the first n - n mod 4 elements summed by :func:`learning._lanes.lane_dots`, whose
    four vector lanes are those four partial sums. ``valid``: every value is finite and within
    ±``limit``; ``no_zeros``: every value is non-zero.
    """
    n = vals.shape[0]
    m = n - n % UNROLL
    s0, s1, s2, s3, t0, t1, t2, t3, q0, q1, q2, q3, valid, no_zeros = lane_dots(
        w, sums, vals, m, limit
    )
    tail = n - m
    if tail > 0:
        v = vals[m]
        s0 += w[m] * v
        t0 += sums[m] * v
        q0 += v * v
        valid &= abs(v) <= limit
        no_zeros &= v != 0.0
    if tail > 1:
        v = vals[m + 1]
        s1 += w[m + 1] * v
        t1 += sums[m + 1] * v
        q1 += v * v
        valid &= abs(v) <= limit
        no_zeros &= v != 0.0
    if tail > 2:
        v = vals[m + 2]
        s2 += w[m + 2] * v
        t2 += sums[m + 2] * v
        q2 += v * v
        valid &= abs(v) <= limit
        no_zeros &= v != 0.0
    score = (s0 + s1) + (s2 + s3)
    total = ((t0 + t1) + (t2 + t3)) + seen * score
    return score, total, (q0 + q1) + (q2 + q3), valid, no_zeros


@_inline
def sparse_row_scores(  # noqa: PLR0917 - numba kernels take positional arrays
    w: Floats, sums: Floats, seen: int, cols: Ints, vals: Floats, partial: Floats
) -> tuple[float, float]:
    """:func:`row_scores` of a sparse row, its partial sums kept in ``partial``: lane j of w·x at
    j, of sums·x at UNROLL + j. Each product goes to its own lane, in column order, as in the
    dense pass; an array indexed by the lane costs no branch (a column's lane is random, so a
    branch per entry would be mispredicted half the time)."""
    for j in range(PARTIAL_SUMS):
        partial[j] = 0.0
    for k in range(vals.shape[0]):
        c = cols[k]
        v = vals[k]
        lane = c & LANE_MASK
        partial[lane] += w[c] * v
        partial[UNROLL + lane] += sums[c] * v
    score = (partial[0] + partial[1]) + (partial[2] + partial[3])
    total = (partial[4] + partial[5]) + (partial[6] + partial[7])
    return score, total + seen * score


@_inline
def count_touched(vals: Floats) -> int:
    """Coordinates an update by this row changes: its values ≠ 0."""
    touched = 0
    for k in range(vals.shape[0]):
        if vals[k] != 0.0:
            touched += 1
    return touched
