"""Start a fresh learner from given weights: the entry point of iterative parameter mixing.

Under mixing (``learning.mixing``) every shard starts round r from the mixed weights w⁽ʳ⁻¹⁾, and
the served model is a learner holding the mixed weights. :func:`seed_learner` puts such weights
into a learner that has learned nothing yet, without touching its hyperparameters or encoder.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

from learning import _kernels as k
from learning import _one
from learning._base import LinearLearner

_COUNTERS = {
    "seen": k.SEEN,
    "updates": k.UPDATES,
    "prequential_last": k.PQ_LAST,
    "prequential_averaged": k.PQ_AVERAGED,
}
"""The counters :func:`seed_learner` may set, by name."""


def learner_weights(learner: LinearLearner) -> NDArray[np.float64]:
    """The weights as a (rows, encoder dimension) matrix: one row binary, one per class otherwise.

    >>> from learning import DenseEncoder, LabelMap, Perceptron
    >>> model = Perceptron(LabelMap({"a": 1, "b": -1}), encoder=DenseEncoder(2))
    >>> learner_weights(model).shape
    (1, 3)
    """
    state = learner._state
    state.ensure_shape(learner._rows(), learner.encoder.dimension)
    return state.weights.copy()


def learner_averaged(learner: LinearLearner) -> NDArray[np.float64]:
    """The averaged weights as a (rows, encoder dimension) matrix (zeros before any event)."""
    state = learner._state
    state.ensure_shape(learner._rows(), learner.encoder.dimension)
    return state.averaged_weights()


def seed_learner(
    learner: LinearLearner,
    weights: NDArray[np.float64],
    *,
    averaged: NDArray[np.float64] | None = None,
    counters: Mapping[str, int] | None = None,
) -> LinearLearner:
    """Give ``learner`` (which has learned nothing) the weights ``weights``; return it.

    Parameters
    ----------
    learner
        A fresh learner: no event seen.
    weights
        (rows, encoder dimension), as :func:`learner_weights` returns.
    averaged
        What ``averaged_weights`` should return (needs ``counters["seen"] > 0``); ``None``: the
        average starts with the next event, from ``weights``.
    counters
        ``seen``, ``updates``, ``prequential_last``, ``prequential_averaged`` to report.

    Examples
    --------
    >>> import numpy as np
    >>> from learning import DenseEncoder, LabelMap, Perceptron
    >>> model = seed_learner(Perceptron(LabelMap({"a": 1, "b": -1}), encoder=DenseEncoder(1)),
    ...                      np.array([[0.5, -1.0]]))
    >>> model.weights.tolist(), model.n_seen
    ([0.5, -1.0], 0)
    >>> _ = model.learn_one([1.0], "a")
    >>> model.weights.tolist(), model.n_updates
    ([1.5, 0.0], 1)
    """
    if learner.n_seen:
        raise ValueError("only a learner that has learned nothing can be seeded")
    state = learner._state
    state.ensure_shape(learner._rows(), learner.encoder.dimension)
    if weights.shape != state.weights.shape:
        raise ValueError(f"weights of shape {weights.shape}, expected {state.weights.shape}")
    counts = dict(counters or {})
    unknown = set(counts) - set(_COUNTERS)
    if unknown:
        raise ValueError(f"unknown counters {sorted(unknown)}")
    _one.forget_event(learner)  # its scores were computed with the weights replaced here
    state.weights[...] = weights
    for name, value in counts.items():
        state.counters[_COUNTERS[name]] = value
    seen = counts.get("seen", 0)
    if averaged is not None:
        if seen <= 0:
            raise ValueError("an average needs counters['seen'] > 0")
        # averaged_weights() = (weight_sums + seen·w) / seen
        state.weight_sums[...] = seen * (averaged - weights)
    return learner
