"""The compiled learners against the literal reference implementations."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from learning import (
    AveragedPerceptron,
    DenseEncoder,
    FeatureError,
    LabelError,
    LabelMap,
    MulticlassPerceptron,
    Perceptron,
    VotedPerceptron,
    dump_state,
    fit_epochs,
    load_state,
)
from tests.unit.learning.reference import binary_reference, multiclass_reference

SIGNS = LabelMap({1: 1, -1: -1})


def integer_stream(n: int, d: int, seed: int, noise: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Integer-valued x̃ (bias first) labelled by a random teacher with some flipped labels."""
    rng = np.random.default_rng(seed)
    X = np.hstack([np.ones((n, 1)), rng.integers(-4, 5, size=(n, d)).astype(float)])
    teacher = rng.integers(-3, 4, size=d + 1)
    y = np.where(X @ teacher >= 0, 1.0, -1.0)
    y[rng.random(n) < noise] *= -1
    return X, y


def binary_model(d: int, **settings: object) -> Perceptron:
    return Perceptron(SIGNS, encoder=DenseEncoder(d), **settings)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(4))
def test_binary_matches_reference_for_all_three_predictors(seed: int) -> None:
    X, y = integer_stream(300, 4, seed)
    model = binary_model(4, prequential_voted=True, max_voters=10_000)
    result = model.learn_batch(X, y)
    reference = binary_reference(X, y)
    assert result.mistakes.tolist() == reference.updates
    assert result.predictions.tolist() == reference.predictions["last"]
    assert model.weights.tolist() == reference.weights.tolist()
    assert model.averaged_weights.tolist() == reference.averaged.tolist()
    expected_errors = {
        name: int(np.sum(np.array(predicted) != y))
        for name, predicted in reference.predictions.items()
    }
    assert model.prequential_mistakes == expected_errors
    kept = sorted(
        ((count, w.tolist()) for w, count in reference.voters[:-1] if count > 0),
        key=lambda item: -item[0],
    )
    assert sorted(((c, w.tolist()) for c, w in model.voters), key=lambda item: -item[0]) == kept
    assert model.dropped_voters == 0


def test_snapshot_predictions_agree_with_prequential_predictions() -> None:
    X, y = integer_stream(200, 3, 7)
    model = binary_model(3, prequential_voted=True)
    for i in range(len(y)):
        snapshot = model.snapshot()
        codes = {
            name: snapshot.predict_codes(X[i : i + 1], name)[0][0]
            for name in ("last", "averaged", "voted")
        }
        before = model.prequential_mistakes
        result = model.learn_batch(X[i : i + 1], y[i : i + 1])
        after = model.prequential_mistakes
        assert codes["last"] == result.predictions[0]
        for name in ("averaged", "voted"):
            assert (after[name] - before[name]) == int(codes[name] != y[i])


def test_learn_one_learn_batch_and_fit_epochs_are_bit_identical() -> None:
    rng = np.random.default_rng(11)
    features = rng.standard_normal((400, 6))
    y = np.where(features @ rng.standard_normal(6) + 0.3 * rng.standard_normal(400) > 0, 1, -1)
    one = binary_model(6, prequential_voted=True, max_voters=8)
    for row, label in zip(features.tolist(), y.tolist(), strict=True):
        one.learn_one(row, label)
    batched = binary_model(6, prequential_voted=True, max_voters=8)
    X = batched.encoder.encode_batch(features)
    for start in (0, 1, 37, 200):
        stop = {0: 1, 1: 37, 37: 200, 200: 400}[start]
        batched.learn_batch(X[start:stop], y[start:stop].astype(float))
    epochs = binary_model(6, prequential_voted=True, max_voters=8)
    fit_epochs(epochs, X, y.astype(float), max_epochs=1)
    assert dump_state(one) == dump_state(batched) == dump_state(epochs)
    assert one.dropped_voters > 0  # the bound was exercised


def test_voters_are_bounded_and_drop_the_oldest() -> None:
    X, y = integer_stream(500, 3, 5, noise=0.3)
    model = binary_model(3, max_voters=4, prequential_voted=True)
    model.learn_batch(X, y)
    reference = binary_reference(X, y)
    finished = [(count, w.tolist()) for w, count in reference.voters[:-1] if count > 0]
    kept = [(count, w.tolist()) for count, w in model.voters]
    assert model.n_voters == 4 == len(kept)
    # What is kept are the four newest voters, oldest first, and the accounting adds up.
    assert kept == finished[-4:]
    assert model.dropped_voters == len(finished) - 4
    assert model.dropped_votes == sum(count for count, _ in finished[:-4])
    # The averaged predictor never drops anything.
    assert model.averaged_weights.tolist() == reference.averaged.tolist()


