"""A per-column index of the voters' update log: a sparse row's vote walks only its own columns.

:func:`learning._voters.vote_binary` walks every kept log entry per event (O(voters x nnz of an
update)), though few of them touch the row's columns. The index finds exactly those: for each
weight column c, ``column_newest[c]`` is the newest entry position naming c, and each entry p
links to the next older entry of its column (``links[p, PREV]``); ``links[p, VOTER]`` is the
sequence number of the voter whose update wrote it. Voter sequence numbers grow by one per kept
voter: the live ones are ``counters[DROPPED_VOTERS]`` .. ``counters[DROPPED_VOTERS] +
counters[N_VOTERS] - 1`` (dropping the oldest moves one count from N_VOTERS to DROPPED_VOTERS).

Invariant: following a column's chain from ``column_newest[c]``, each visited entry p is live
and c's when ``log_cols[p] == c`` and its voter is live and strictly older than the previous
one visited; the first p failing that ends the chain, and every entry of c older than it is
gone too (entries are freed oldest voter first, and a position is rewritten only once freed).

The index is derived state, never saved: :class:`learning._arrays.LinearState` rebuilds it
(:func:`build_index`) whenever the log changed without it, and drops it while the log holds a
dense run (a dense row's update, whose columns are implicit).
"""

from __future__ import annotations

import numpy as np

from learning._kernels import (
    DROPPED_VOTERS,
    LANE_MASK,
    LOG_HEAD,
    N_VOTERS,
    UNROLL,
    VOTE_TOTAL,
    Floats,
    Ints,
    _jit,
    vote_sign,
)
from learning._voters import DENSE_RUN

PREV = 0
VOTER = 1
"""Columns of ``links`` (one row per entry position, so one hop reads one cache line): the next
older entry of the same column, and the writing voter's number."""
NO_ENTRY = -1
LINK_FIELDS = 2
VoteScratch = tuple[Ints, Floats, Ints, Ints, Floats, Floats]
UNIT_ROUNDOFF = 2.0**-53
"""u: the relative error of one rounded float64 operation."""
SMALLEST_SUBNORMAL = 5e-324
"""The absolute error one product may add when it underflows."""
ESTIMATE_ROUNDINGS = 4.0
"""Safety factor of the vote's estimate bound. Let M = Σ|w_j·x_j| over the row plus Σ|old·x_j|
over the h old values carried in, and g(N) = N·u/(1 - N·u). The exact score (n products summed)
is within g(n)·M of the real-number score. The estimate (the n-term live score, then per old
value a subtraction, a product and a sum, terms adding up to at most 2M in magnitude, as each old
value replaces a live weight or the previous old value of its column) is within g(n + h + 2)·2M.
Both together are below (3n + 2h + 4)·u·M·(1 + 10⁻¹⁰); the bound used is
ESTIMATE_ROUNDINGS·(2n + h + 4)·(u·M + SMALLEST_SUBNORMAL), which also covers the rounding of M
and of the bound and any underflow. When the estimate is farther from 0 than that, the exact
score has its sign and is not 0."""


def empty_index() -> tuple[Ints, Ints]:
    """(column_newest, links) meaning "no index": the kernels then walk the whole log."""
    return np.zeros(0, dtype=np.int64), np.zeros((0, LINK_FIELDS), dtype=np.int64)


@_jit
def live_entry(  # noqa: PLR0917 - numba kernels take positional arrays
    p: int, c: int, log_cols: Ints, links: Ints, oldest: int, newer: int
) -> bool:
    """Whether entry ``p`` is a live entry of column ``c`` written by a voter older than
    ``newer`` (see the module invariant)."""
    if p < 0:
        return False
    voter = links[p, VOTER]
    return bool(log_cols[p] == c and oldest <= voter < newer)


@_jit
def link_entries(  # noqa: PLR0917 - numba kernels take positional arrays
    start: int,
    length: int,
    voter: int,
    oldest: int,
    log_cols: Ints,
    column_newest: Ints,
    links: Ints,
) -> None:
    """Index the ``length`` entries just written from ``start`` (wrapping) by voter ``voter``."""
    capacity = log_cols.shape[0]
    p = start
    for _ in range(length):
        if p >= capacity:
            p -= capacity
        c = log_cols[p]
        q = column_newest[c]
        # links[p, VOTER] still names p's freed voter (or none) here, so q == p is not live.
        links[p, PREV] = q if live_entry(q, c, log_cols, links, oldest, voter) else NO_ENTRY
        links[p, VOTER] = voter
        column_newest[c] = p
        p += 1


@_jit
def build_index(  # noqa: PLR0917 - numba kernels take positional arrays
    log_counts: Ints, log_start: Ints, log_len: Ints, log_cols: Ints, counters: Ints, width: int
) -> tuple[Ints, Ints]:
    """The index of the kept log (oldest voter first), or :func:`empty_index` when the log holds
    a dense run."""
    n_voters = counters[N_VOTERS]
    capacity = max(log_counts.shape[0], 1)
    for age in range(n_voters):
        slot = (counters[LOG_HEAD] + age) % capacity
        if log_len[slot] > 0 and log_cols[log_start[slot]] == DENSE_RUN:
            return np.zeros(0, dtype=np.int64), np.zeros((0, LINK_FIELDS), dtype=np.int64)
    column_newest = np.full(width, NO_ENTRY, dtype=np.int64)
    links = np.full((log_cols.shape[0], LINK_FIELDS), NO_ENTRY, dtype=np.int64)
    oldest = counters[DROPPED_VOTERS]
    for age in range(n_voters):
        slot = (counters[LOG_HEAD] + age) % capacity
        link_entries(
            log_start[slot], log_len[slot], oldest + age, oldest, log_cols, column_newest, links
        )
    return column_newest, links


