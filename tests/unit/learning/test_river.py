"""river compatibility: pipelines, progressive validation, cloning."""

from __future__ import annotations

import itertools

import pytest
from river import base, compose, datasets, evaluate, metrics, preprocessing
from river import checks as river_checks

from learning import AveragedPerceptron, MulticlassPerceptron, Perceptron, VotedPerceptron


def test_learners_are_river_classifiers() -> None:
    for model in (Perceptron(), AveragedPerceptron(), VotedPerceptron(), MulticlassPerceptron()):
        assert isinstance(model, base.Classifier)
    assert MulticlassPerceptron()._multiclass and not Perceptron()._multiclass


@pytest.mark.parametrize(
    ("cls", "accuracy"),
    [(Perceptron, 0.859200), (AveragedPerceptron, 0.890400), (VotedPerceptron, 0.884000)],
)
def test_progressive_validation_after_standard_scaler(cls: type, accuracy: float) -> None:
    model = preprocessing.StandardScaler() | cls()
    metric = evaluate.progressive_val_score(datasets.Phishing(), model, metrics.Accuracy())
    assert metric.get() == pytest.approx(accuracy, abs=1e-6)


def test_multiclass_in_a_pipeline() -> None:
    model = compose.Pipeline(preprocessing.StandardScaler(), MulticlassPerceptron(seed=1))
    stream = itertools.islice(datasets.ImageSegments(), 600)
    metric = evaluate.progressive_val_score(stream, model, metrics.Accuracy())
    assert metric.get() > 0.6
    assert len(model["MulticlassPerceptron"].class_labels) == 7


def test_clone_gives_a_fresh_learner_with_the_same_hyperparameters() -> None:
    model = AveragedPerceptron(max_voters=7)
    model.learn_one({"a": 1.0}, True)
    clone = model.clone()
    assert isinstance(clone, AveragedPerceptron)
    assert (clone.max_voters, clone.predictor) == (7, "averaged")
    assert clone.n_seen == 0


@pytest.mark.parametrize(
    "model",
    [Perceptron(), AveragedPerceptron(), VotedPerceptron(), MulticlassPerceptron(seed=1)],
    ids=lambda model: type(model).__name__,
)
def test_river_check_estimator_passes(model: base.Classifier) -> None:
    """river's own estimator checks (``river.checks.check_estimator``), none skipped."""
    assert model._unit_test_skips() == set()
    river_checks.check_estimator(model)


def failing_checks(model: base.Classifier) -> list[str]:
    failed = []
    for check in river_checks.yield_checks(model):
        try:
            check(model.clone())
        except Exception:  # any exception fails the check, as in check_estimator
            failed.append(check.__name__)
    return failed


class Impure(Perceptron):  # type: ignore[misc]
    """A perceptron that empties the event it learned from (river's checks forbid it)."""

    def learn_one(self, x: dict[str, float], y: bool) -> None:
        super().learn_one(x, y)
        x.clear()


def test_river_check_estimator_can_fail() -> None:
    """Control: a learner that mutates its input fails river's ``check_learn_one``."""
    assert failing_checks(Perceptron()) == []
    assert "check_learn_one" in failing_checks(Impure())
