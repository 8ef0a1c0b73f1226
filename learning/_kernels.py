"""Compiled inner loops: one pass over a whole decoded batch per call.

Why numba
---------
The learner's per-event work is a handful of dot products and, on a mistake, a few vector
updates. In pure Python or a per-event numpy loop the interpreter and the ufunc dispatch cost
several microseconds per event, which is more than the arithmetic itself up to d ≈ 1000. numba
compiles these plain loops to machine code with no per-event overhead, needs no C toolchain or
build step (it is a wheel), keeps the kernels readable Python, and caches the machine code on
disk (``cache=True``) so the compile cost (a few seconds) is paid once per machine. Cython or a
Rust extension would need a build step; numpy alone cannot fuse predict → mistake → update →
statistics into one pass.

Determinism
-----------
The same kernel serves ``learn_one`` (a batch of one), ``learn_batch`` and ``fit_epochs``, and it
keeps nothing between calls except the state arrays it is given, so the results are bit-identical
however a stream is cut into batches. Dot products use four explicit partial sums combined in a
fixed order and no fast-math flags, so the rounding is fixed by the source and does not depend on
the vector width LLVM picks for a given CPU: a checkpoint replays identically on another machine.

Speed notes (measured in ``bench/``): the fixed-order sums are scalar, so at d = 1000 a
fast-math or BLAS dot product would be about twice as fast, at the price of CPU-dependent
rounding; replayable checkpoints were preferred. Rows are checked (finite, within
±MAX_ABS_FEATURE) inside the kernel just before they are used, so large batches are read from
memory once; the caller keeps the batch atomic (see ``LinearLearner.learn_batch``).

State layout
------------
Weights are stored as a matrix ``W`` of shape (rows, d): one row for a binary learner, one per
class for a multiclass one. Averaging is lazy per row: ``weight_sums[r]`` holds Σ cₙ·wₙ over the
row's finished values and ``born[r]`` the number of events seen when the row took its current
value, so the sum of the row's post-event values after t events is
``weight_sums[r] + (t - born[r])·W[r]`` — updated only when the row changes (cost per update,
not per event). Voters (Freund & Schapire) are finished weight matrices with their survival
counts, kept sorted by count (largest first) so a vote can stop as soon as its outcome is decided.

Scalar state lives in the int64 array ``counters`` (indices below) and the tie-breaking generator
(SplitMix64) in a one-element uint64 array. Both learning kernels take the same arguments (the
binary one ignores the generator), so one call site serves them alike.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np
from numpy.typing import NDArray

from learning import _rng

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
N_COUNTERS = 12

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
COLUMN_VOTE_MIN_ROWS = 2
"""Batches with fewer rows vote voter by voter: transposing the voters would cost more."""

F = TypeVar("F", bound=Callable[..., Any])
Floats = NDArray[np.float64]
Ints = NDArray[np.int64]


def _jit(func: F) -> F:
    """numba.njit with on-disk caching, typed for mypy (numba itself is untyped)."""
    return cast(F, numba.njit(cache=True, nogil=True)(func))


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


# dot, dot2 and add_scaled repeat the same four-lane unrolled loop on purpose: dot2 reads x once
# for two products and add_scaled fuses the averaging, the update and the new norm into one pass;
# calling dot from them would read the vectors two or three times.


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


@_jit
def dot2(a: Floats, b: Floats, x: Floats, d: int) -> tuple[float, float]:
    """(a·x, b·x) in one pass over x, each summed exactly like :func:`dot`."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    t0 = 0.0
    t1 = 0.0
    t2 = 0.0
    t3 = 0.0
    m = d - d % UNROLL
    for j in range(0, m, UNROLL):
        s0 += a[j] * x[j]
        s1 += a[j + 1] * x[j + 1]
        s2 += a[j + 2] * x[j + 2]
        s3 += a[j + 3] * x[j + 3]
        t0 += b[j] * x[j]
        t1 += b[j + 1] * x[j + 1]
        t2 += b[j + 2] * x[j + 2]
        t3 += b[j + 3] * x[j + 3]
    tail = d - m
    if tail > 0:
        s0 += a[m] * x[m]
        t0 += b[m] * x[m]
    if tail > 1:
        s1 += a[m + 1] * x[m + 1]
        t1 += b[m + 1] * x[m + 1]
    if tail > 2:
        s2 += a[m + 2] * x[m + 2]
        t2 += b[m + 2] * x[m + 2]
    return (s0 + s1) + (s2 + s3), (t0 + t1) + (t2 + t3)


