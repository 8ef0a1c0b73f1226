"""The seeds' own examples: the PLA notes, XOR, Iris, and scikit-learn's Perceptron."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Perceptron as SklearnPerceptron
from sklearn.linear_model import SGDClassifier

from learning import DenseEncoder, LabelMap, Perceptron, fit_epochs

SIGNS = LabelMap({1: 1, -1: -1})


def binary(n_features: int, *, bias: bool = True) -> Perceptron:
    return Perceptron(SIGNS, encoder=DenseEncoder(n_features, bias=bias))


def test_pla_notes_worked_example_step_by_step() -> None:
    model = binary(1)
    x1, x2 = [2.0], [-0.25]
    assert model.learn_one(x1, -1) is True  # w = 0 gives y·w·x = 0 ≤ 0: a mistake
    assert model.weights.tolist() == [-1.0, -2.0]
    assert model.learn_one(x2, 1) is True
    assert model.weights.tolist() == [0.0, -2.25]
    assert model.learn_one(x1, -1) is False
    assert model.learn_one(x2, 1) is False
    assert model.weights.tolist() == [0.0, -2.25]
    assert model.n_updates == 2


def test_pla_notes_example_converges_in_two_epochs() -> None:
    model = binary(1)
    X = model.encoder.encode_batch([[2.0], [-0.25]])
    reports = fit_epochs(model, X, np.array([-1.0, 1.0]), max_epochs=100)
    assert [(r.updates, r.converged) for r in reports] == [(2, False), (0, True)]
    assert model.weights.tolist() == [0.0, -2.25]


def test_sign_of_zero_is_plus_one_but_zero_margin_still_updates() -> None:
    model = binary(1)
    assert model.predict_one([5.0]) == 1  # w·x = 0 predicts +1
    result = model.learn_batch(np.array([[1.0, 5.0]]), np.array([1.0]))
    assert result.predictions.tolist() == [1.0]
    assert result.mistakes.tolist() == [True]  # y·(w·x) = 0 ≤ 0
    assert result.prequential_mistakes["last"] == 0  # ... though the prediction was right


def test_bias_can_be_switched_off() -> None:
    model = binary(2, bias=False)
    model.learn_one([1.0, 2.0], 1)
    assert model.weights.tolist() == [1.0, 2.0]
    assert model.encoder.coordinate_names == ("x1", "x2")


def test_xor_never_converges_and_stops_at_the_epoch_limit() -> None:
    model = binary(2)
    X = model.encoder.encode_batch([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    y = np.array([-1.0, 1.0, 1.0, -1.0])
    reports = fit_epochs(model, X, y, max_epochs=50)
    assert len(reports) == 50
    assert all(report.updates > 0 for report in reports)
    assert not reports[-1].converged


def iris_setosa(columns: list[int]) -> tuple[np.ndarray, np.ndarray]:
    iris = load_iris()
    return iris.data[:, columns], np.where(iris.target == 0, 1.0, -1.0)


def test_iris_petal_converges_after_four_updates_as_in_the_slides() -> None:
    features, y = iris_setosa([2, 3])
    model = binary(2)
    X = model.encoder.encode_batch(features)
    first = model.learn_batch(X, y)
    second = model.learn_batch(X, y)
    third = model.learn_batch(X, y)
    # The slides: "Iteration 1: 1, 51; Iteration 2: 1, 2; Iteration 3" (1-based points).
    assert np.flatnonzero(first.mistakes).tolist() == [0, 50]
    assert np.flatnonzero(second.mistakes).tolist() == [0, 1]
    assert third.n_updates == 0
    assert model.n_updates == 4


@pytest.mark.parametrize("setosa", [1.0, -1.0])
def test_iris_sepal_needs_1562_updates_over_721_epochs_in_the_data_set_order(
    setosa: float,
) -> None:
    features, y = iris_setosa([0, 1])
    model = binary(2)
    reports = fit_epochs(model, model.encoder.encode_batch(features), setosa * y, 5000)
    assert len(reports) == 721
    assert reports[-1].converged and reports[-2].updates > 0
    assert model.n_updates == 1562 == sum(r.updates for r in reports)
    assert (setosa * model.weights).tolist() == pytest.approx([126.0, -79.8, 101.4])


def test_iris_sepal_shuffled_orders_also_converge_after_hundreds_of_updates() -> None:
    features, y = iris_setosa([0, 1])
    counts = []
    for seed in range(3):
        model = binary(2)
        reports = fit_epochs(model, model.encoder.encode_batch(features), y, 5000, seed)
        assert reports[-1].converged
        counts.append(model.n_updates)
    assert all(500 < count < 5000 for count in counts)
    assert len(set(counts)) > 1  # the order matters


def sklearn_perceptron(**settings: object) -> SklearnPerceptron:
    return SklearnPerceptron(eta0=1.0, penalty=None, alpha=0.0, shuffle=False, **settings)


@pytest.mark.parametrize("epochs", [1, 7, 50])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_weights_equal_scikit_learn_perceptron(epochs: int, fit_intercept: bool) -> None:
    features, y = iris_setosa([0, 1])
    reference = sklearn_perceptron(max_iter=epochs, tol=None, fit_intercept=fit_intercept)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reference.fit(features, y.astype(int))
    model = binary(2, bias=fit_intercept)
    X = model.encoder.encode_batch(features)
    for _ in range(epochs):
        model.learn_batch(X, y)
    expected = reference.coef_[0].tolist()
    if fit_intercept:
        expected = [float(reference.intercept_[0]), *expected]
    assert model.weights.tolist() == expected


def test_weights_equal_scikit_learn_partial_fit_event_by_event() -> None:
    features, y = iris_setosa([2, 3])
    order = np.random.default_rng(3).permutation(len(y))
    reference = sklearn_perceptron(tol=None)
    model = binary(2)
    for i in order:
        reference.partial_fit(features[i : i + 1], y[i : i + 1].astype(int), classes=[-1, 1])
        model.learn_one(features[i].tolist(), int(y[i]))
        assert model.weights.tolist() == [float(reference.intercept_[0]), *reference.coef_[0]]


def test_averaged_weights_equal_scikit_learn_averaged_sgd() -> None:
    features, y = iris_setosa([0, 1])
    reference = SGDClassifier(
        loss="perceptron",
        learning_rate="constant",
        eta0=1.0,
        penalty=None,
        alpha=0.0,
        shuffle=False,
        max_iter=20,
        tol=None,
        average=True,
    )
    reference.fit(features, y.astype(int))
    model = binary(2)
    X = model.encoder.encode_batch(features)
    for _ in range(20):
        model.learn_batch(X, y)
    expected = [float(reference.intercept_[0]), *reference.coef_[0]]
    np.testing.assert_allclose(model.averaged_weights, expected, rtol=1e-12)
