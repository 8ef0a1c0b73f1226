"""Offline training: the chapter's epoch algorithm over a whole dataset.

Each epoch is one pass of the same compiled kernel that serves ``learn_one`` and
``learn_batch``, so an epoch gives bit-identical results to feeding its events one by one.
Training stops after an epoch without mistakes (the data are then separated) or after
``max_epochs``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from learning._base import LinearLearner
from learning.bounds import BoundTracker
from learning.predictor import check_matrix
from learning.sparse import CSRBatch

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EpochReport:
    """One epoch of :func:`fit_epochs`.

    Attributes
    ----------
    epoch
        1-based epoch number.
    updates
        Perceptron updates made during the epoch.
    total_updates
        Updates since the learner was created.
    prequential_mistakes
        Per tracked predictor, its mistakes during the epoch (predicting before learning).
    converged
        Whether the epoch had no update (training stops there).
    """

    epoch: int
    updates: int
    total_updates: int
    prequential_mistakes: dict[str, int]
    converged: bool


def fit_epochs(  # noqa: PLR0917 - the signature of the design contract
    learner: LinearLearner,
    X: NDArray[np.float64] | CSRBatch,
    y: NDArray[Any],
    max_epochs: int,
    shuffle_seed: int | None = None,
    tracker: BoundTracker | None = None,
) -> list[EpochReport]:
    """Run epochs until one has no mistake or ``max_epochs`` have run.

    Parameters
    ----------
    learner
        Any perceptron learner; it keeps learning from its current state.
    X, y
        Encoded events (dense rows or a :class:`~learning.sparse.CSRBatch`) and their codes (±1
        or class indices), as for ``learn_batch``.
    max_epochs
        Upper bound on the number of epochs.
    shuffle_seed
        ``None`` keeps the dataset's order in every epoch; an integer shuffles each epoch with
        ``numpy.random.default_rng(shuffle_seed)`` (epoch e uses the e-th permutation it draws).
    tracker
        Observes every epoch's events, so its M_t and bounds cover the whole run.

    Examples
    --------
    >>> import numpy as np
    >>> from learning import DenseEncoder, LabelMap, Perceptron
    >>> model = Perceptron(label_map=LabelMap({1: 1, -1: -1}), encoder=DenseEncoder(1))
    >>> reports = fit_epochs(model, np.array([[1.0, 2.0], [1.0, -0.25]]), np.array([-1.0, 1.0]), 10)
    >>> [(r.epoch, r.updates, r.converged) for r in reports]
    [(1, 2, False), (2, 0, True)]
    """
    if max_epochs < 1:
        raise ValueError(f"max_epochs must be at least 1, got {max_epochs}")
    matrix = X.validate() if isinstance(X, CSRBatch) else check_matrix(X)
    targets = np.asarray(y)
    if targets.shape != (matrix.shape[0],):
        raise ValueError(f"y must have shape ({matrix.shape[0]},), got {targets.shape}")
    shuffler = None if shuffle_seed is None else np.random.default_rng(shuffle_seed)
    reports: list[EpochReport] = []
    for epoch in range(1, max_epochs + 1):
        if shuffler is None:
            X_epoch, y_epoch = matrix, targets
        else:
            order = shuffler.permutation(matrix.shape[0])
            X_epoch = matrix.take(order) if isinstance(matrix, CSRBatch) else matrix[order]
            y_epoch = targets[order]
        result = learner.learn_batch(X_epoch, y_epoch)
        if tracker is not None:
            tracker.observe_batch(X_epoch, y_epoch, result)
        updates = result.n_updates
        reports.append(
            EpochReport(
                epoch=epoch,
                updates=updates,
                total_updates=learner.n_updates,
                prequential_mistakes=dict(result.prequential_mistakes),
                converged=updates == 0,
            )
        )
        if updates == 0:
            break
    last = reports[-1]
    logger.info(
        "fit_epochs: %d epochs, %d updates, %s",
        last.epoch,
        last.total_updates,
        "converged" if last.converged else "stopped at max_epochs",
    )
    return reports