@_jit
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
def row_ok(X: Floats, i: int, limit: float) -> bool:
    """Whether every value of row i is finite and within ±limit (vectorisable, no early exit)."""
    ok = True
    for j in range(X.shape[1]):
        ok &= abs(X[i, j]) <= limit
    return ok


@_jit
def first_invalid_row(X: Floats, limit: float) -> int:
    """Index of the first row with a value that is not finite or exceeds ``limit`` in size; -1."""
    for i in range(X.shape[0]):
        if not row_ok(X, i, limit):
            return i
    return -1


# --------------------------------------------------------------------------- voters


@_jit
def voter_slot(count: int, voter_counts: Ints, voter_order: Ints, counters: Ints, cap: int) -> int:
    """Reserve a slot for a finished voter with survival ``count``; -1 when it is not kept.

    Below ``cap`` voters every voter is kept, so the vote is exact. At the cap the voter with the
    smallest survival count (the new one on ties) is dropped: its vote mass is added to
    ``DROPPED_VOTES`` and it no longer votes (it still counts in the averaged predictor).
    """
    if count <= 0:
        return -1
    n = counters[N_VOTERS]
    if n >= cap:
        weakest = voter_order[n - 1]
        if voter_counts[weakest] >= count:
            counters[DROPPED_VOTERS] += 1
            counters[DROPPED_VOTES] += count
            return -1
        counters[DROPPED_VOTERS] += 1
        counters[DROPPED_VOTES] += voter_counts[weakest]
        counters[VOTE_TOTAL] -= voter_counts[weakest]
        n -= 1
        slot = weakest
    else:
        slot = n
    position = n
    while position > 0 and voter_counts[voter_order[position - 1]] < count:
        voter_order[position] = voter_order[position - 1]
        position -= 1
    voter_order[position] = slot
    voter_counts[slot] = count
    counters[N_VOTERS] = n + 1
    counters[VOTE_TOTAL] += count
    return int(slot)


@_jit
def vote_binary(  # noqa: PLR0917 - numba kernels take positional arrays
    x: Floats,
    d: int,
    live_score: float,
    live_count: int,
    voters: Floats,
    voter_counts: Ints,
    voter_order: Ints,
    counters: Ints,
) -> float:
    """The voted prediction, stopping as soon as the remaining votes cannot change it."""
    acc = vote_sign(live_score, live_count)
    remaining = counters[VOTE_TOTAL]
    for k in range(counters[N_VOTERS]):
        if acc >= remaining or acc < -remaining:
            break
        slot = voter_order[k]
        count = voter_counts[slot]
        acc += vote_sign(dot(voters[slot, 0], x, d), count)
        remaining -= count
    return 1.0 if acc >= 0 else -1.0


@_jit
def voter_columns(voters: Floats, row: int, n: int, d: int, capacity: int) -> Floats:
    """Row ``row`` of the first ``n`` voters as the columns of a (d, capacity) matrix.

    In this layout :func:`vote_binary_columns` scores many voters at once (SIMD across voters)
    while summing each voter's score exactly like :func:`dot`; columns past ``n`` are free for
    voters added later.
    """
    columns = np.empty((d, capacity))
    for slot in range(n):
        for j in range(d):
            columns[j, slot] = voters[slot, row, j]
    return columns


@_jit
def voter_scores(columns: Floats, n: int, x: Floats, d: int, lanes: Floats) -> None:
    """Each voter's x-score as the four partial sums of :func:`dot`: lanes[j mod 4, slot].

    Element j of every voter goes to partial sum j mod 4, in increasing j, exactly as in
    :func:`dot`, so (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]) is bit-identical to
    dot(voter, x, d); only the loop order across voters differs, which lets it vectorise.
    """
    for lane in range(UNROLL):
        for slot in range(n):
            lanes[lane, slot] = 0.0
    for j in range(d):
        xj = x[j]
        lane = j % UNROLL
        for slot in range(n):
            lanes[lane, slot] += columns[j, slot] * xj


