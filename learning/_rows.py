"""Encoded rows in the one form the kernels take: dense matrices and CSR batches alike.

A :class:`Rows` is ``(indptr, indices, values, width)`` as :mod:`learning._kernels` describes:
``width > 0`` for dense rows (``values`` is the matrix, row-major), 0 for CSR rows. Both are
checked here before any kernel runs (finite values within ±MAX_ABS_FEATURE; for CSR also the
structure), so a refused batch changes nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from learning import _kernels as k
from learning.encoders import MAX_ABS_FEATURE
from learning.errors import FeatureError
from learning.sparse import CSRBatch

EMPTY_INDPTR = np.zeros(1, dtype=np.int64)
"""The ``indptr`` of dense rows (unused by the kernels, but typed)."""


@dataclass(frozen=True)
class Rows:
    """Kernel-ready rows (see the module docstring)."""

    indptr: NDArray[np.int64]
    indices: NDArray[np.int64]
    values: NDArray[np.float64]
    width: int
    n_rows: int
    dimension: int
    """The width the rows are declared with (dense: their width)."""

    @classmethod
    def dense(cls, matrix: NDArray[np.float64]) -> Rows:
        """Checked dense rows (``matrix`` is C-contiguous float64, see ``check_matrix``)."""
        n, width = matrix.shape
        return cls(EMPTY_INDPTR, np.arange(width), matrix.reshape(-1), width, n, width)

    @classmethod
    def sparse(cls, batch: CSRBatch) -> Rows:
        """Rows of a CSR batch, after :func:`check_csr`."""
        return cls(batch.indptr, batch.indices, batch.values, 0, batch.n_rows, batch.dimension)

    def row_start(self, i: int) -> int:
        """Position of row i's first entry in ``values``."""
        return i * self.width if self.width > 0 else int(self.indptr[i])

    def row_values(self, i: int) -> NDArray[np.float64]:
        """Row i's stored values (a view)."""
        start = self.row_start(i)
        stop = start + self.width if self.width > 0 else int(self.indptr[i + 1])
        return self.values[start:stop]

    def longest(self) -> int:
        """The most entries a row stores."""
        if self.n_rows == 0:
            return 0
        return self.width if self.width > 0 else int(np.diff(self.indptr).max())

    def max_new_entries(self, max_voters: int, longest: int) -> int:
        """The most update-log entries learning these rows can add to what the log keeps
        (``longest``: :meth:`longest`).

        Each row adds at most its stored entries, and only the newest ``max_voters`` voters stay.
        """
        return min(int(self.values.shape[0]), min(self.n_rows, max_voters) * longest)

    def kernel_args(self) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64], int]:
        """The four leading arguments of every kernel."""
        return self.indptr, self.indices, self.values, self.width


def fit_width(X: NDArray[np.float64], dimension: int, growable: bool) -> NDArray[np.float64]:
    """Match X's width to a model's: exact, or (growable vocabularies only) pad/truncate.

    A vocabulary only appends coordinates, so a narrower X lacks only features that were absent
    (zero) and a wider X has features the model has never learned (zero weights): both are exact.
    """
    width = X.shape[1]
    if width == dimension:
        return X
    if not growable:
        raise FeatureError(
            "wrong_dimension", f"expected vectors of dimension {dimension}, got {width}"
        )
    if width > dimension:
        return np.ascontiguousarray(X[:, :dimension])
    padded = np.zeros((X.shape[0], dimension))
    padded[:, :width] = X
    return padded


def as_matrix(X: object) -> NDArray[np.float64]:
    """X as a C-contiguous 2-D float64 array (values not checked), or a :class:`FeatureError`."""
    array = np.asarray(X)
    if array.ndim != 2:
        raise FeatureError("wrong_dimension", f"expected a 2-D array, got shape {array.shape}")
    if array.dtype.kind == "b":
        raise FeatureError("boolean_feature", "X is a boolean array; send 1.0 or 0.0")
    if array.dtype.kind not in "fiu":
        raise FeatureError("non_numeric", f"X has dtype {array.dtype}, not a number type")
    return np.ascontiguousarray(array, dtype=np.float64)


def row_error(matrix: NDArray[np.float64], index: int) -> FeatureError:
    """The error for row ``index``, which has a non-finite or too large value."""
    row = matrix[index]
    column = int(np.argmax(~(np.abs(row) <= MAX_ABS_FEATURE)))
    value = float(row[column])
    if math.isfinite(value):
        return FeatureError(
            "too_large", f"x̃[{column}] = {value!r} is beyond ±{MAX_ABS_FEATURE:g}", index=index
        )
    return FeatureError("non_finite", f"x̃[{column}] is {value!r}", index=index)


