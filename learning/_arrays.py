"""The state arrays of a linear learner, how they grow, and their sparse saved form.

One object holds everything the kernels read and write (see :mod:`learning._kernels` for the
layout and :mod:`learning._voters` for the update log). Weights grow by zero padding, which is
exact: a new coordinate or class starts at weight zero and contributes exact zeros to every dot
product. The log grows (doubling) up to its bounds before a batch needs the room.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from learning import _kernels as k
from learning._state_pack import PACK_KEY
from learning._voter_index import build_index
from learning._voters import DENSE_RUN, NO_ROW, empty_log, log_needs_room
from learning.errors import StateError

logger = logging.getLogger(__name__)

ARRAY_DTYPES: dict[str, np.dtype[np.generic]] = {
    "weights": np.dtype(np.float64),
    "weight_sums": np.dtype(np.float64),
    "row_sq": np.dtype(np.float64),
    "log_counts": np.dtype(np.int64),
    "log_rows": np.dtype(np.int64),
    "log_start": np.dtype(np.int64),
    "log_len": np.dtype(np.int64),
    "log_cols": np.dtype(np.int64),
    "log_old": np.dtype(np.float64),
    "counters": np.dtype(np.int64),
    "rng": np.dtype(np.uint64),
}
FLOAT_ARRAYS = ("weights", "weight_sums", "row_sq", "log_old")
COUNT_ARRAYS = ("log_counts", "log_start", "log_len", "log_cols", "counters")
LOG_ARRAYS = ("log_counts", "log_rows", "log_start", "log_len", "log_cols", "log_old")
BINARY_ROWS_TOUCHED = 1
MULTICLASS_ROWS_TOUCHED = 2
"""Rows one update changes: the binary weights; the true and the predicted class."""
VOTER_COLUMNS_BYTES = 2**20
"""Dense copies of a binary learner's voters are also kept (a derived cache, never saved) when
they take at most this much: dimension x max_voters x 8 bytes. They make the vote one vectorised
pass over x (see learning._voters.vote_binary_columns); larger models vote from the log alone."""
NO_COLUMNS = np.zeros((0, 0))
KERNEL_ARRAYS = frozenset({*ARRAY_DTYPES, "voter_columns"})
INDEX_STAMP_COUNTERS = (
    k.UPDATES, k.DROPPED_VOTERS, k.N_VOTERS, k.LOG_HEAD, k.POOL_USED, k.POOL_TAIL,
)  # fmt: skip
"""Counters that change whenever the log does: the per-column index is current while they and
the log's arrays are those it was last kept up to date with."""


def entry_bytes(touched_rows: int) -> int:
    """Bytes of one update-log entry: a column and the old value of each touched row (16, 24)."""
    return 8 * (1 + touched_rows)


def _pad(array: NDArray[np.generic], shape: tuple[int, ...]) -> NDArray[np.generic]:
    if array.shape == shape:
        return array
    grown = np.zeros(shape, dtype=array.dtype)
    grown[tuple(slice(0, size) for size in array.shape)] = array
    return grown


SNAPSHOT_BUFFERS = 2
"""Pairs of (weights, weight_sums) buffers a state keeps for its snapshots (see SnapshotPool)."""
UNSHARED_REFERENCES = 3
"""``sys.getrefcount`` of a pooled buffer nothing else holds: the pool's list, the loop variable
and getrefcount's own argument. Any snapshot, view or reader holding it adds one."""
POOLED_ARRAYS = ("weights", "weight_sums")


class SnapshotPool:
    """Reusable read-only copies of the weights for snapshots: no fresh memory per snapshot.

    A fresh 2^18-coordinate copy costs mostly page faults, not copying. A pooled buffer is
    rewritten only while nothing but the pool references it (CPython reference counts are exact:
    a snapshot, a view of it or a reader holding either keeps it), so a snapshot a reader holds
    never changes. When every buffer is held, a new copy is made (and pooled if there is room).
    """

    def __init__(self) -> None:
        self._buffers: list[NDArray[np.float64]] = []

    def copy_of(self, array: NDArray[np.float64]) -> NDArray[np.float64]:
        """A read-only copy of ``array``."""
        for buffer in self._buffers:
            if sys.getrefcount(buffer) <= UNSHARED_REFERENCES and buffer.shape == array.shape:
                buffer.flags.writeable = True
                np.copyto(buffer, array)
                buffer.flags.writeable = False
                return buffer
        copy = array.copy()
        copy.flags.writeable = False
        if len(self._buffers) < SNAPSHOT_BUFFERS * len(POOLED_ARRAYS):
            self._buffers.append(copy)
        return copy


