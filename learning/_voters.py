"""The voted predictor's voters as an update log, bounded in bytes (compiled).

Freund & Schapire's voted perceptron lets every weight matrix the learner has held vote, each with
its survival count. Voter m is the weights held just before update m. Instead of a dense copy per
voter, the log keeps, for each update since the oldest kept voter, the columns it changed and the
**old** values there (one per touched row: binary one, multiclass the true and the predicted
class): O(nnz) per voter, whatever the dimension.

Scoring a row x with every voter, newest first, starts from the live weights on x's columns (a
compact view: one value per stored column) and walks the log backwards, writing each update's old
values back into the view; after update m's entry is undone the view holds voter m's weights on
x's columns, which are scored exactly like a dense copy would be (same values, same partial-sum
order). The cost per event is O(voters x nnz(x) + log entries), and nothing of size d is touched
for a sparse row.

Layout: voters are a ring of ``len(log_counts)`` slots (oldest at ``counters[LOG_HEAD]``,
``counters[N_VOTERS]`` of them); slot s holds the survival count, the rows the update touched
(``log_rows[s]``, -1 for none) and where its entries start in the entry ring (``log_start[s]``,
``log_len[s]`` entries). Entry e is ``log_cols[e]`` with the old values ``log_old[0, e]`` (first
touched row) and ``log_old[1, e]`` (second; multiclass only: a binary log_old has one row). A dense
row's update with no zero is logged as a **dense run**: its first ``log_cols`` is ``DENSE_RUN`` and
its columns are 0 .. len-1 (the others are not written, halving the bytes an update writes);
:meth:`learning._arrays.LinearState.ordered_log` spells the columns out.
``counters[POOL_USED]`` entries are live, the next one goes at ``counters[POOL_TAIL]``. The
caller sizes both rings before a batch (see
:meth:`learning._arrays.LinearState.ensure_log_capacity`), so a kernel never runs out of room.

The bound: at most ``max_voters`` voters and ``max_entries`` entries (the byte bound divided by
the bytes of one entry). A new voter that would exceed either first drops the **oldest** voters
(their entries are freed); their count and survival mass go to ``DROPPED_VOTERS`` /
``DROPPED_VOTES``. An update with more entries than the whole bound cannot be logged: every voter
is dropped, the new one too. Below the bound the vote is exact.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from learning._kernels import (
    DROPPED_VOTERS,
    DROPPED_VOTES,
    LANE_MASK,
    LOG_HEAD,
    N_VOTERS,
    POOL_TAIL,
    POOL_USED,
    UNROLL,
    VOTE_TOTAL,
    Floats,
    Ints,
    _inline,
    _jit,
    argmax_tie,
    compact_dot,
    vote_decided,
    vote_sign,
)

NO_ROW = -1
ALL_LANES = (1 << UNROLL) - 1
"""A lane mask (see :func:`restore`) naming all four lanes."""
DENSE_RUN = -1
"""``log_cols`` at an entry's start when its columns are 0 .. len-1 (a dense row's update with no
zero, logged without wrapping): the entry's other ``log_cols`` are then not written."""
FILTER_WORDS = 64
"""Words of the per-event bit filter over x's columns (4,096 bits: column c sets bit c mod 4096)."""
FILTER_MASK = FILTER_WORDS * 64 - 1
WORD_SHIFT = 6
BIT_MASK = 63


@_jit
def column_filter(cols: Ints) -> NDArray[np.uint64]:
    """A bit set holding every column of x (mod 4096): most log entries miss x, and it says so."""
    bits = np.zeros(FILTER_WORDS, dtype=np.uint64)
    for k in range(cols.shape[0]):
        b = cols[k] & FILTER_MASK
        bits[b >> WORD_SHIFT] |= np.uint64(1) << np.uint64(b & BIT_MASK)
    return bits


MAP_COLUMNS_PER_ROW = 1024
"""A batch of sparse rows builds the map when it has a row per this many columns of the
weights: filling it (4 bytes a column) then costs a row far less than the binary searches it
saves (a few per voter)."""


@_jit
def position_map(rows: int, dense: bool, width: int, voting: bool) -> NDArray[np.int32]:
    """The ``positions`` scratch of :func:`vote_binary` for a batch of ``rows`` rows: -1 for each
    of ``width`` columns, or empty when the batch is dense, short or does not vote."""
    if dense or not voting or rows * MAP_COLUMNS_PER_ROW < width:
        return np.zeros(0, dtype=np.int32)
    return np.full(width, -1, dtype=np.int32)


@_jit
def find_column(cols: Ints, c: int) -> int:
    """Position of column c in the sorted ``cols``, or -1."""
    lo = 0
    hi = cols.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if cols[mid] < c:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < cols.shape[0] and cols[lo] == c else -1