def check_matrix(X: object) -> NDArray[np.float64]:
    """X as a C-contiguous float64 matrix of finite values within ±MAX_ABS_FEATURE.

    Raises :class:`FeatureError` (``non_finite`` / ``too_large`` with the row index) otherwise.
    """
    matrix = as_matrix(X)
    bad = k.first_invalid_value(matrix.reshape(-1), MAX_ABS_FEATURE)
    if bad >= 0:
        raise row_error(matrix, bad // matrix.shape[1])
    return matrix


def value_error(rows: Rows, entry: int) -> FeatureError:
    """The error for the bad value at ``values[entry]`` (not finite, or beyond the bound)."""
    if rows.width > 0:
        row, column = divmod(entry, rows.width)
    else:
        row = int(np.searchsorted(rows.indptr, entry, side="right")) - 1
        column = int(rows.indices[entry])
    value = float(rows.values[entry])
    if math.isfinite(value):
        return FeatureError(
            "too_large", f"x̃[{column}] = {value!r} is beyond ±{MAX_ABS_FEATURE:g}", index=row
        )
    return FeatureError("non_finite", f"x̃[{column}] is {value!r}", index=row)


def check_values(rows: Rows) -> Rows:
    """The rows, once every value is finite and within ±MAX_ABS_FEATURE (else FeatureError)."""
    bad = k.first_invalid_value(rows.values, MAX_ABS_FEATURE)
    if bad >= 0:
        raise value_error(rows, bad)
    return rows


def csr_structure(batch: CSRBatch) -> CSRBatch:
    """The batch with int64/float64 arrays, once its CSR invariants hold (else ``ValueError``)."""
    if not isinstance(batch, CSRBatch):
        raise TypeError(f"expected a CSRBatch, got {type(batch).__name__}")
    if _kernel_ready(batch) and isinstance(batch.dimension, int) and batch.dimension >= 0:
        return batch.validate()  # already the arrays the kernels take
    for name in ("indptr", "indices", "values"):
        array = np.asarray(getattr(batch, name))
        kinds, wanted = ("f", "float64") if name == "values" else ("iu", "int64")
        if array.dtype.kind not in kinds or array.ndim != 1:
            raise ValueError(f"CSR {name} must be a 1-d {wanted} array")
    if not isinstance(batch.dimension, int | np.integer) or batch.dimension < 0:
        raise ValueError(f"CSR dimension must be a size, got {batch.dimension!r}")
    checked = CSRBatch(
        np.ascontiguousarray(batch.indptr, dtype=np.int64),
        np.ascontiguousarray(batch.indices, dtype=np.int64),
        np.ascontiguousarray(batch.values, dtype=np.float64),
        int(batch.dimension),
    )
    return checked.validate()


def _kernel_ready(batch: CSRBatch) -> bool:
    """Whether the batch's arrays are 1-d, C-contiguous int64/int64/float64 numpy arrays."""
    for array, dtype in (
        (batch.indptr, np.int64),
        (batch.indices, np.int64),
        (batch.values, np.float64),
    ):
        if (
            type(array) is not np.ndarray
            or array.dtype != dtype
            or array.ndim != 1
            or not array.flags.c_contiguous
        ):
            return False
    return True


def check_csr(batch: CSRBatch) -> CSRBatch:
    """A CSR batch with int64/float64 arrays whose structure and values are valid.

    A breach of the CSR invariants is a bug of whoever built the batch, not a bad event: it raises
    ``ValueError`` naming it. A bad value raises ``FeatureError`` (``non_finite`` / ``too_large``,
    with the row index), as for dense rows.
    """
    checked = csr_structure(batch)
    check_values(Rows.sparse(checked))
    return checked


def truncate_columns(batch: CSRBatch, dimension: int) -> CSRBatch:
    """The batch without its columns ≥ ``dimension`` (weights there are zero: exact)."""
    if batch.dimension <= dimension:
        return batch
    keep = batch.indices < dimension
    if keep.all():
        return CSRBatch(batch.indptr, batch.indices, batch.values, dimension)
    rows = np.repeat(np.arange(batch.n_rows), np.diff(batch.indptr))[keep]
    indptr = np.zeros(batch.n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=batch.n_rows), out=indptr[1:])
    return CSRBatch(indptr, batch.indices[keep], batch.values[keep], dimension)


def prediction_rows(X: NDArray[np.float64] | CSRBatch, dimension: int, growable: bool) -> Rows:
    """Checked rows fitted to a model of ``dimension`` (see ``fit_width``) for prediction."""
    if isinstance(X, CSRBatch):
        batch = check_csr(X)
        if batch.dimension != dimension and not growable:
            raise FeatureError(
                "wrong_dimension",
                f"expected vectors of dimension {dimension}, got {batch.dimension}",
            )
        return Rows.sparse(truncate_columns(batch, dimension))
    return Rows.dense(fit_width(check_matrix(X), dimension, growable))


def learning_rows(X: NDArray[np.float64] | CSRBatch, *, check_values_now: bool = True) -> Rows:
    """Rows for learning, their structure checked (the width rules are the learner's).

    Values are checked too unless ``check_values_now`` is False: the learning kernel then checks
    each row just before it uses it (see ``LinearLearner.learn_batch``).
    """
    rows = Rows.sparse(csr_structure(X)) if isinstance(X, CSRBatch) else Rows.dense(as_matrix(X))
    return check_values(rows) if check_values_now else rows