@_jit
def voter_score(lanes: Floats, slot: int) -> float:
    """The score of voter ``slot`` from :func:`voter_scores` (same rounding as :func:`dot`)."""
    return float((lanes[0, slot] + lanes[1, slot]) + (lanes[2, slot] + lanes[3, slot]))


@_jit
def vote_binary_columns(  # noqa: PLR0917 - numba kernels take positional arrays
    x: Floats,
    d: int,
    live_score: float,
    live_count: int,
    columns: Floats,
    voter_counts: Ints,
    counters: Ints,
    lanes: Floats,
) -> float:
    """The voted prediction: the sign of the survival-weighted votes of the live model and voters.

    Every voter is scored in one vectorised pass (the sign of a sum of integer votes does not
    depend on their order), skipped when the live model's votes alone decide the outcome.
    """
    acc = vote_sign(live_score, live_count)
    remaining = counters[VOTE_TOTAL]
    if acc >= remaining or acc < -remaining:
        return 1.0 if acc >= 0 else -1.0
    # The same loop as in predict_binary, kept inline: as a shared helper it measured ~15%
    # slower on the voted learning benchmark at d = 10.
    n = counters[N_VOTERS]
    voter_scores(columns, n, x, d, lanes)
    for slot in range(n):
        acc += vote_sign(voter_score(lanes, slot), voter_counts[slot])
    return 1.0 if acc >= 0 else -1.0


@_jit
def voter_choice(  # noqa: PLR0917 - numba kernels take positional arrays
    voters: Floats, slot: int, x: Floats, d: int, n_classes: int, state: np.uint64, scratch: Floats
) -> int:
    """The class voter ``slot`` votes for (its argmax, ties as in :func:`argmax_tie`)."""
    for c in range(n_classes):
        scratch[c] = dot(voters[slot, c], x, d)
    choice, _ = argmax_tie(scratch, n_classes, state)
    return choice


@_jit
def vote_multiclass(  # noqa: PLR0917 - numba kernels take positional arrays
    x: Floats,
    d: int,
    n_classes: int,
    live_choice: int,
    live_count: int,
    voters: Floats,
    voter_counts: Ints,
    voter_order: Ints,
    counters: Ints,
    state: np.uint64,
    scratch: Floats,
    votes: Ints,
) -> int:
    """The voted class, stopping as soon as the remaining votes cannot change the winner."""
    for c in range(n_classes):
        votes[c] = 0
    votes[live_choice] += live_count
    remaining = counters[VOTE_TOTAL]
    for k in range(counters[N_VOTERS]):
        if vote_decided(votes, n_classes, remaining):
            break
        slot = voter_order[k]
        choice = voter_choice(voters, slot, x, d, n_classes, state, scratch)
        votes[choice] += voter_counts[slot]
        remaining -= voter_counts[slot]
    choice, _ = argmax_tie(votes, n_classes, state)
    return choice


# --------------------------------------------------------------------------- learning