@_jit
def log_needs_room(  # noqa: PLR0917 - numba kernels take positional arrays
    entries: int,
    log_counts: Ints,
    log_cols: Ints,
    counters: Ints,
    max_voters: int,
    max_entries: int,
) -> bool:
    """Whether one more voter of ``entries`` entries may not fit the log's current arrays (they
    can still grow toward the bounds: see LinearState.ensure_log_capacity)."""
    voter_room = log_counts.shape[0]
    entry_room = log_cols.shape[0]
    return bool(
        (voter_room < max_voters and counters[N_VOTERS] >= voter_room)
        or (entry_room < max_entries and counters[POOL_USED] + entries > entry_room)
    )


@_inline
def drop_oldest(log_counts: Ints, log_len: Ints, counters: Ints) -> None:
    """Forget the oldest voter (and free its entries), counting what was dropped."""
    slot = counters[LOG_HEAD]
    counters[DROPPED_VOTERS] += 1
    counters[DROPPED_VOTES] += log_counts[slot]
    counters[VOTE_TOTAL] -= log_counts[slot]
    counters[POOL_USED] -= log_len[slot]
    counters[N_VOTERS] -= 1
    counters[LOG_HEAD] = (slot + 1) % log_counts.shape[0]
    if counters[N_VOTERS] == 0:
        counters[LOG_HEAD] = 0
        counters[POOL_USED] = 0
        counters[POOL_TAIL] = 0


@_inline
def open_entry(  # noqa: PLR0917 - numba kernels take positional arrays
    count: int,
    entries: int,
    first_row: int,
    second_row: int,
    log_counts: Ints,
    log_rows: Ints,
    log_start: Ints,
    log_len: Ints,
    counters: Ints,
    max_voters: int,
    max_entries: int,
    pool_capacity: int,
) -> int:
    """Record a finished voter with survival ``count`` whose update changes ``entries`` columns.

    Returns the first entry position to fill (the update writes the old values there, see
    :func:`learning._learn.apply_update`), or -1 when the voter is not kept (count 0: it has no
    vote and, being the first, no older voter needs its entries; or the update alone exceeds the
    bound). Drops the oldest voters first when the bound requires it.
    """
    if count <= 0:
        return -1
    if entries > max_entries:
        counters[DROPPED_VOTERS] += 1
        counters[DROPPED_VOTES] += count
        while counters[N_VOTERS] > 0:
            drop_oldest(log_counts, log_len, counters)
        return -1
    while counters[N_VOTERS] >= max_voters or counters[POOL_USED] + entries > max_entries:
        drop_oldest(log_counts, log_len, counters)
    slot = (counters[LOG_HEAD] + counters[N_VOTERS]) % log_counts.shape[0]
    start = counters[POOL_TAIL]
    log_counts[slot] = count
    log_rows[slot, 0] = first_row
    log_rows[slot, 1] = second_row
    log_start[slot] = start
    log_len[slot] = entries
    counters[N_VOTERS] += 1
    counters[VOTE_TOTAL] += count
    counters[POOL_USED] += entries
    tail = start + entries
    counters[POOL_TAIL] = tail % pool_capacity if pool_capacity > 0 else 0
    return int(start)


@_jit
def restore(  # noqa: PLR0917 - numba kernels take positional arrays
    view: Floats,
    cols: Ints,
    dense: bool,
    bits: NDArray[np.uint64],
    log_cols: Ints,
    log_old: Floats,
    which: int,
    start: int,
    length: int,
    positions: NDArray[np.int32],
) -> int:
    """Write one logged update's old values (row ``which`` of ``log_old``) into ``view``.

    ``view`` holds one value per stored column of the row (dense rows: per coordinate, narrower
    than the weights when the vocabulary grew since; the rest is zero in x and skipped). Returns
    the lanes (bit j: columns ≡ j mod 4) of the row's columns that were written: 0 when none
    was, and the voter then scores x as the next one. ``positions``: empty, or the position of
    each of a sparse row's columns in it (-1 for the others; see :func:`vote_binary`).
    """
    if length > 0 and log_cols[start] == DENSE_RUN:
        return restore_run(view, cols, dense, log_old, which, start, length)
    capacity = log_cols.shape[0]
    n = cols.shape[0]
    position = start
    changed = 0
    for _ in range(length):
        if position >= capacity:
            position -= capacity
        c = log_cols[position]
        if dense:
            if c < n:
                view[c] = log_old[which, position]
                changed |= 1 << (c & LANE_MASK)
        else:
            b = c & FILTER_MASK
            if (bits[b >> WORD_SHIFT] >> np.uint64(b & BIT_MASK)) & np.uint64(1):
                k = positions[c] if positions.shape[0] > 0 else find_column(cols, c)
                if k >= 0:
                    view[k] = log_old[which, position]
                    changed |= 1 << (c & LANE_MASK)
        position += 1
    return changed


