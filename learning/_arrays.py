"""The state arrays of a linear learner, and how they grow.

One object holds everything the kernels read and write (see :mod:`learning._kernels` for the
layout). Arrays grow by zero padding, which is exact: a new coordinate or class starts at weight
zero and contributes exact zeros to every dot product.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

from learning import _kernels as k
from learning.errors import StateError

logger = logging.getLogger(__name__)

ARRAY_DTYPES: dict[str, np.dtype[np.generic]] = {
    "weights": np.dtype(np.float64),
    "weight_sums": np.dtype(np.float64),
    "born": np.dtype(np.int64),
    "row_sq": np.dtype(np.float64),
    "voters": np.dtype(np.float64),
    "voter_counts": np.dtype(np.int64),
    "voter_order": np.dtype(np.int64),
    "counters": np.dtype(np.int64),
    "rng": np.dtype(np.uint64),
}
FLOAT_ARRAYS = ("weights", "weight_sums", "row_sq", "voters")
COUNT_ARRAYS = ("born", "voter_counts", "counters")


def _pad(array: NDArray[np.generic], shape: tuple[int, ...]) -> NDArray[np.generic]:
    if array.shape == shape:
        return array
    grown = np.zeros(shape, dtype=array.dtype)
    grown[tuple(slice(0, size) for size in array.shape)] = array
    return grown


class LinearState:
    """Weights, lazy-averaging sums, voters, counters and generator state of one learner.

    Parameters
    ----------
    rows
        1 for a binary learner, the number of classes for a multiclass one.
    dimension
        len(x̃).
    seed
        Initial state of the tie-breaking generator.
    """

    def __init__(self, rows: int, dimension: int, seed: int = 0) -> None:
        self.weights = np.zeros((rows, dimension))
        self.weight_sums = np.zeros((rows, dimension))
        self.born = np.zeros(rows, dtype=np.int64)
        self.row_sq = np.zeros(rows)
        self.voters = np.zeros((0, rows, dimension))
        self.voter_counts = np.zeros(0, dtype=np.int64)
        self.voter_order = np.zeros(0, dtype=np.int64)
        self.counters = np.zeros(k.N_COUNTERS, dtype=np.int64)
        self.rng = np.array([seed], dtype=np.uint64)

    @property
    def rows(self) -> int:
        return int(self.weights.shape[0])

    @property
    def dimension(self) -> int:
        return int(self.weights.shape[1])

    def counter(self, index: int) -> int:
        return int(self.counters[index])

    def ensure_shape(self, rows: int, dimension: int) -> None:
        """Grow to at least ``rows`` x ``dimension`` (never shrinks)."""
        if rows <= self.weights.shape[0] and dimension <= self.weights.shape[1]:
            return
        rows = max(rows, self.rows)
        dimension = max(dimension, self.dimension)
        if (rows, dimension) == self.weights.shape:
            return
        self.weights = _pad(self.weights, (rows, dimension))  # type: ignore[assignment]
        self.weight_sums = _pad(self.weight_sums, (rows, dimension))  # type: ignore[assignment]
        self.born = _pad(self.born, (rows,))  # type: ignore[assignment]
        self.row_sq = _pad(self.row_sq, (rows,))  # type: ignore[assignment]
        capacity = self.voters.shape[0]
        self.voters = _pad(self.voters, (capacity, rows, dimension))  # type: ignore[assignment]

    def ensure_voter_capacity(self, needed: int, max_voters: int) -> None:
        """Room for ``min(needed, max_voters)`` voters, allocated lazily (doubling)."""
        capacity = self.voters.shape[0]
        target = min(needed, max_voters)
        if target <= capacity:
            return
        target = min(max_voters, max(target, 2 * capacity))
        self.voters = _pad(self.voters, (target, self.rows, self.dimension))  # type: ignore[assignment]
        self.voter_counts = _pad(self.voter_counts, (target,))  # type: ignore[assignment]
        self.voter_order = _pad(self.voter_order, (target,))  # type: ignore[assignment]

    def averaged_weights(self) -> NDArray[np.float64]:
        """w̄ = mean of the post-event weights over all events seen (zeros before any)."""
        seen = self.counter(k.SEEN)
        if seen == 0:
            return np.zeros_like(self.weights)
        live = (seen - self.born)[:, None]
        total: NDArray[np.float64] = (self.weight_sums + live * self.weights) / seen
        return total

    def voter_list(self) -> list[tuple[int, NDArray[np.float64]]]:
        """Finished voters kept for the vote, largest survival count first: (count, weights)."""
        order = self.voter_order[: self.counter(k.N_VOTERS)]
        return [(int(self.voter_counts[s]), self.voters[s].copy()) for s in order]

    @property
    def nbytes(self) -> int:
        """Memory held by the arrays."""
        return sum(array.nbytes for array in self.arrays().values())

    def copy(self) -> LinearState:
        """A deep copy (same capacity), e.g. to restore after a refused batch."""
        copy = LinearState.__new__(LinearState)
        for name, array in self.arrays().items():
            setattr(copy, name, array.copy())
        return copy

    def compact_copy(self) -> LinearState:
        """A deep copy holding only the kept voters, in vote order (for snapshots)."""
        copy = LinearState.__new__(LinearState)
        n = self.counter(k.N_VOTERS)
        order = self.voter_order[:n]
        copy.weights = self.weights.copy()
        copy.weight_sums = self.weight_sums.copy()
        copy.born = self.born.copy()
        copy.row_sq = self.row_sq.copy()
        copy.voters = self.voters[order].copy()
        copy.voter_counts = self.voter_counts[order].copy()
        copy.voter_order = np.arange(n, dtype=np.int64)
        copy.counters = self.counters.copy()
        copy.rng = self.rng.copy()
        for array in copy.arrays().values():
            array.flags.writeable = False
        return copy

    def arrays(self) -> dict[str, NDArray[np.generic]]:
        """Every array by name (for saving)."""
        return {name: getattr(self, name) for name in ARRAY_DTYPES}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, NDArray[np.generic]]) -> LinearState:
        """Rebuild from :meth:`arrays`, checking names, dtypes and that the shapes agree."""
        missing = set(ARRAY_DTYPES) - set(arrays)
        if missing:
            raise StateError(f"model state lacks arrays {sorted(missing)}")
        for name, dtype in ARRAY_DTYPES.items():
            if arrays[name].dtype != dtype:
                raise StateError(f"array {name!r} has dtype {arrays[name].dtype}, expected {dtype}")
        state = cls.__new__(cls)
        for name in ARRAY_DTYPES:
            setattr(state, name, np.ascontiguousarray(arrays[name]).copy())
        state._check_shapes()
        return state

    def _check_shapes(self) -> None:
        if self.weights.ndim != 2:
            raise StateError(f"weights must be 2-D, got shape {self.weights.shape}")
        rows, dimension = self.weights.shape
        capacity = self.voters.shape[0] if self.voters.ndim == 3 else -1
        expected = {
            "weight_sums": (rows, dimension),
            "born": (rows,),
            "row_sq": (rows,),
            "voters": (capacity, rows, dimension),
            "voter_counts": (capacity,),
            "voter_order": (capacity,),
            "counters": (k.N_COUNTERS,),
            "rng": (1,),
        }
        for name, shape in expected.items():
            actual = getattr(self, name).shape
            if actual != shape:
                raise StateError(f"array {name!r} has shape {actual}, expected {shape}")
        if not 0 <= self.counter(k.ACTIVE_CLASSES) <= rows:
            raise StateError(f"{self.counter(k.ACTIVE_CLASSES)} active classes for {rows} rows")
        n_voters = self.counter(k.N_VOTERS)
        if not 0 <= n_voters <= capacity:
            raise StateError(f"{n_voters} voters recorded but room for {capacity}")
        kept = self.voter_order[:n_voters]
        if len(set(kept.tolist())) != n_voters or (
            n_voters and not 0 <= kept.min() <= kept.max() < capacity
        ):
            raise StateError("voter order is not a set of distinct voter slots")
        self._check_values()

    def _check_values(self) -> None:
        """Values no learning can produce: a non-finite float or a negative count."""
        for name in FLOAT_ARRAYS:
            if not np.isfinite(getattr(self, name)).all():
                raise StateError(f"array {name!r} holds NaN or infinite values")
        for name in COUNT_ARRAYS:
            if (getattr(self, name) < 0).any():
                raise StateError(f"array {name!r} holds negative counts")
