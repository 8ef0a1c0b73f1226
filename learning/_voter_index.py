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
VoteScratch = tuple[Ints, Floats, Ints, Ints, Ints, Floats, Floats]


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
    (hit_k, hit_old, hit_count, hit_lanes, order, lane_view, lane_vals); ``order`` and
    ``lane_vals`` also hold the lane starts, fill cursors and sums past the row's entries."""
    return (
        np.empty((voters, longest), dtype=np.int64),
        np.empty((voters, longest)),
        np.zeros(voters, dtype=np.int64),
        np.zeros(voters, dtype=np.int64),
        np.empty(longest + 2 * UNROLL + 1, dtype=np.int64),
        np.empty(longest),
        np.empty(longest + UNROLL),
    )


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
    are positions in the lane layout below, ``hit_old`` the values, ``hit_lanes[age]`` their
    lanes as bits; each voter logs a column at most once). The row
    is laid out lane by lane (``order``: lane j's positions from ``starts[j]``, increasing, with
    the live weights in ``lane_view``); voter by voter, newest first, its old values are written
    there and only the written lanes are re-summed, in the order and with the combination of
    :func:`learning._voters.rescore_lanes`, so every voter's score is compact_dot's bit for bit
    (a voter none of whose entries meets x scores x as the next newer one).
    """
    acc = vote_sign(live_score, live_count)
    remaining = counters[VOTE_TOTAL]
    n_voters = counters[N_VOTERS]
    if n_voters == 0 or (stop_early and (acc >= remaining or acc < -remaining)):
        return acc
    hit_k, hit_old, hit_count, hit_lanes, order, lane_view, lane_vals = scratch
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
    lanes = lane_vals[n : n + UNROLL]
    for q in range(n):
        k = order[q]
        lane_view[q] = w[cols[k]]
        lane_vals[q] = vals[k]
    for age in range(n_voters):
        hit_count[age] = 0
        hit_lanes[age] = 0
    oldest = counters[DROPPED_VOTERS]
    newest = oldest + n_voters - 1
    for q in range(n):
        c = cols[order[q]]
        bit = 1 << (c & LANE_MASK)
        p = column_newest[c]
        newer = newest + 1
        while live_entry(p, c, log_cols, links, oldest, newer):
            newer = links[p, VOTER]
            age = newest - newer
            j = hit_count[age]
            hit_k[age, j] = q
            hit_old[age, j] = log_old[0, p]
            hit_count[age] = j + 1
            hit_lanes[age] |= bit
            p = links[p, PREV]
    for lane in range(UNROLL):
        total = 0.0
        for q in range(starts[lane], starts[lane + 1]):
            total += lane_view[q] * lane_vals[q]
        lanes[lane] = total
    score = live_score
    capacity = log_counts.shape[0]
    head = counters[LOG_HEAD]
    for age in range(n_voters):
        for j in range(hit_count[age]):
            lane_view[hit_k[age, j]] = hit_old[age, j]
        changed = hit_lanes[age]
        if changed:
            for lane in range(UNROLL):
                if changed & (1 << lane):
                    total = 0.0
                    for q in range(starts[lane], starts[lane + 1]):
                        total += lane_view[q] * lane_vals[q]
                    lanes[lane] = total
            score = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
        count = log_counts[(head + n_voters - 1 - age) % capacity]
        acc += vote_sign(score, count)
        remaining -= count
        if stop_early and (acc >= remaining or acc < -remaining):
            break
    return acc
