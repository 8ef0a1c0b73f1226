"""A batch of sparse encoded events in CSR form (row pointers, column indices, values).

Object-valued features (hashed tokens, vocabularies, named schemas) touch a handful of the
model's coordinates; a :class:`CSRBatch` keeps only those, so every step that reads an event costs
O(non-zeros) instead of O(dimension). Row ``i`` holds ``values[indptr[i]:indptr[i+1]]`` at columns
``indices[indptr[i]:indptr[i+1]]``.

Invariants (checked by :meth:`CSRBatch.validate`, relied on by the compiled kernels):

* ``indptr`` starts at 0, never decreases and ends at ``len(indices) == len(values)``;
* within a row, ``indices`` strictly increase and lie in ``[0, dimension)``;
* explicit zeros may be stored: a zero contributes nothing to any dot product or update.

Strictly increasing columns make sparse results bit-identical to the dense ones on the same
vectors: every sum visits the non-zero coordinates in the order a dense pass would.

>>> batch = CSRBatch.from_dense(np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0]]))
>>> batch.n_rows, batch.nnz, batch.indices.tolist()
(2, 2, [0, 2])
>>> batch.to_dense().tolist()
[[1.0, 0.0, 2.0], [0.0, 0.0, 0.0]]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from learning._kernels import _jit

NO_BREACH = 0
DECREASING_INDPTR = 1
COLUMN_OUT_OF_RANGE = 2
COLUMNS_NOT_INCREASING = 3


@_jit
def csr_breach(indptr: NDArray[np.int64], indices: NDArray[np.int64], dimension: int) -> int:
    """The first CSR invariant the rows break, in the order :meth:`CSRBatch.validate` names them
    (``indptr`` itself already starts at 0 and ends at ``len(indices)``), or NO_BREACH.

    ``indptr`` is checked first (the rows it bounds are read next), then the columns' range
    over all entries, then their order within each row: passes without an early exit, which the
    compiler vectorises.
    """
    n_rows = indptr.shape[0] - 1
    for i in range(n_rows):
        if indptr[i + 1] < indptr[i]:
            return DECREASING_INDPTR
    low = 0
    high = 0
    for k in range(indices.shape[0]):
        c = indices[k]
        low = min(low, c)
        high = max(high, c)
    if low < 0 or high >= dimension:
        return COLUMN_OUT_OF_RANGE
    unordered = False
    for i in range(n_rows):
        for k in range(indptr[i] + 1, indptr[i + 1]):
            unordered |= indices[k] <= indices[k - 1]
    return COLUMNS_NOT_INCREASING if unordered else NO_BREACH


@dataclass(frozen=True)
class CSRBatch:
    """Sparse rows x̃ of a fixed width ``dimension`` (see the module docstring)."""

    indptr: NDArray[np.int64]
    indices: NDArray[np.int64]
    values: NDArray[np.float64]
    dimension: int

    @property
    def n_rows(self) -> int:
        """Number of events in the batch."""
        return int(self.indptr.shape[0]) - 1

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, dimension), as the dense matrix would have."""
        return self.n_rows, self.dimension

    @property
    def nnz(self) -> int:
        """Stored entries (explicit zeros included)."""
        return int(self.indices.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes held by the three arrays."""
        return int(self.indptr.nbytes + self.indices.nbytes + self.values.nbytes)

    def row(self, i: int) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """(columns, values) of row ``i`` (views, not copies)."""
        start, stop = int(self.indptr[i]), int(self.indptr[i + 1])
        return self.indices[start:stop], self.values[start:stop]

    def select(self, start: int, stop: int) -> CSRBatch:
        """Rows ``start .. stop-1`` as a batch of their own (values and indices are views)."""
        first, last = int(self.indptr[start]), int(self.indptr[stop])
        return CSRBatch(
            indptr=self.indptr[start : stop + 1] - first,
            indices=self.indices[first:last],
            values=self.values[first:last],
            dimension=self.dimension,
        )

    def take(self, order: NDArray[np.int64]) -> CSRBatch:
        """The rows in ``order`` (a permutation or any selection of row numbers), as a new batch.

        >>> batch = CSRBatch.from_dense(np.array([[1.0, 0.0], [0.0, 2.0]]))
        >>> batch.take(np.array([1, 0])).to_dense().tolist()
        [[0.0, 2.0], [1.0, 0.0]]
        """
        rows = np.asarray(order, dtype=np.int64)
        starts, stops = self.indptr[rows], self.indptr[rows + 1]
        lengths = stops - starts
        indptr = np.zeros(rows.shape[0] + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        positions = np.repeat(starts - indptr[:-1], lengths) + np.arange(int(indptr[-1]))
        return CSRBatch(
            indptr=indptr,
            indices=self.indices[positions],
            values=self.values[positions],
            dimension=self.dimension,
        )

    def with_dimension(self, dimension: int) -> CSRBatch:
        """The same rows declared ``dimension`` wide (columns must fit; checked)."""
        if self.nnz and int(self.indices.max()) >= dimension:
            raise ValueError(f"a column index does not fit in dimension {dimension}")
        return CSRBatch(self.indptr, self.indices, self.values, dimension)

    def to_dense(self) -> NDArray[np.float64]:
        """The dense (rows, dimension) float64 matrix."""
        dense = np.zeros((self.n_rows, self.dimension))
        rows = np.repeat(np.arange(self.n_rows), np.diff(self.indptr))
        dense[rows, self.indices] = self.values
        return dense

    @classmethod
    def from_dense(cls, X: NDArray[np.float64]) -> CSRBatch:
        """The non-zero entries of a dense (rows, dimension) matrix, row by row."""
        matrix = np.asarray(X, dtype=np.float64)
        if matrix.ndim != 2:
            raise ValueError(f"expected a 2-d matrix, got shape {matrix.shape}")
        rows, columns = np.nonzero(matrix)
        indptr = np.zeros(matrix.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=matrix.shape[0]), out=indptr[1:])
        return cls(
            indptr=indptr,
            indices=columns.astype(np.int64),
            values=matrix[rows, columns].astype(np.float64),
            dimension=int(matrix.shape[1]),
        )

    @classmethod
    def from_rows(
        cls,
        rows: list[tuple[NDArray[np.int64], NDArray[np.float64]]],
        dimension: int,
    ) -> CSRBatch:
        """Stack rows given as (sorted columns, values) pairs."""
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(columns) for columns, _ in rows], out=indptr[1:])
        if rows:
            indices = np.concatenate([np.asarray(c, dtype=np.int64) for c, _ in rows])
            values = np.concatenate([np.asarray(v, dtype=np.float64) for _, v in rows])
        else:
            indices = np.zeros(0, dtype=np.int64)
            values = np.zeros(0)
        return cls(indptr=indptr, indices=indices, values=values, dimension=dimension)

    def validate(self) -> CSRBatch:
        """Check the invariants of the module docstring; ``ValueError`` names the first breach."""
        indptr, indices, values = self.indptr, self.indices, self.values
        if indptr.ndim != 1 or indptr.shape[0] < 1 or indptr[0] != 0:
            raise ValueError("indptr must be a 1-d array starting at 0")
        if indices.shape != values.shape or indptr[-1] != indices.shape[0]:
            raise ValueError("indptr must end at len(indices) == len(values)")
        if indptr.dtype.kind not in "iu" or indices.dtype.kind not in "iu":
            raise ValueError("indptr and indices must be integer arrays")
        breach = csr_breach(
            np.asarray(indptr, dtype=np.int64), np.asarray(indices, dtype=np.int64), self.dimension
        )
        if breach == DECREASING_INDPTR:
            raise ValueError("indptr must not decrease")
        if breach == COLUMN_OUT_OF_RANGE:
            raise ValueError(f"column indices must lie in [0, {self.dimension})")
        if breach == COLUMNS_NOT_INCREASING:
            raise ValueError("column indices must strictly increase within a row")
        return self