@_jit
def learn_binary(  # noqa: PLR0917 - numba kernels take positional arrays
    X: Floats,
    y: Floats,
    weights: Floats,
    weight_sums: Floats,
    born: Ints,
    row_sq: Floats,
    voters: Floats,
    voter_counts: Ints,
    voter_order: Ints,
    counters: Ints,
    rng: NDArray[np.uint64],
    max_voters: int,
    prequential_voted: bool,
    limit: float,
    out_updates: NDArray[np.bool_],
    out_predictions: Floats,
    out_margins: Floats,
) -> int:
    """Prequential predict → mistake → update over a batch, binary labels y ∈ {-1, +1}.

    With ``limit`` > 0 each row is checked (finite, within ±limit) just before it is used; the
    first bad row stops the batch untouched from that row on, and its index is returned (else -1).
    ``rng`` is unused: binary predictions never tie.
    """
    n = X.shape[0]
    d = X.shape[1]
    w = weights[0]
    a = weight_sums[0]
    by_columns = prequential_voted and n >= COLUMN_VOTE_MIN_ROWS
    if by_columns:
        columns = voter_columns(voters, 0, counters[N_VOTERS], d, voters.shape[0])
        lanes = np.empty((UNROLL, voters.shape[0]))
    else:
        columns = np.empty((0, 0))
        lanes = np.empty((0, 0))
    for i in range(n):
        x = X[i]
        if limit > 0.0 and not row_ok(X, i, limit):
            return i
        target = y[i]
        seen = counters[SEEN]
        live = seen - born[0]
        score, sum_score = dot2(w, a, x, d)
        predicted = sign(score)
        averaged = sign(sum_score + live * score)
        if predicted != target:
            counters[PQ_LAST] += 1
        if averaged != target:
            counters[PQ_AVERAGED] += 1
        if prequential_voted:
            if by_columns:
                voted = vote_binary_columns(
                    x, d, score, live, columns, voter_counts, counters, lanes
                )
            else:
                voted = vote_binary(x, d, score, live, voters, voter_counts, voter_order, counters)
            counters[PQ_VOTED_SEEN] += 1
            if voted != target:
                counters[PQ_VOTED] += 1
        norm_sq = row_sq[0]
        out_margins[i] = target * score / math.sqrt(norm_sq) if norm_sq > 0.0 else 0.0
        out_predictions[i] = predicted
        update = target * score <= 0.0
        out_updates[i] = update
        if update:
            slot = voter_slot(live, voter_counts, voter_order, counters, max_voters)
            if slot >= 0:
                voters[slot, 0, :d] = w[:d]
                if by_columns:
                    columns[:, slot] = w[:d]
            row_sq[0] = add_scaled(w, a, live, x, target > 0.0, d)
            born[0] = seen
            counters[BORN_MODEL] = seen
            counters[UPDATES] += 1
        counters[SEEN] = seen + 1
    return -1


@_jit
def add_scaled(  # noqa: PLR0917 - numba kernels take positional arrays
    w: Floats, a: Floats, live: int, x: Floats, positive: bool, d: int
) -> float:
    """a += live·w, then w ± x; returns the new ‖w‖² (four partial sums, fixed order).

    Updates are always ±x̃, so the step is an addition or a subtraction, never a product.
    """
    count = float(live)
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    m = d - d % UNROLL
    for j in range(0, m, UNROLL):
        w0 = w[j]
        w1 = w[j + 1]
        w2 = w[j + 2]
        w3 = w[j + 3]
        a[j] += count * w0
        a[j + 1] += count * w1
        a[j + 2] += count * w2
        a[j + 3] += count * w3
        if positive:
            w0 += x[j]
            w1 += x[j + 1]
            w2 += x[j + 2]
            w3 += x[j + 3]
        else:
            w0 -= x[j]
            w1 -= x[j + 1]
            w2 -= x[j + 2]
            w3 -= x[j + 3]
        w[j] = w0
        w[j + 1] = w1
        w[j + 2] = w2
        w[j + 3] = w3
        s0 += w0 * w0
        s1 += w1 * w1
        s2 += w2 * w2
        s3 += w3 * w3
    for j in range(m, d):
        old = w[j]
        a[j] += count * old
        new = old + x[j] if positive else old - x[j]
        w[j] = new
        lane = j - m
        if lane == 0:
            s0 += new * new
        elif lane == 1:
            s1 += new * new
        else:
            s2 += new * new
    return (s0 + s1) + (s2 + s3)


@_jit
def update_row(  # noqa: PLR0917 - numba kernels take positional arrays
    weights: Floats,
    weight_sums: Floats,
    born: Ints,
    row_sq: Floats,
    row: int,
    x: Floats,
    positive: bool,
    seen: int,
    d: int,
) -> None:
    """W[row] ± x with lazy averaging and the row's squared norm refreshed."""
    live = seen - born[row]
    row_sq[row] = add_scaled(weights[row], weight_sums[row], live, x, positive, d)
    born[row] = seen


