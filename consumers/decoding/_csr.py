"""Row operations on :class:`~learning.sparse.CSRBatch` that decoding needs: stack and reorder.

Both keep every row's entries as they are (sorted columns, values bit for bit), so a batch
assembled from several decoding tiers is the batch one tier would have produced.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from learning.sparse import CSRBatch

logger = logging.getLogger(__name__)


def empty_batch(dimension: int) -> CSRBatch:
    """A batch of no rows."""
    return CSRBatch(
        indptr=np.zeros(1, dtype=np.int64),
        indices=np.zeros(0, dtype=np.int64),
        values=np.zeros(0, dtype=np.float64),
        dimension=dimension,
    )


def stack(parts: Sequence[CSRBatch], dimension: int) -> CSRBatch:
    """The rows of every part in order, as one batch ``dimension`` wide (at least each part's).

    >>> a = CSRBatch.from_dense(np.array([[1.0, 2.0]]))
    >>> b = CSRBatch.from_dense(np.array([[0.0, 0.0, 3.0]]))
    >>> stack([a, b], 3).to_dense().tolist()
    [[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]]
    """
    if not parts:
        return empty_batch(dimension)
    if any(part.dimension > dimension for part in parts):
        raise ValueError(f"a part is wider than {dimension}")
    starts = np.cumsum([0] + [part.nnz for part in parts[:-1]], dtype=np.int64)
    indptr = np.concatenate(
        [np.zeros(1, dtype=np.int64)]
        + [part.indptr[1:] + start for part, start in zip(parts, starts.tolist(), strict=True)]
    )
    return CSRBatch(
        indptr=indptr,
        indices=np.concatenate([part.indices for part in parts]),
        values=np.concatenate([part.values for part in parts]),
        dimension=dimension,
    )


def take(batch: CSRBatch, rows: NDArray[np.int64]) -> CSRBatch:
    """Rows ``rows`` of ``batch`` in that order.

    >>> batch = CSRBatch.from_dense(np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0]]))
    >>> take(batch, np.array([2, 0])).to_dense().tolist()
    [[3.0, 4.0], [1.0, 0.0]]
    """
    lengths = np.diff(batch.indptr)[rows]
    indptr = np.zeros(rows.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    sources = np.repeat(batch.indptr[:-1][rows] - indptr[:-1], lengths) + np.arange(
        int(indptr[-1]), dtype=np.int64
    )
    return CSRBatch(
        indptr=indptr,
        indices=batch.indices[sources],
        values=batch.values[sources],
        dimension=batch.dimension,
    )