@_jit
def restore_run(  # noqa: PLR0917 - numba kernels take positional arrays
    view: Floats, cols: Ints, dense: bool, log_old: Floats, which: int, start: int, length: int
) -> int:
    """:func:`restore` for a dense run (columns 0 .. length-1 from ``start``): O(nnz(x))."""
    if dense:
        m = min(cols.shape[0], length)
        for c in range(m):
            view[c] = log_old[which, start + c]
        return ALL_LANES if m >= UNROLL else (1 << m) - 1
    changed = 0
    for k in range(cols.shape[0]):
        c = cols[k]
        if c >= length:
            break
        view[k] = log_old[which, start + c]
        changed |= 1 << (c & LANE_MASK)
    return changed


@_jit
def lane_members(cols: Ints, dense: bool) -> tuple[Ints, Ints]:
    """(members, starts): the positions k of the row's entries grouped by lane (column mod 4;
    a dense row's coordinate mod 4), increasing within a lane; lane j's are
    ``members[starts[j]:starts[j + 1]]``."""
    n = cols.shape[0]
    starts = np.zeros(UNROLL + 1, dtype=np.int64)
    for k in range(n):
        starts[((k if dense else cols[k]) & LANE_MASK) + 1] += 1
    for lane in range(UNROLL):
        starts[lane + 1] += starts[lane]
    fill = starts[:UNROLL].copy()
    members = np.empty(n, dtype=np.int64)
    for k in range(n):
        lane = (k if dense else cols[k]) & LANE_MASK
        members[fill[lane]] = k
        fill[lane] += 1
    return members, starts


@_inline
def rescore_lanes(  # noqa: PLR0917 - numba kernels take positional arrays
    view: Floats, vals: Floats, members: Ints, starts: Ints, lanes: Floats, changed: int
) -> float:
    """view·x after the lanes in ``changed`` were written, each such lane summed again.

    :func:`learning._kernels.compact_dot` sums lane j (the columns ≡ j mod 4; a dense row's
    coordinates ≡ j mod 4) on its own, in column order from +0.0, and combines the four lanes
    in a fixed order; a lane none of whose values changed keeps its sum, so re-summing only the
    changed lanes (``lanes`` holds each lane's sum) gives compact_dot's result bit for bit.
    """
    for lane in range(UNROLL):
        if changed & (1 << lane):
            total = 0.0
            for p in range(starts[lane], starts[lane + 1]):
                k = members[p]
                total += view[k] * vals[k]
            lanes[lane] = total
    return float((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]))


@_jit
def newest_slot(counters: Ints, capacity: int, age: int) -> int:
    """Slot of the voter ``age`` places before the newest one (0 = the newest)."""
    return int((counters[LOG_HEAD] + counters[N_VOTERS] - 1 - age) % capacity)


@_jit
def vote_binary(  # noqa: PLR0917 - numba kernels take positional arrays
    w: Floats,
    cols: Ints,
    vals: Floats,
    dense: bool,
    live_score: float,
    live_count: int,
    log_counts: Ints,
    log_start: Ints,
    log_len: Ints,
    log_cols: Ints,
    log_old: Floats,
    counters: Ints,
    view: Floats,
    stop_early: bool,
    positions: NDArray[np.int32],
) -> int:
    """Σ cₙ·sign(wₙ·x̃) over the live weights and the kept voters (its sign with ``stop_early``).

    With ``stop_early`` the walk stops as soon as the votes left cannot change the sign.
    ``positions``: empty, or -1 for each column of the weights (see :func:`position_map`): a
    sparse row's log entries then find their place in x by one look-up instead of a binary
    search; it is left all -1 again.
    """
    acc = vote_sign(live_score, live_count)
    remaining = counters[VOTE_TOTAL]
    n_voters = counters[N_VOTERS]
    if n_voters == 0 or (stop_early and (acc >= remaining or acc < -remaining)):
        return acc
    n = vals.shape[0]
    for k in range(n):
        view[k] = w[cols[k]]
    capacity = log_counts.shape[0]
    score = live_score
    bits = column_filter(cols) if not dense else np.zeros(0, dtype=np.uint64)
    members, starts = lane_members(cols, dense)
    lanes = np.empty(UNROLL)
    rescore_lanes(view, vals, members, starts, lanes, ALL_LANES)
    mapped = positions.shape[0] > 0 and not dense
    if mapped:
        for k in range(n):
            positions[cols[k]] = k
    for age in range(n_voters):
        slot = newest_slot(counters, capacity, age)
        changed = restore(
            view, cols, dense, bits, log_cols, log_old, 0, log_start[slot], log_len[slot],
            positions,
        )  # fmt: skip
        if changed:
            score = rescore_lanes(view, vals, members, starts, lanes, changed)
        count = log_counts[slot]
        acc += vote_sign(score, count)
        remaining -= count
        if stop_early and (acc >= remaining or acc < -remaining):
            break
    if mapped:
        for k in range(n):
            positions[cols[k]] = -1
    return acc