@_jit
def class_scores(  # noqa: PLR0917 - numba kernels take positional arrays
    weights: Floats,
    weight_sums: Floats,
    born: Ints,
    seen: int,
    x: Floats,
    d: int,
    n_classes: int,
    scores: Floats,
    sums: Floats,
) -> None:
    """Per active class: scores[c] = W[c]·x̃ and sums[c] = (Σ post-event W[c])·x̃ (lazy average)."""
    for c in range(n_classes):
        s, sa = dot2(weights[c], weight_sums[c], x, d)
        scores[c] = s
        sums[c] = sa + (seen - born[c]) * s


@_jit
def learn_multiclass(  # noqa: PLR0917 - numba kernels take positional arrays
    X: Floats,
    y: Ints,
    weights: Floats,
    weight_sums: Floats,
    born: Ints,
    row_sq: Floats,
    voters: Floats,
    voter_counts: Ints,
    voter_order: Ints,
    counters: Ints,
    rng: NDArray[np.uint64],
    max_voters: int,
    prequential_voted: bool,
    limit: float,
    out_updates: NDArray[np.bool_],
    out_predictions: Ints,
    out_margins: Floats,
) -> int:
    """Prequential argmax → mistake → update over a batch, y = class indices.

    The argmax runs over the classes active so far (``counters[ACTIVE_CLASSES]``): all declared
    classes, or the discovered ones up to the current event. ``limit`` and the return value are
    as in :func:`learn_binary`.
    """
    n = X.shape[0]
    d = X.shape[1]
    rows = weights.shape[0]
    scores = np.empty(rows)
    sum_scores = np.empty(rows)
    scratch = np.empty(rows)
    votes = np.zeros(rows, dtype=np.int64)
    for i in range(n):
        x = X[i]
        if limit > 0.0 and not row_ok(X, i, limit):
            return i
        target = y[i]
        seen = counters[SEEN]
        state = rng[0]
        # A discovered class takes part from the first event that carries it, exactly as when
        # the events are learned one at a time.
        if target >= counters[ACTIVE_CLASSES]:
            counters[ACTIVE_CLASSES] = target + 1
        n_classes = counters[ACTIVE_CLASSES]
        class_scores(weights, weight_sums, born, seen, x, d, n_classes, scores, sum_scores)
        predicted, tied = argmax_tie(scores, n_classes, state)
        averaged, _ = argmax_tie(sum_scores, n_classes, state)
        if predicted != target:
            counters[PQ_LAST] += 1
        if averaged != target:
            counters[PQ_AVERAGED] += 1
        live = seen - counters[BORN_MODEL]
        if prequential_voted:
            voted = vote_multiclass(
                x,
                d,
                n_classes,
                predicted,
                live,
                voters,
                voter_counts,
                voter_order,
                counters,
                state,
                scratch,
                votes,
            )
            counters[PQ_VOTED_SEEN] += 1
            if voted != target:
                counters[PQ_VOTED] += 1
        out_margins[i] = multiclass_margin(scores, n_classes, target, row_sq)
        out_predictions[i] = predicted
        if tied:
            rng[0] = state + GOLDEN_GAMMA
        update = predicted != target
        out_updates[i] = update
        if update:
            slot = voter_slot(live, voter_counts, voter_order, counters, max_voters)
            if slot >= 0:
                voters[slot] = weights
            update_row(weights, weight_sums, born, row_sq, target, x, True, seen, d)
            update_row(weights, weight_sums, born, row_sq, predicted, x, False, seen, d)
            counters[BORN_MODEL] = seen
            counters[UPDATES] += 1
        counters[SEEN] = seen + 1
    return -1


@_jit
def multiclass_margin(scores: Floats, n_classes: int, target: int, row_sq: Floats) -> float:
    """(s_y - max_{c≠y} s_c)/‖W‖_F: the Kesler margin of the current weights (NaN with 1 class)."""
    if n_classes < 2:
        return math.nan
    rival = -math.inf
    for c in range(n_classes):
        if c != target and scores[c] > rival:
            rival = scores[c]
    norm_sq = 0.0
    for c in range(n_classes):
        norm_sq += row_sq[c]
    if norm_sq <= 0.0:
        return 0.0
    return float((scores[target] - rival) / math.sqrt(norm_sq))


