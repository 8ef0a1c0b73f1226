"""The averaged perceptron: the binary perceptron answering with its averaged weights.

The average is kept lazily (cost per update, not per event) by the same kernel as the plain
perceptron, so the two learn bit-identical weights; only the default predictor differs.
"""

from __future__ import annotations

from learning._base import DEFAULT_MAX_VOTER_BYTES, DEFAULT_MAX_VOTERS
from learning.encoders import Encoder
from learning.labels import LabelMap
from learning.perceptron import Perceptron
from learning.predictor import PredictorName


class AveragedPerceptron(Perceptron):
    """The binary perceptron predicting with its averaged weights by default.

    Examples
    --------
    >>> import numpy as np
    >>> from learning import DenseEncoder
    >>> model = AveragedPerceptron(label_map=LabelMap({1: 1, -1: -1}), encoder=DenseEncoder(1))
    >>> _ = model.learn_batch(np.array([[1.0, 2.0], [1.0, -0.25], [1.0, 1.0]]),
    ...                       np.array([-1.0, 1.0, -1.0]))
    >>> model.averaged_weights.tolist()
    [-0.3333333333333333, -2.1666666666666665]
    """

    def __init__(
        self,
        label_map: LabelMap | None = None,
        *,
        encoder: Encoder | None = None,
        predictor: PredictorName = "averaged",
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
