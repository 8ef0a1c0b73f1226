"""The voted perceptron of Freund & Schapire: survival-weighted vote of past weight vectors.

It is the binary perceptron answering with its vote by default. The voters are an update log
bounded by ``max_voters`` and ``max_voter_bytes`` (see :mod:`learning._base`): below the bounds
the vote is exact; at them the oldest voters are dropped.
"""

from __future__ import annotations

from learning._base import DEFAULT_MAX_VOTER_BYTES, DEFAULT_MAX_VOTERS
from learning.encoders import Encoder
from learning.labels import LabelMap
from learning.perceptron import Perceptron
from learning.predictor import PredictorName


class VotedPerceptron(Perceptron):
    """The binary perceptron predicting with Freund & Schapire's vote by default.

    Examples
    --------
    >>> import numpy as np
    >>> from learning import DenseEncoder
    >>> model = VotedPerceptron(label_map=LabelMap({1: 1, -1: -1}), encoder=DenseEncoder(1))
    >>> _ = model.learn_batch(np.array([[1.0, 2.0], [1.0, -0.25], [1.0, 1.0]]),
    ...                       np.array([-1.0, 1.0, -1.0]))
    >>> [(count, weights.tolist()) for count, weights in model.voters]
    [(1, [-1.0, -2.0])]
    >>> model.snapshot().predict_batch(np.array([[1.0, -3.0]]))
    ([1], array([1.]))
    """

    def __init__(
        self,
        label_map: LabelMap | None = None,
        *,
        encoder: Encoder | None = None,
        predictor: PredictorName = "voted",
        max_voters: int = DEFAULT_MAX_VOTERS,
        max_voter_bytes: int = DEFAULT_MAX_VOTER_BYTES,
        prequential_voted: bool = False,
    ) -> None:
        super().__init__(
            label_map,
            encoder=encoder,
            predictor=predictor,
            max_voters=max_voters,
            max_voter_bytes=max_voter_bytes,
            prequential_voted=prequential_voted,
        )
