"""novikoff's learning core: perceptrons, encoders, mistake bounds and state — pure, no I/O.

Everything other packages use is importable from here (see ``docs/DESIGN.md``).
"""

from learning._base import LinearLearner
from learning.averaged import AveragedPerceptron
from learning.bounds import (
    BoundStatus,
    BoundTracker,
    MarginEstimate,
    Reference,
    Violation,
    default_gamma_grid,
)
from learning.encoders import (
    DenseEncoder,
    Encoder,
    HashingEncoder,
    SchemaEncoder,
    VocabularyEncoder,
)
from learning.errors import FEATURE_ERROR_CODES, FeatureError, LabelError, StateError
from learning.labels import ClassIndex, LabelMap
from learning.mixing import DistributedBound, DistributedBoundStatus, ShardRound, mix_uniform
from learning.multiclass import MulticlassPerceptron
from learning.perceptron import Perceptron
from learning.predictor import PREDICTORS, BatchResult, Predictor
from learning.sparse import CSRBatch
from learning.state import dump_state, load_state
from learning.training import EpochReport, fit_epochs
from learning.voted import VotedPerceptron

__all__ = [
    "FEATURE_ERROR_CODES",
    "PREDICTORS",
    "AveragedPerceptron",
    "BatchResult",
    "BoundStatus",
    "BoundTracker",
    "CSRBatch",
    "ClassIndex",
    "DenseEncoder",
    "DistributedBound",
    "DistributedBoundStatus",
    "Encoder",
    "EpochReport",
    "FeatureError",
    "HashingEncoder",
    "LabelError",
    "LabelMap",
    "LinearLearner",
    "MarginEstimate",
    "MulticlassPerceptron",
    "Perceptron",
    "Predictor",
    "Reference",
    "SchemaEncoder",
    "ShardRound",
    "StateError",
    "Violation",
    "VocabularyEncoder",
    "VotedPerceptron",
    "default_gamma_grid",
    "dump_state",
    "fit_epochs",
    "load_state",
    "mix_uniform",
]
