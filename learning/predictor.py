"""Batch results and immutable prediction snapshots."""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np
from numpy.typing import NDArray

from learning import _kernels as k
from learning import _scoring
from learning._arrays import LinearState
from learning._rows import (
    Rows,
    as_matrix,
    check_matrix,
    fit_width,
    prediction_rows,
    row_error,
)
from learning.sparse import CSRBatch

__all__ = [
    "BatchResult",
    "Predictor",
    "PredictorName",
    "as_matrix",
    "check_matrix",
    "fit_width",
    "predict_codes",
    "predictor_code",
    "row_error",
]

logger = logging.getLogger(__name__)

PredictorName = Literal["last", "averaged", "voted"]
PREDICTORS: tuple[PredictorName, ...] = get_args(PredictorName)
"""The predictor names, in the order every listing uses (one definition: the Literal)."""
PREDICTOR_CODES: dict[str, int] = {"last": k.LAST, "averaged": k.AVERAGED, "voted": k.VOTED}
NO_CLASS = -1


def predictor_code(name: str) -> int:
    """Kernel code of a predictor name; ``ValueError`` for anything else."""
    try:
        return PREDICTOR_CODES[name]
    except KeyError:
        raise ValueError(f"predictor must be one of {PREDICTORS}, got {name!r}") from None


@dataclass(frozen=True)
class BatchResult:
    """What :meth:`learn_batch` did with a batch.

    Attributes
    ----------
    mistakes
        Per event: whether the perceptron updated (y·w·x̃ ≤ 0 binary; wrong argmax multiclass).
    predictions
        Per event: the prequential prediction of ``last`` (±1 floats binary, class indices
        multiclass), made before learning from the event.
    margins
        Per event: the normalised prequential margin of ``last`` — y·w·x̃/‖w‖ binary,
        (s_y - max_{c≠y} s_c)/‖W‖_F multiclass — 0 while w = 0, NaN with a single class.
    prequential_mistakes
        Per tracked predictor, how many of the batch's events it got wrong before learning.
    n_classes
        0 for a binary learner, else its number of classes after the batch.
    """

    mistakes: NDArray[np.bool_]
    predictions: NDArray[np.float64] | NDArray[np.int64]
    margins: NDArray[np.float64]
    prequential_mistakes: Mapping[str, int]
    n_classes: int = 0

    @property
    def n_updates(self) -> int:
        """Number of perceptron updates in the batch."""
        return int(self.mistakes.sum())


def predict_codes(
    state: LinearState,
    rows: Rows,
    which: int,
    multiclass: bool,
) -> tuple[NDArray[np.float64] | NDArray[np.int64], NDArray[np.float64]]:
    """Run the prediction kernel on checked rows: codes (±1 or class indices) and scores."""
    n = rows.n_rows
    if not multiclass:
        codes = np.empty(n)
        scores = np.empty(n)
        _scoring.predict_binary(
            *rows.kernel_args(),
            n,
            state.weights,
            state.weight_sums,
            state.log_counts,
            state.log_start,
            state.log_len,
            state.log_cols,
            state.log_old,
            state.counters,
            state.voter_columns,
            which,
            codes,
            scores,
        )
        return codes, scores
    class_codes = np.full(n, NO_CLASS, dtype=np.int64)
    class_scores = np.zeros((n, state.rows))
    if state.counter(k.ACTIVE_CLASSES) == 0 or n == 0:
        return class_codes, class_scores
    _scoring.predict_multiclass(
        *rows.kernel_args(),
        n,
        state.weights,
        state.weight_sums,
        state.log_counts,
        state.log_rows,
        state.log_start,
        state.log_len,
        state.log_cols,
        state.log_old,
        state.counters,
        state.rng[0],
        which,
        class_codes,
        class_scores,
    )
    return class_codes, class_scores


@dataclass(frozen=True, eq=False)
class Predictor:
    """An immutable copy of everything needed to predict, taken by ``learner.snapshot()``.

    Safe to share between threads: its arrays are read-only copies, and predicting never
    advances anything (ties use the generator's next output without drawing it).

    Attributes
    ----------
    version
        The learner's number of updates when the snapshot was taken.
    n_seen
        Events learned from when the snapshot was taken.
    labels
        Binary: ``(positive, negative)``; multiclass: the classes in index order.
    multiclass
        Whether predictions are class indices.
    default_predictor
        The learner's ``predictor`` hyperparameter.
    growable
        Whether X may be narrower or wider than ``dimension`` (vocabulary encoders).
    """

    version: int
    n_seen: int
    labels: tuple[Hashable, ...]
    multiclass: bool
    default_predictor: PredictorName
    growable: bool
    _state: LinearState = field(repr=False)

    @property
    def dimension(self) -> int:
        """len(x̃) the weights cover."""
        return self._state.dimension

    @property
    def n_classes(self) -> int:
        """Number of classes that compete in predictions (2 for binary)."""
        return self._state.counter(k.ACTIVE_CLASSES) if self.multiclass else len(self.labels)

    @property
    def weights(self) -> NDArray[np.float64]:
        """Last weights (read-only): (d,) binary, (classes, d) multiclass."""
        return self._state.weights if self.multiclass else self._state.weights[0]

    @property
    def averaged_weights(self) -> NDArray[np.float64]:
        """Averaged weights, same shape as :attr:`weights`."""
        averaged = self._state.averaged_weights()
        return averaged if self.multiclass else averaged[0]

    def predict_codes(
        self, X: NDArray[np.float64] | CSRBatch, predictor: PredictorName | None = None
    ) -> tuple[NDArray[np.float64] | NDArray[np.int64], NDArray[np.float64]]:
        """(codes, scores): ±1 (binary) or class indices (-1 with no class yet), and scores.

        X is a dense matrix or a :class:`~learning.sparse.CSRBatch` (same results on the same
        vectors). Scores are w·x̃ (``last``), w̄·x̃ (``averaged``) or the survival-weighted vote
        share (``voted``); per class for multiclass, shape (n, classes).
        """
        which = predictor_code(predictor or self.default_predictor)
        rows = prediction_rows(X, self.dimension, self.growable)
        return predict_codes(self._state, rows, which, self.multiclass)

    def predict_batch(
        self, X: NDArray[np.float64] | CSRBatch, predictor: PredictorName | None = None
    ) -> tuple[list[Hashable], NDArray[np.float64]]:
        """(labels, scores) for the rows of X (encoded x̃, dense or CSR).

        Examples
        --------
        >>> from learning import Perceptron, LabelMap, DenseEncoder
        >>> model = Perceptron(label_map=LabelMap({"yes": 1, "no": -1}), encoder=DenseEncoder(1))
        >>> _ = model.learn_batch(np.array([[1.0, 2.0], [1.0, -1.0]]), np.array([1.0, -1.0]))
        >>> model.snapshot().predict_batch(np.array([[1.0, 3.0]]), predictor="last")
        (['yes'], array([7.]))
        """
        codes, scores = self.predict_codes(X, predictor)
        return [self.decode(code) for code in codes.tolist()], scores

    def decode(self, code: float) -> Hashable:
        """The label of a code (±1 binary; class index multiclass, ``None`` for -1)."""
        if self.multiclass:
            return None if code == NO_CLASS else self.labels[int(code)]
        return self.labels[0] if code >= 0 else self.labels[1]