def test_averaged_and_voted_classes_differ_only_in_their_default_predictor() -> None:
    X, y = integer_stream(120, 3, 2)
    models = [
        cls(SIGNS, encoder=DenseEncoder(3))
        for cls in (Perceptron, AveragedPerceptron, VotedPerceptron)
    ]
    for model in models:
        model.learn_batch(X, y)
    assert [m.predictor for m in models] == ["last", "averaged", "voted"]
    assert all(m.weights.tolist() == models[0].weights.tolist() for m in models)
    row = X[0, 1:].tolist()
    snapshot = models[0].snapshot()
    for model in models:
        expected, scores = snapshot.predict_batch(X[:5], model.predictor)
        assert model.predict_one(row) == expected[0]
        labels, own_scores = model.predict_batch(X[:5])
        assert labels == expected and own_scores.tolist() == scores.tolist()


@pytest.mark.parametrize("seed", range(4))
def test_multiclass_matches_reference_including_random_tie_breaks(seed: int) -> None:
    rng = np.random.default_rng(seed)
    X = np.hstack([np.ones((300, 1)), rng.integers(-2, 3, size=(300, 3)).astype(float)])
    y = rng.integers(0, 4, size=300)
    model = MulticlassPerceptron(list("abcd"), encoder=DenseEncoder(3), seed=seed)
    result = model.learn_batch(X, y)
    reference = multiclass_reference(X, y, 4, seed)
    assert result.mistakes.tolist() == reference.updates
    assert result.predictions.tolist() == reference.predictions
    assert model.weights.tolist() == reference.weights.tolist()
    assert model.rng_state == reference.rng_state
    assert reference.rng_state != seed  # ties did happen and drew from the generator


def test_multiclass_seed_changes_tie_breaks() -> None:
    X = np.ones((5, 2))
    y = np.array([0, 1, 2, 0, 1])
    outcomes = set()
    for seed in range(6):
        model = MulticlassPerceptron([0, 1, 2], encoder=DenseEncoder(1), seed=seed)
        outcomes.add(tuple(model.learn_batch(X, y).predictions.tolist()))
    assert len(outcomes) > 1


def test_multiclass_update_rule_of_the_chapter() -> None:
    rng = np.random.default_rng(4)
    model = MulticlassPerceptron(["a", "b", "c"], encoder=DenseEncoder(2))
    updates = 0
    for _ in range(40):
        x = np.array([[1.0, *rng.integers(-3, 4, size=2).astype(float)]])
        target = int(rng.integers(0, 3))
        before = model.weights
        result = model.learn_batch(x, np.array([target]))
        predicted = int(result.predictions[0])
        expected = before.copy()
        if predicted != target:
            expected[target] += x[0]
            expected[predicted] -= x[0]
            updates += 1
        assert result.mistakes[0] == (predicted != target)
        assert model.weights.tolist() == expected.tolist()
    assert updates == model.n_updates > 0


def test_multiclass_discovers_classes_in_order_of_appearance() -> None:
    model = MulticlassPerceptron()
    for x, label in [({"a": 1.0}, "cat"), ({"b": 2.0}, "dog"), ({"a": -1.0}, "emu")]:
        model.learn_one(x, label)
    assert model.class_labels == ("cat", "dog", "emu")
    assert model.weights.shape == (3, 3)
    assert model.predict_one({"a": 1.0}) in model.class_labels


def test_multiclass_declared_classes_refuse_unknown_labels_without_side_effects() -> None:
    model = MulticlassPerceptron(["a", "b"])
    before = dump_state(model)
    with pytest.raises(LabelError) as error:
        model.learn_one({"new_feature": 1.0}, "zebra")
    assert error.value.code == "unknown_label"
    assert dump_state(model) == before
    assert model.encoder.dimension == 1  # the vocabulary did not grow


def test_multiclass_before_any_class_predicts_none() -> None:
    model = MulticlassPerceptron()
    assert model.predict_one({"a": 1.0}) is None
    labels, scores = model.snapshot().predict_batch(np.ones((2, 1)))
    assert labels == [None, None] and scores.shape == (2, 0)