@_jit
def vote_scratch(voters: int, longest: int) -> VoteScratch:
    """Scratch of :func:`vote_binary_indexed` for rows of at most ``longest`` entries:
    (hit_k, hit_old, hit_count, order, lane_view, lane_vals); ``order`` and ``lane_vals`` also
    hold the lane starts, fill cursors and sums past the row's entries."""
    return (
        np.empty((voters, longest), dtype=np.int64),
        np.empty((voters, longest)),
        np.zeros(voters, dtype=np.int64),
        np.empty(longest + 2 * UNROLL + 1, dtype=np.int64),
        np.empty(longest),
        np.empty(longest + UNROLL),
    )


@_jit
def lane_score(order: Ints, lane_view: Floats, lane_vals: Floats, lanes: Floats) -> float:
    """The row's score with the weights in ``lane_view``, summed lane by lane exactly as
    :func:`learning._kernels.compact_dot` sums it (``order`` holds the lane starts past the
    row's entries); ``lanes`` receives the four partial sums."""
    n = lane_view.shape[0]
    starts = order[n : n + UNROLL + 1]
    for lane in range(UNROLL):
        total = 0.0
        for q in range(starts[lane], starts[lane + 1]):
            total += lane_view[q] * lane_vals[q]
        lanes[lane] = total
    return float((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]))


@_jit
def vote_binary_indexed(  # noqa: PLR0917 - numba kernels take positional arrays
    w: Floats,
    cols: Ints,
    vals: Floats,
    live_score: float,
    live_count: int,
    log_counts: Ints,
    log_cols: Ints,
    log_old: Floats,
    counters: Ints,
    column_newest: Ints,
    links: Ints,
    scratch: VoteScratch,
    stop_early: bool,
) -> int:
    """:func:`learning._voters.vote_binary` for a sparse row, through the index: bit for bit the
    same vote, at O(voters + the log entries on x's columns) per event.

    The old values on x's columns are gathered per voter age (``hit_k[age, :hit_count[age]]``
    are positions in the lane layout below, ``hit_old`` the values; each voter logs a column at
    most once). The row is laid out lane by lane (``order``: lane j's positions from
    ``starts[j]``, increasing, with the live weights in ``lane_view``). Voter by voter, newest
    first, its old values are written there and its score is carried from the next newer one's
    by the change of each rewritten product: an estimate, whose distance from the exact score
    (:func:`lane_score`, compact_dot's sum of the same weights) is at most ``bound`` (see
    :data:`ESTIMATE_ROUNDINGS`). Only a vote is needed, so the estimate's sign is used when it is
    farther from 0 than that; otherwise the exact score is summed, as compact_dot would.
    """
    acc = vote_sign(live_score, live_count)
    remaining = counters[VOTE_TOTAL]
    n_voters = counters[N_VOTERS]
    if n_voters == 0 or (stop_early and (acc >= remaining or acc < -remaining)):
        return acc
    hit_k, hit_old, hit_count, order, lane_view, lane_vals = scratch
    n = vals.shape[0]
    # order[:n]: positions grouped by lane; order[n:n + UNROLL + 1]: each lane's start there.
    starts = order[n : n + UNROLL + 1]
    fill = order[n + UNROLL + 1 : n + 2 * UNROLL + 1]
    for lane in range(UNROLL + 1):
        starts[lane] = 0
    for k in range(n):
        starts[(cols[k] & LANE_MASK) + 1] += 1
    for lane in range(UNROLL):
        starts[lane + 1] += starts[lane]
        fill[lane] = starts[lane]
    for k in range(n):
        lane = cols[k] & LANE_MASK
        order[fill[lane]] = k
        fill[lane] += 1
    view = lane_view[:n]
    row_vals = lane_vals[:n]
    lanes = lane_vals[n : n + UNROLL]
    magnitude = 0.0
    for q in range(n):
        k = order[q]
        view[q] = w[cols[k]]
        row_vals[q] = vals[k]
        magnitude += abs(view[q] * row_vals[q])
    for age in range(n_voters):
        hit_count[age] = 0
    oldest = counters[DROPPED_VOTERS]
    newest = oldest + n_voters - 1
    hits = 0
    for q in range(n):
        c = cols[order[q]]
        p = column_newest[c]
        newer = newest + 1
        while live_entry(p, c, log_cols, links, oldest, newer):
            newer = links[p, VOTER]
            age = newest - newer
            j = hit_count[age]
            old = log_old[0, p]
            hit_k[age, j] = q
            hit_old[age, j] = old
            hit_count[age] = j + 1
            magnitude += abs(old * row_vals[q])
            hits += 1
            p = links[p, PREV]
    roundings = 2 * n + hits + UNROLL
    bound = ESTIMATE_ROUNDINGS * roundings * (UNIT_ROUNDOFF * magnitude + SMALLEST_SUBNORMAL)
    estimate = live_score
    score = live_score
    exact = True
    capacity = log_counts.shape[0]
    slot = (counters[LOG_HEAD] + n_voters - 1) % capacity
    for age in range(n_voters):
        for j in range(hit_count[age]):
            q = hit_k[age, j]
            old = hit_old[age, j]
            estimate += (old - view[q]) * row_vals[q]
            view[q] = old
        if hit_count[age] > 0:
            exact = False
        if not exact and not abs(estimate) > bound:  # also when either is NaN
            score = lane_score(order, view, row_vals, lanes)
            estimate = score
            exact = True
        count = log_counts[slot]
        acc += vote_sign(score if exact else estimate, count)
        slot = slot - 1 if slot > 0 else capacity - 1
        remaining -= count
        if stop_early and (acc >= remaining or acc < -remaining):
            break
    return acc