# --------------------------------------------------------------------------- prediction


@_jit
def predict_binary(  # noqa: PLR0917 - numba kernels take positional arrays
    X: Floats,
    weights: Floats,
    weight_sums: Floats,
    born: Ints,
    voters: Floats,
    voter_counts: Ints,
    voter_order: Ints,
    counters: Ints,
    which: int,
    out_codes: Floats,
    out_scores: Floats,
) -> None:
    """Predictions (±1) and scores of one predictor; decisions match the learning kernel's.

    Scores: last → w·x̃; averaged → w̄·x̃ (0 before any event); voted → Σ cₙ sign(wₙ·x̃) / Σ cₙ.
    """
    n = X.shape[0]
    d = X.shape[1]
    w = weights[0]
    a = weight_sums[0]
    seen = counters[SEEN]
    live = seen - born[0]
    n_voters = counters[N_VOTERS] if which == VOTED else 0
    transposed = n_voters if n >= COLUMN_VOTE_MIN_ROWS else 0
    columns = voter_columns(voters, 0, transposed, d, transposed)
    lanes = np.empty((UNROLL, transposed))
    mass = live
    for slot in range(n_voters):
        mass += voter_counts[slot]
    for i in range(n):
        x = X[i]
        score, sum_score = dot2(w, a, x, d)
        if which == LAST:
            out_codes[i] = sign(score)
            out_scores[i] = score
        elif which == AVERAGED:
            total = sum_score + live * score
            out_codes[i] = sign(total)
            out_scores[i] = total / seen if seen > 0 else 0.0
        else:
            acc = vote_sign(score, live)
            if transposed:
                voter_scores(columns, n_voters, x, d, lanes)
                for slot in range(n_voters):
                    acc += vote_sign(voter_score(lanes, slot), voter_counts[slot])
            else:
                for slot in range(n_voters):
                    acc += vote_sign(dot(voters[slot, 0], x, d), voter_counts[slot])
            out_codes[i] = 1.0 if acc >= 0 else -1.0
            out_scores[i] = acc / mass if mass > 0 else 0.0


@_jit
def predict_multiclass(  # noqa: PLR0917 - numba kernels take positional arrays
    X: Floats,
    weights: Floats,
    weight_sums: Floats,
    born: Ints,
    voters: Floats,
    voter_counts: Ints,
    voter_order: Ints,
    counters: Ints,
    state: np.uint64,
    which: int,
    out_codes: Ints,
    out_scores: Floats,
) -> None:
    """Predicted class indices and per-class scores of one predictor (ties as when learning).

    Only the active classes (``counters[ACTIVE_CLASSES]`` ≥ 1) compete; other scores stay 0.

    Scores: last → W·x̃; averaged → W̄·x̃; voted → each class's share of the survival-weighted vote.
    """
    n = X.shape[0]
    d = X.shape[1]
    n_classes = counters[ACTIVE_CLASSES]
    seen = counters[SEEN]
    live = seen - counters[BORN_MODEL]
    scores = np.empty(n_classes)
    sums = np.empty(n_classes)
    scratch = np.empty(n_classes)
    votes = np.zeros(n_classes, dtype=np.int64)
    for i in range(n):
        x = X[i]
        class_scores(weights, weight_sums, born, seen, x, d, n_classes, scores, sums)
        predicted, _ = argmax_tie(scores, n_classes, state)
        if which == LAST:
            out_codes[i] = predicted
            for c in range(n_classes):
                out_scores[i, c] = scores[c]
        elif which == AVERAGED:
            choice, _ = argmax_tie(sums, n_classes, state)
            out_codes[i] = choice
            for c in range(n_classes):
                out_scores[i, c] = sums[c] / seen if seen > 0 else 0.0
        else:
            for c in range(n_classes):
                votes[c] = 0
            votes[predicted] += live
            mass = live
            for k in range(counters[N_VOTERS]):
                slot = voter_order[k]
                choice = voter_choice(voters, slot, x, d, n_classes, state, scratch)
                votes[choice] += voter_counts[slot]
                mass += voter_counts[slot]
            choice, _ = argmax_tie(votes, n_classes, state)
            out_codes[i] = choice
            for c in range(n_classes):
                out_scores[i, c] = votes[c] / mass if mass > 0 else 0.0


