"""The binary perceptron, as the seeds define it.

Labels are ±1 through a :class:`~learning.labels.LabelMap`; the bias is the coordinate x₀ = 1
placed first by the encoder; an event is a mistake when y·(w·x̃) ≤ 0 (so the all-zero start
counts as one); the update is w ← w + y·x̃; the prediction is sign(w·x̃) with sign(0) = +1.

The prequential mistakes of ``last`` count wrong predictions, which is not quite the number of
updates: with w·x̃ = 0 and y = +1 the prediction (+1) is right but y·(w·x̃) = 0 ≤ 0 updates.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence

import numpy as np
from numpy.typing import NDArray

from learning import _learn, _one_binary
from learning._arrays import BINARY_ROWS_TOUCHED, LinearState
from learning._base import DEFAULT_MAX_VOTER_BYTES, DEFAULT_MAX_VOTERS, LinearLearner
from learning.encoders import Encoder
from learning.labels import LabelMap
from learning.predictor import PredictorName

logger = logging.getLogger(__name__)

BINARY_ROWS = 1


class Perceptron(LinearLearner):
    """Binary perceptron keeping its last, averaged and voted predictors.

    Parameters
    ----------
    label_map
        Which label is +1 and which -1 (default ``True`` → +1, ``False`` → -1).
    encoder
        Turns features into x̃ (default: a :class:`~learning.encoders.VocabularyEncoder` with a
        bias, for river-style dicts).
    predictor
        Which predictor ``predict_one`` uses: ``"last"``, ``"averaged"`` or ``"voted"``.
    max_voters
        Bound on the finished voters kept for the voted predictor (see :mod:`learning._base`).
    max_voter_bytes
        Bound on the bytes of the voters' update log (default 4 MiB; see :mod:`learning._base`).
    prequential_voted
        Also count the voted predictor's prequential mistakes. Off by default: it costs a vote
        per event (see :mod:`learning._base`); the voted predictor is maintained either way.

    Examples
    --------
    The worked example of the PLA notes (the first coordinate is the bias):

    >>> import numpy as np
    >>> from learning import DenseEncoder
    >>> model = Perceptron(label_map=LabelMap({1: 1, -1: -1}), encoder=DenseEncoder(1))
    >>> X = np.array([[1.0, 2.0], [1.0, -0.25]])
    >>> model.learn_batch(X, np.array([-1.0, 1.0])).mistakes.tolist()
    [True, True]
    >>> model.weights.tolist(), model.n_updates
    ([0.0, -2.25], 2)
    """

    _learning_kernel = staticmethod(_learn.learn_binary)

    def __init__(
        self,
        label_map: LabelMap | None = None,
        *,
        encoder: Encoder | None = None,
        predictor: PredictorName = "last",
        max_voters: int = DEFAULT_MAX_VOTERS,
        max_voter_bytes: int = DEFAULT_MAX_VOTER_BYTES,
        prequential_voted: bool = False,
    ) -> None:
        self._init_common(encoder, predictor, max_voters, max_voter_bytes, prequential_voted)
        self.label_map = label_map if label_map is not None else LabelMap.boolean()
        self._state = LinearState(
            BINARY_ROWS, self.encoder.dimension, touched_rows=BINARY_ROWS_TOUCHED
        )

    def _rows(self) -> int:
        return BINARY_ROWS

    learn_one = _one_binary.learn_one
    predict_one = _one_binary.predict_one

    def _check_targets(self, y: object, n: int) -> NDArray[np.float64]:
        targets = np.ascontiguousarray(np.asarray(y, dtype=np.float64))
        if targets.shape != (n,):
            raise ValueError(f"y must have shape ({n},), got {targets.shape}")
        bad = (targets != 1.0) & (targets != -1.0)
        if bad.any():
            first = int(np.argmax(bad))
            raise ValueError(f"binary targets must be +1 or -1; y[{first}] = {targets[first]!r}")
        return targets

    def encode_labels(
        self, labels: Sequence[Hashable], *, grow: bool = False
    ) -> NDArray[np.float64]:
        """Labels → ±1 floats (``grow`` is accepted for symmetry; a label map never grows)."""
        return self.label_map.encode_many(labels)

    def _decode(self, code: float) -> Hashable:
        return self.label_map.decode(code)

    def _label_tuple(self) -> tuple[Hashable, ...]:
        return self.label_map.labels

    @property
    def weights(self) -> NDArray[np.float64]:
        """Current weights w (a copy), bias first."""
        row: NDArray[np.float64] = self._state.weights[0].copy()
        return row

    @property
    def averaged_weights(self) -> NDArray[np.float64]:
        """w̄, the mean of the post-event weights over all events seen."""
        row: NDArray[np.float64] = self._state.averaged_weights()[0]
        return row

    @property
    def voters(self) -> list[tuple[int, NDArray[np.float64]]]:
        """Kept finished voters (survival count, weights), oldest first."""
        return [(count, weights[0]) for count, weights in self._state.voter_list()]

    @property
    def classes(self) -> tuple[Hashable, ...]:
        """``(positive, negative)`` labels."""
        return self.label_map.labels