def test_binary_rejects_unknown_labels_and_bad_targets() -> None:
    model = Perceptron()
    with pytest.raises(LabelError):
        model.learn_one({"a": 1.0}, "maybe")
    assert model.encoder.dimension == 1
    with pytest.raises(ValueError, match=r"\+1 or -1"):
        model.learn_batch(np.ones((2, 1)), np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="shape"):
        model.learn_batch(np.ones((2, 1)), np.array([1.0]))
    assert model.n_seen == 0


def test_bad_batches_are_refused_before_anything_is_learned() -> None:
    model = binary_model(2)
    X = np.array([[1.0, 1.0, 2.0], [1.0, np.nan, 0.0], [1.0, 2.0, 1.0]])
    with pytest.raises(FeatureError) as error:
        model.learn_batch(X, np.ones(3))
    assert (error.value.code, error.value.index) == ("non_finite", 1)
    X[1, 1] = 1e200
    with pytest.raises(FeatureError) as error:
        model.learn_batch(X, np.ones(3))
    assert (error.value.code, error.value.index) == ("too_large", 1)
    with pytest.raises(FeatureError) as error:
        model.learn_batch(np.ones((2, 4)), np.ones(2))
    assert error.value.code == "wrong_dimension"
    assert model.n_seen == 0 and model.weights.tolist() == [0.0, 0.0, 0.0]


def test_margins_are_normalised_prequential_margins() -> None:
    model = binary_model(1)
    result = model.learn_batch(np.array([[1.0, 2.0], [1.0, -0.25]]), np.array([-1.0, 1.0]))
    # First event: w = 0 gives margin 0; second: y·w·x/‖w‖ = (-1 + 0.5)/√5.
    assert result.margins.tolist() == pytest.approx([0.0, -0.5 / np.sqrt(5.0)])


def test_fit_epochs_reports_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    model = binary_model(1)
    with caplog.at_level(logging.INFO, logger="learning.training"):
        reports = fit_epochs(model, np.ones((2, 2)), np.array([1.0, -1.0]), 3)
    assert [r.epoch for r in reports] == [1, 2, 3]
    assert reports[-1].total_updates == model.n_updates
    assert "stopped at max_epochs" in caplog.text
    with pytest.raises(ValueError):
        fit_epochs(model, np.ones((1, 2)), np.ones(1), 0)


def test_fit_epochs_shuffles_reproducibly() -> None:
    X, y = integer_stream(80, 3, 9, noise=0.0)
    runs = []
    for _ in range(2):
        model = binary_model(3)
        fit_epochs(model, X, y, 200, shuffle_seed=42)
        runs.append(dump_state(model))
    other = binary_model(3)
    fit_epochs(other, X, y, 200, shuffle_seed=43)
    assert runs[0] == runs[1] != dump_state(other)


@pytest.mark.parametrize("multiclass", [False, True])
@pytest.mark.parametrize("bad_value", [np.nan, -np.inf, 5e100])
def test_large_batches_checked_inside_the_kernel_are_still_all_or_nothing(
    multiclass: bool, bad_value: float
) -> None:
    X, y = integer_stream(3000, 2, 8)
    model: Perceptron | MulticlassPerceptron
    if multiclass:
        model = MulticlassPerceptron(encoder=DenseEncoder(2), prequential_voted=True)
        targets = model.encode_labels([int(label > 0) for label in y], grow=True)
    else:
        model = binary_model(2, prequential_voted=True)
        targets = y
    model.learn_batch(X[:500], targets[:500])
    before = dump_state(model)
    assert X.nbytes >= 4 * model._state.nbytes  # the in-kernel check is the one exercised
    X[2100, 2] = bad_value
    with pytest.raises(FeatureError) as error:
        model.learn_batch(X, targets)
    expected = "too_large" if np.isfinite(bad_value) else "non_finite"
    assert (error.value.code, error.value.index) == (expected, 2100)
    assert dump_state(model) == before
    X[2100, 2] = 1.0
    checked_inside = model.learn_batch(X, targets)
    other, _, _ = load_state(before)
    for start in range(0, 3000, 10):  # small batches: checked up front
        other.learn_batch(X[start : start + 10], targets[start : start + 10])
    assert dump_state(other) == dump_state(model)
    assert checked_inside.n_updates > 0