def _same_stamp(first: tuple[object, ...], second: tuple[object, ...]) -> bool:
    """Stamps agree: the very same log array (identity) and equal sizes and counters."""
    return (
        len(first) == len(second)
        and first[0] is second[0]
        and all(a == b for a, b in zip(first[1:], second[1:], strict=True))
    )


def _grown(current: int, needed: int, bound: int) -> int:
    """Capacity for ``needed`` (at most ``bound``), doubling so growth is amortised."""
    target = min(needed, bound)
    if target <= current:
        return current
    return min(bound, max(target, 2 * current))


class LinearState:
    """Weights, lazy-averaging sums, the voters' update log, counters and generator state.

    Parameters
    ----------
    rows
        1 for a binary learner, the number of classes for a multiclass one.
    dimension
        len(x̃).
    seed
        Initial state of the tie-breaking generator.
    """

    weights: NDArray[np.float64]
    weight_sums: NDArray[np.float64]
    row_sq: NDArray[np.float64]
    log_counts: NDArray[np.int64]
    log_rows: NDArray[np.int64]
    log_start: NDArray[np.int64]
    log_len: NDArray[np.int64]
    log_cols: NDArray[np.int64]
    log_old: NDArray[np.float64]
    voter_columns: NDArray[np.float64]
    counters: NDArray[np.int64]
    rng: NDArray[np.uint64]
    _index: tuple[NDArray[np.int64], NDArray[np.int64]] | None = None
    """The log's per-column index (learning._voter_index): derived, never saved or copied."""
    _index_stamp: tuple[object, ...] = ()
    _snapshot_pool: SnapshotPool | None = None
    """Buffers of :meth:`compact_copy` (derived, never saved or copied)."""
    irregular: set[str]
    """Arrays that are not writable and C-contiguous (a read-only copy's): empty for every state
    this module builds, and the single-event kernels' compiled entries take the arrays as such
    (see learning._single), so they are used only while it is empty."""

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in KERNEL_ARRAYS:
            self.__dict__.pop(PACK_KEY, None)  # it holds the arrays replaced (learning._state_pack)
            irregular = self.__dict__.setdefault("irregular", set())
            if value.flags.c_contiguous and value.flags.writeable:
                irregular.discard(name)
            else:
                irregular.add(name)

    def __init__(
        self,
        rows: int,
        dimension: int,
        seed: int = 0,
        touched_rows: int = MULTICLASS_ROWS_TOUCHED,
    ) -> None:
        self.weights = np.zeros((rows, dimension))
        self.weight_sums = np.zeros((rows, dimension))
        self.row_sq = np.zeros(rows)
        for name, array in empty_log(0, 0, touched_rows).items():
            setattr(self, name, array)
        self.counters = np.zeros(k.N_COUNTERS, dtype=np.int64)
        self.rng = np.array([seed], dtype=np.uint64)
        self.voter_columns = NO_COLUMNS

    @property
    def rows(self) -> int:
        return int(self.weights.shape[0])

    @property
    def dimension(self) -> int:
        return int(self.weights.shape[1])

    @property
    def touched_rows(self) -> int:
        """Rows one update changes (1 binary, 2 multiclass): the rows of ``log_old``."""
        return int(self.log_old.shape[0])

    def counter(self, index: int) -> int:
        return int(self.counters[index])

    def ensure_shape(self, rows: int, dimension: int) -> None:
        """Grow to at least ``rows`` x ``dimension`` (never shrinks)."""
        if rows <= self.weights.shape[0] and dimension <= self.weights.shape[1]:
            return
        shape = (max(rows, self.rows), max(dimension, self.dimension))
        if shape == self.weights.shape:
            return
        self.voter_columns = NO_COLUMNS  # its shape no longer fits: rebuilt when next wanted
        self.weights = _pad(self.weights, shape)  # type: ignore[assignment]
        self.weight_sums = _pad(self.weight_sums, shape)  # type: ignore[assignment]
        self.row_sq = _pad(self.row_sq, (shape[0],))  # type: ignore[assignment]

    def ensure_log_capacity(
        self, voters: int, entries: int, max_voters: int, max_entries: int
    ) -> None:
        """Room for ``voters`` more voters and ``entries`` more log entries, within the bounds.

        ``max_entries`` may be below the byte bound when the caller knows the log cannot hold more
        (``max_voters`` voters of at most so many entries each).

        Growing puts the log in order (oldest first) in the new arrays (see learning._voters).
        """
        n = self.counter(k.N_VOTERS)
        used = self.counter(k.POOL_USED)
        voter_capacity = _grown(self.log_counts.shape[0], n + voters, max_voters)
        entry_capacity = _grown(self.log_cols.shape[0], used + entries, max_entries)
        if (voter_capacity, entry_capacity) == (self.log_counts.shape[0], self.log_cols.shape[0]):
            return
        ordered = self.ordered_log()
        log = empty_log(voter_capacity, entry_capacity, self.touched_rows)
        for name in ("log_counts", "log_rows", "log_start", "log_len"):
            log[name][:n] = ordered[name]
        log["log_cols"][:used] = ordered["log_cols"]
        log["log_old"][:, :used] = ordered["log_old"]
        for name, array in log.items():
            setattr(self, name, array)
        self.voter_columns = NO_COLUMNS  # slots moved: rebuilt when next wanted
        self.counters[k.LOG_HEAD] = 0
        self.counters[k.POOL_TAIL] = used % entry_capacity if entry_capacity else 0

    def voter_columns_for(self, max_voters: int) -> NDArray[np.float64]:
        """The dense voter copies of a binary learner when small enough, rebuilt if stale.

        Column s is the voter in log slot s (free slots hold anything). Empty (0 x 0) when the
        copies would exceed VOTER_COLUMNS_BYTES; the kernels then vote from the log.
        """
        shape = (self.dimension, self.log_counts.shape[0])
        if self.voter_columns.shape == shape and shape[1] > 0:
            return self.voter_columns
        if self.rows != 1 or self.dimension * max_voters * 8 > VOTER_COLUMNS_BYTES:
            self.voter_columns = NO_COLUMNS
            return self.voter_columns
        columns = np.zeros(shape)
        capacity = max(shape[1], 1)
        head = self.counter(k.LOG_HEAD)
        for age, (_, weights) in enumerate(self.voter_list()):
            columns[:, (head + age) % capacity] = weights[0]
        self.voter_columns = columns
        return columns

    def _log_stamp(self) -> tuple[object, ...]:
        counters = tuple(int(self.counters[index]) for index in INDEX_STAMP_COUNTERS)
        return (self.log_cols, self.dimension, *counters)

    def voter_index(self) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """(column_newest, links): the log's per-column index, rebuilt when the log changed
        without it; empty while the log holds a dense run (see learning._voter_index)."""
        stamp = self._log_stamp()
        if self._index is None or not _same_stamp(stamp, self._index_stamp):
            self._index = build_index(
                self.log_counts, self.log_start, self.log_len, self.log_cols, self.counters,
                self.dimension,
            )  # fmt: skip
            self._index_stamp = stamp
        return self._index

    def index_kept(self) -> None:
        """The kernel kept :meth:`voter_index` up to date with the log's changes."""
        self._index_stamp = self._log_stamp()

    def longest_entry(self) -> int:
        """The most entries a kept voter's update holds (0 without voters)."""
        n = self.counter(k.N_VOTERS)
        if n == 0:
            return 0
        slots = (self.counter(k.LOG_HEAD) + np.arange(n)) % self.log_counts.shape[0]
        return int(self.log_len[slots].max())

    def needs_log_room(self, entries: int, max_voters: int, max_entries: int) -> bool:
        """Whether one more voter of ``entries`` entries may not fit the log's current arrays."""
        return bool(
            log_needs_room(
                entries, self.log_counts, self.log_cols, self.counters, max_voters, max_entries
            )
        )

    def ordered_log(self) -> dict[str, NDArray[np.generic]]:
        """The kept voters' log, oldest first, entries contiguous from 0 (a canonical form)."""
        n = self.counter(k.N_VOTERS)
        capacity = max(self.log_counts.shape[0], 1)
        slots = (self.counter(k.LOG_HEAD) + np.arange(n)) % capacity
        lengths = self.log_len[slots]
        entry_capacity = max(self.log_cols.shape[0], 1)
        starts = np.zeros(n, dtype=np.int64)
        if n:
            np.cumsum(lengths[:-1], out=starts[1:])
        total = int(lengths.sum())
        within = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
        positions = (np.repeat(self.log_start[slots], lengths) + within) % entry_capacity
        columns = self.log_cols[positions]
        if total:  # a dense run's entries are its coordinates 0, 1, 2, ... in canonical form
            heads = columns[np.minimum(starts, total - 1)]
            dense = (lengths > 0) & (heads == DENSE_RUN)
            if dense.any():
                in_dense_run = np.repeat(dense, lengths)
                columns[in_dense_run] = within[in_dense_run]
        return {
            "log_counts": self.log_counts[slots].copy(),
            "log_rows": self.log_rows[slots].copy(),
            "log_start": starts,
            "log_len": lengths.copy(),
            "log_cols": columns,
            "log_old": self.log_old[:, positions].copy(),
        }

    def averaged_weights(self) -> NDArray[np.float64]:
        """w̄ = mean of the post-event weights over all events seen (zeros before any)."""
        seen = self.counter(k.SEEN)
        if seen == 0:
            return np.zeros_like(self.weights)
        total: NDArray[np.float64] = (self.weight_sums + seen * self.weights) / seen
        return total

    def voter_list(self) -> list[tuple[int, NDArray[np.float64]]]:
        """Kept finished voters, oldest first: (survival count, weights), rebuilt from the log."""
        log = self.ordered_log()
        current = self.weights.copy()
        voters: list[tuple[int, NDArray[np.float64]]] = []
        for v in range(self.counter(k.N_VOTERS) - 1, -1, -1):
            start = int(log["log_start"][v])
            columns = log["log_cols"][start : start + int(log["log_len"][v])]
            old = log["log_old"][:, start : start + columns.shape[0]]
            for which, row in enumerate(log["log_rows"][v].tolist()):
                if row != NO_ROW:
                    current[row, columns] = old[which]
            voters.append((int(log["log_counts"][v]), current.copy()))
        return voters[::-1]

    @property
    def nbytes(self) -> int:
        """Memory held by the arrays."""
        return sum(array.nbytes for array in self.arrays().values())

    def copy(self) -> LinearState:
        """A deep copy (same capacity), e.g. to restore after a refused batch."""
        copy = LinearState.__new__(LinearState)
        for name, array in self.arrays().items():
            setattr(copy, name, array.copy())
        copy.voter_columns = self.voter_columns.copy()
        return copy

    def compact_copy(self) -> LinearState:
        """A read-only deep copy with the log in canonical order (for snapshots and saving)."""
        copy = LinearState.__new__(LinearState)
        if self._snapshot_pool is None:
            self._snapshot_pool = SnapshotPool()
        for name in ARRAY_DTYPES:
            if name in POOLED_ARRAYS:
                setattr(copy, name, self._snapshot_pool.copy_of(getattr(self, name)))
            elif name not in LOG_ARRAYS:
                setattr(copy, name, getattr(self, name).copy())
        for name, array in self.ordered_log().items():
            setattr(copy, name, array)
        copy.counters[k.LOG_HEAD] = 0
        copy.counters[k.POOL_TAIL] = 0
        copy.voter_columns = NO_COLUMNS
        for name, array in copy.arrays().items():
            array.flags.writeable = False
            copy.irregular.add(name)
        return copy

    def arrays(self) -> dict[str, NDArray[np.generic]]:
        """Every array by name."""
        return {name: getattr(self, name) for name in ARRAY_DTYPES}

    def sparse_arrays(self) -> dict[str, NDArray[np.generic]]:
        """The state with only its touched coordinates: O(updates x nnz), not O(dimension).

        A coordinate is stored when its weight or its averaging sum is not the initial zero (a
        stored -0.0 keeps its sign); the log is stored in canonical order.
        :meth:`from_sparse_arrays` inverts it.
        """
        touched = np.flatnonzero(
            (self.weights != 0.0).ravel()
            | (self.weight_sums != 0.0).ravel()
            | np.signbit(self.weights).ravel()
            | np.signbit(self.weight_sums).ravel()
        )
        counters = self.counters.copy()
        counters[k.LOG_HEAD] = 0
        counters[k.POOL_TAIL] = 0
        return {
            "shape": np.array(self.weights.shape, dtype=np.int64),
            "coordinates": touched.astype(np.int64),
            "weights": self.weights.ravel()[touched],
            "weight_sums": self.weight_sums.ravel()[touched],
            "row_sq": self.row_sq.copy(),
            **self.ordered_log(),
            "counters": counters,
            "rng": self.rng.copy(),
        }

    @classmethod
    def from_sparse_arrays(cls, arrays: Mapping[str, NDArray[np.generic]]) -> LinearState:
        """Rebuild from :meth:`sparse_arrays`, checking names, dtypes, shapes and invariants."""
        expected = {**ARRAY_DTYPES, "shape": np.dtype(np.int64), "coordinates": np.dtype(np.int64)}
        missing = set(expected) - set(arrays)
        if missing:
            raise StateError(f"model state lacks arrays {sorted(missing)}")
        for name, dtype in expected.items():
            if arrays[name].dtype != dtype:
                raise StateError(f"array {name!r} has dtype {arrays[name].dtype}, expected {dtype}")
        shape: NDArray[np.int64] = np.asarray(arrays["shape"], dtype=np.int64)
        if shape.shape != (2,) or (shape < 0).any():
            raise StateError(f"weights shape must be two non-negative sizes, got {shape.tolist()}")
        rows, dimension = (int(size) for size in shape)
        coordinates = arrays["coordinates"]
        n = coordinates.shape[0]
        for name in ("weights", "weight_sums"):
            if arrays[name].shape != (n,):
                raise StateError(f"array {name!r} has shape {arrays[name].shape}, expected ({n},)")
        if coordinates.ndim != 1 or (n and (
            coordinates[0] < 0 or coordinates[-1] >= rows * dimension
            or (np.diff(coordinates) <= 0).any()
        )):  # fmt: skip
            raise StateError("coordinates must increase strictly within the weights' shape")
        state = cls(rows, dimension)
        for name in ("weights", "weight_sums"):
            getattr(state, name).ravel()[coordinates] = arrays[name]
        for name in ("row_sq", "counters", "rng", *LOG_ARRAYS):
            setattr(state, name, np.ascontiguousarray(arrays[name]).copy())
        state._check_shapes()
        return state

    def _check_shapes(self) -> None:
        rows, dimension = self.weights.shape
        n_voters = self.counter(k.N_VOTERS) if self.counters.shape == (k.N_COUNTERS,) else -1
        entries = self.log_cols.shape[0]
        expected = {
            "row_sq": (rows,),
            "counters": (k.N_COUNTERS,),
            "rng": (1,),
            "log_counts": (n_voters,),
            "log_rows": (n_voters, 2),
            "log_start": (n_voters,),
            "log_len": (n_voters,),
            "log_old": (self.log_old.shape[0], entries),
        }
        for name, shape in expected.items():
            actual = getattr(self, name).shape
            if actual != shape:
                raise StateError(f"array {name!r} has shape {actual}, expected {shape}")
        if not 0 <= self.counter(k.ACTIVE_CLASSES) <= rows:
            raise StateError(f"{self.counter(k.ACTIVE_CLASSES)} active classes for {rows} rows")
        self._check_values()
        self._check_log(rows, dimension)

    def _check_log(self, rows: int, dimension: int) -> None:
        """The log in canonical order: contiguous entries, valid rows and columns, sound sums."""
        starts = np.zeros_like(self.log_len)
        np.cumsum(self.log_len[:-1], out=starts[1:])
        if (
            not np.array_equal(starts, self.log_start)
            or self.log_len.sum() != self.log_cols.shape[0]
        ):
            raise StateError("voter log entries are not contiguous")
        if self.counter(k.POOL_USED) != self.log_cols.shape[0]:
            raise StateError("voter log size does not match its counter")
        if self.log_counts.sum() != self.counter(k.VOTE_TOTAL) or (self.log_counts <= 0).any():
            raise StateError("voter survival counts do not add up to the vote total")
        first, second = self.log_rows[:, 0], self.log_rows[:, 1]
        if ((first < 0) | (first >= rows) | (second < NO_ROW) | (second >= rows)).any():
            raise StateError("voter log names rows the weights do not have")
        if self.touched_rows not in (BINARY_ROWS_TOUCHED, MULTICLASS_ROWS_TOUCHED) or (
            self.touched_rows == BINARY_ROWS_TOUCHED and (second != NO_ROW).any()
        ):
            raise StateError("voter log old values do not match the rows its updates touch")
        if self.log_cols.shape[0] and self.log_cols.max() >= dimension:
            raise StateError("voter log names columns the weights do not have")
        if self.counter(k.LOG_HEAD) != 0 or self.counter(k.POOL_TAIL) != 0:
            raise StateError("voter log is not in canonical order")

    def _check_values(self) -> None:
        """Values no learning can produce: a non-finite float or a negative count."""
        for name in FLOAT_ARRAYS:
            if not np.isfinite(getattr(self, name)).all():
                raise StateError(f"array {name!r} holds NaN or infinite values")
        for name in COUNT_ARRAYS:
            if (getattr(self, name) < 0).any():
                raise StateError(f"array {name!r} holds negative counts")