# --------------------------------------------------------------------------- bound tracking


@_jit
def grid_bin(grid: Floats, margin: float) -> int:
    """Number of grid values ≤ margin (the histogram bin of a margin)."""
    lo = 0
    hi = grid.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if grid[mid] <= margin:
            lo = mid + 1
        else:
            hi = mid
    return lo


@_jit
def grid_bound(histogram: Ints, grid: Floats, radius: float) -> tuple[float, int, int]:
    """min over the grid of (R/gamma)² + k(gamma)·(1 + 2R/gamma): (bound, argmin, k there)."""
    best = math.inf
    best_index = -1
    best_k = 0
    k = 0
    for j in range(grid.shape[0]):
        k += histogram[j]
        q = radius / grid[j]
        value = q * q + k * (1.0 + 2.0 * q)
        if value < best:
            best = value
            best_index = j
            best_k = k
    return best, best_index, best_k


@_jit
def reference_margin(  # noqa: PLR0917 - numba kernels take positional arrays
    reference: Floats, x: Floats, d: int, target: int, sign_target: float, n_classes: int
) -> float:
    """Margin of one event under a unit reference (binary: y·u·x̃; multiclass: Kesler)."""
    if n_classes == 0:
        return sign_target * dot(reference[0], x, d)
    if n_classes < 2:
        return math.inf
    ref_rows = reference.shape[0]
    own = dot(reference[target], x, d) if target < ref_rows else 0.0
    rival = -math.inf
    for c in range(n_classes):
        if c != target:
            s = dot(reference[c], x, d) if c < ref_rows else 0.0
            rival = max(rival, s)
    return own - rival


@_jit
def observe(  # noqa: PLR0917 - numba kernels take positional arrays
    X: Floats,
    y: Floats,
    mistakes: NDArray[np.bool_],
    references: Floats,
    n_classes: int,
    kesler_factor: float,
    grid: Floats,
    histograms: Ints,
    min_margins: Floats,
    radius_sq: Floats,
    counters: Ints,
    violation_event: Ints,
    violation_mistakes: Ints,
    violation_bound: Floats,
    tolerance: float,
) -> None:
    """Update R_t, M_t and each reference's margin histogram; check M_t ≤ B_t at each mistake.

    ``n_classes`` is 0 for binary streams (y holds ±1) and the learner's class count for
    multiclass ones (y holds class indices as floats). B_t is non-decreasing in t, so checking at
    the mistakes (where M_t grows) checks every t.
    """
    n = X.shape[0]
    d = min(X.shape[1], references.shape[2])
    n_refs = references.shape[0]
    for i in range(n):
        x = X[i]
        norm_sq = 0.0
        for j in range(X.shape[1]):
            norm_sq += x[j] * x[j]
        radius_sq[0] = max(radius_sq[0], norm_sq)
        target = int(y[i]) if n_classes > 0 else 0
        for r in range(n_refs):
            margin = reference_margin(references[r], x, d, target, y[i], n_classes)
            histograms[r, grid_bin(grid, margin)] += 1
            min_margins[r] = min(min_margins[r], margin)
        counters[TRACK_SEEN] += 1
        if mistakes[i]:
            counters[TRACK_MISTAKES] += 1
            m = counters[TRACK_MISTAKES]
            radius = kesler_factor * math.sqrt(radius_sq[0])
            for r in range(n_refs):
                if violation_event[r] != NO_VIOLATION:
                    continue
                bound, _, _ = grid_bound(histograms[r], grid, radius)
                if min_margins[r] > 0.0:
                    q = radius / min_margins[r]
                    bound = min(bound, q * q)
                if m > bound * (1.0 + tolerance) + tolerance:
                    violation_event[r] = counters[TRACK_SEEN]
                    violation_mistakes[r] = m
                    violation_bound[r] = bound