@_jit
def vote_binary_columns(  # noqa: PLR0917 - numba kernels take positional arrays
    cols: Ints,
    vals: Floats,
    live_score: float,
    live_count: int,
    log_counts: Ints,
    counters: Ints,
    columns: Floats,
    lanes: Floats,
    stop_early: bool,
) -> int:
    """As :func:`vote_binary`, from dense copies of the kept voters (``columns[:, slot]``).

    Used when the copies are small (see ``LinearState.voter_columns_for``). All voters are scored
    in one pass over x's entries, vectorised across voters; voter ``slot``'s score is summed in
    lanes[cols mod 4, slot] in increasing column order, exactly as :func:`compact_dot` sums it.
    """
    acc = vote_sign(live_score, live_count)
    remaining = counters[VOTE_TOTAL]
    n_voters = counters[N_VOTERS]
    if n_voters == 0 or (stop_early and (acc >= remaining or acc < -remaining)):
        return acc
    capacity = columns.shape[1]
    for lane in range(UNROLL):
        for slot in range(capacity):
            lanes[lane, slot] = 0.0
    for k in range(vals.shape[0]):
        c = cols[k]
        v = vals[k]
        lane = c & LANE_MASK
        for slot in range(capacity):
            lanes[lane, slot] += columns[c, slot] * v
    for age in range(n_voters):
        slot = newest_slot(counters, capacity, age)
        score = (lanes[0, slot] + lanes[1, slot]) + (lanes[2, slot] + lanes[3, slot])
        acc += vote_sign(score, log_counts[slot])
    return acc


@_jit
def vote_multiclass(  # noqa: PLR0917 - numba kernels take positional arrays
    weights: Floats,
    cols: Ints,
    vals: Floats,
    dense: bool,
    n_classes: int,
    live_scores: Floats,
    live_choice: int,
    live_count: int,
    log_counts: Ints,
    log_rows: Ints,
    log_start: Ints,
    log_len: Ints,
    log_cols: Ints,
    log_old: Floats,
    counters: Ints,
    state: np.uint64,
    view: Floats,
    voter_scores: Floats,
    votes: Ints,
    stop_early: bool,
) -> int:
    """The voted class; ``votes[:n_classes]`` receives each class's survival-weighted votes.

    Each voter votes for its argmax class (ties as in :func:`argmax_tie`, without drawing). Walking
    back one update changes two rows, so only their scores are recomputed per voter. With
    ``stop_early`` the walk stops once the remaining votes cannot change the winner.
    """
    for c in range(n_classes):
        votes[c] = 0
    votes[live_choice] += live_count
    remaining = counters[VOTE_TOTAL]
    n_voters = counters[N_VOTERS]
    if n_voters > 0 and not (stop_early and vote_decided(votes, n_classes, remaining)):
        n = vals.shape[0]
        for c in range(n_classes):
            voter_scores[c] = live_scores[c]
            for k in range(n):
                view[c, k] = weights[c, cols[k]]
        capacity = log_counts.shape[0]
        bits = column_filter(cols) if not dense else np.zeros(0, dtype=np.uint64)
        no_positions = np.zeros(0, dtype=np.int32)
        for age in range(n_voters):
            slot = newest_slot(counters, capacity, age)
            for which in range(2):
                row = log_rows[slot, which]
                if row == NO_ROW:
                    continue
                if restore(
                    view[row], cols, dense, bits, log_cols, log_old, which, log_start[slot],
                    log_len[slot], no_positions,
                ) != 0:  # fmt: skip
                    voter_scores[row] = compact_dot(view[row], cols, vals, dense)
            choice, _ = argmax_tie(voter_scores, n_classes, state)
            votes[choice] += log_counts[slot]
            remaining -= log_counts[slot]
            if stop_early and vote_decided(votes, n_classes, remaining):
                break
    choice, _ = argmax_tie(votes, n_classes, state)
    return choice


def empty_log(capacity: int, entries: int, touched_rows: int) -> dict[str, NDArray[np.generic]]:
    """Log arrays with room for ``capacity`` voters and ``entries`` entries.

    ``touched_rows``: rows an update changes (1 binary, 2 multiclass): the rows of ``log_old``.
    """
    return {
        "log_counts": np.zeros(capacity, dtype=np.int64),
        "log_rows": np.full((capacity, 2), NO_ROW, dtype=np.int64),
        "log_start": np.zeros(capacity, dtype=np.int64),
        "log_len": np.zeros(capacity, dtype=np.int64),
        "log_cols": np.zeros(entries, dtype=np.int64),
        "log_old": np.zeros((touched_rows, entries)),
    }
