"""The multiclass perceptron of the chapter (section 2.6).

One weight vector per class; predict argmax_c w_c·x̃; on a mistake w_true += x̃ and
w_predicted -= x̃. Ties are broken at random, as in the chapter, by SplitMix64 whose state is model
state: a tie of the ``last`` predictor while learning draws from it (advancing it), and every other
tie (averaged, voted, plain prediction) uses the value the next draw would give without taking it,
so predicting never changes the model and ``predict_one(x)`` agrees with what ``learn_one(x, y)``
predicts first.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence

import numpy as np
from numpy.typing import NDArray

from learning import _kernels as k
from learning import _learn
from learning._arrays import LinearState
from learning._base import DEFAULT_MAX_VOTER_BYTES, DEFAULT_MAX_VOTERS, LinearLearner
from learning.encoders import Encoder
from learning.errors import LabelError
from learning.labels import ClassIndex
from learning.predictor import NO_CLASS, PredictorName

logger = logging.getLogger(__name__)

MAX_SEED = 2**64 - 1


class MulticlassPerceptron(LinearLearner):
    """Multiclass perceptron keeping its last, averaged and voted predictors.

    Parameters
    ----------
    classes
        Class labels in index order, declared up front; ``None`` discovers them as they appear.
    encoder
        Turns features into x̃ (default: a vocabulary encoder with a bias).
    predictor
        Which predictor ``predict_one`` uses: ``"last"``, ``"averaged"`` or ``"voted"``.
    max_voters
        Bound on the finished voters kept for the voted predictor.
    max_voter_bytes
        Bound on the bytes of the voters' update log (default 4 MiB; see :mod:`learning._base`).
    prequential_voted
        Also count the voted predictor's prequential mistakes. Off by default: it costs a vote
        per event (see :mod:`learning._base`); the voted predictor is maintained either way.
    seed
        Initial state of the tie-breaking generator (0 … 2⁶⁴ - 1).

    Examples
    --------
    >>> import numpy as np
    >>> from learning import DenseEncoder
    >>> model = MulticlassPerceptron(classes=["a", "b", "c"], encoder=DenseEncoder(2))
    >>> X = np.array([[1.0, 0.0, 2.0], [1.0, 2.0, 0.0], [1.0, -2.0, -2.0]])
    >>> model.learn_batch(X, np.array([0, 1, 2])).predictions.tolist()
    [2, 0, 2]
    >>> model.weights.tolist()
    [[0.0, -2.0, 2.0], [1.0, 2.0, 0.0], [-1.0, 0.0, -2.0]]
    >>> model.predict_one([0.5, 3.0]), model.n_updates
    ('a', 2)

    The first event ties all three classes at 0; the generator (seed 0) picks ``c``.
    """

    multiclass = True
    _learning_kernel = staticmethod(_learn.learn_multiclass)

    def __init__(
        self,
        classes: Sequence[Hashable] | None = None,
        *,
        encoder: Encoder | None = None,
        predictor: PredictorName = "last",
        max_voters: int = DEFAULT_MAX_VOTERS,
        max_voter_bytes: int = DEFAULT_MAX_VOTER_BYTES,
        prequential_voted: bool = False,
        seed: int = 0,
    ) -> None:
        self._init_common(encoder, predictor, max_voters, max_voter_bytes, prequential_voted)
        if not 0 <= seed <= MAX_SEED:
            raise ValueError(f"seed must be in 0 .. 2**64 - 1, got {seed}")
        self.classes = classes
        self.seed = seed
        self._classes = ClassIndex(classes)
        self._state = LinearState(len(self._classes), self.encoder.dimension, seed)
        self._state.counters[k.ACTIVE_CLASSES] = len(self._classes)

    def _rows(self) -> int:
        return len(self._classes)

    def _check_targets(self, y: object, n: int) -> NDArray[np.int64]:
        raw = np.asarray(y)
        if raw.dtype.kind not in "iu":
            raise ValueError(f"multiclass targets must be integer class indices, got {raw.dtype}")
        targets = np.ascontiguousarray(raw, dtype=np.int64)
        if targets.shape != (n,):
            raise ValueError(f"y must have shape ({n},), got {targets.shape}")
        bad = (targets < 0) | (targets >= len(self._classes))
        if bad.any():
            first = int(np.argmax(bad))
            raise ValueError(
                f"y[{first}] = {targets[first]} is not a class index (there are "
                f"{len(self._classes)} classes; add new ones with encode_labels(..., grow=True))"
            )
        return targets

    def encode_labels(self, labels: Sequence[Hashable], *, grow: bool = False) -> NDArray[np.int64]:
        """Labels → class indices; ``grow=True`` adds new labels unless classes were declared."""
        codes = self._classes.encode_many(labels, grow=grow)
        self._state.ensure_shape(self._rows(), self._state.dimension)
        return codes

    def _validate_label(self, label: Hashable) -> None:
        if self._classes.declared:
            self._classes.encode(label)
            return
        try:
            hash(label)
        except TypeError:
            raise LabelError(label, "labels must be hashable") from None

    def _decode(self, code: float) -> Hashable:
        return None if code == NO_CLASS else self._classes.decode(int(code))

    def _label_tuple(self) -> tuple[Hashable, ...]:
        return self._classes.labels

    @property
    def class_labels(self) -> tuple[Hashable, ...]:
        """Known classes in index order."""
        return self._classes.labels

    @property
    def n_classes(self) -> int:
        """Number of known classes (declared, or discovered by learning or ``encode_labels``)."""
        return len(self._classes)

    @property
    def n_active_classes(self) -> int:
        """Classes that compete in predictions: declared ones, or discovered ones learned from."""
        return self._state.counter(k.ACTIVE_CLASSES)

    @property
    def weights(self) -> NDArray[np.float64]:
        """Current weights, one row per known class (a copy)."""
        return self._state.weights.copy()

    @property
    def averaged_weights(self) -> NDArray[np.float64]:
        """Averaged weights, one row per known class."""
        return self._state.averaged_weights()

    @property
    def rng_state(self) -> int:
        """Current state of the tie-breaking generator."""
        return int(self._state.rng[0])
