"""The mistake-bound tracker: M_t ≤ B_t at every t, Novikoff, Kesler, violations."""

from __future__ import annotations

import logging
import math

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learning import (
    BoundTracker,
    DenseEncoder,
    LabelMap,
    MulticlassPerceptron,
    Perceptron,
    Reference,
    default_gamma_grid,
    dump_state,
    fit_epochs,
    load_state,
)
from tests.unit.learning.reference import bound_at, kesler_margin

SIGNS = LabelMap({1: 1, -1: -1})
RELATIVE = 1e-9
GRID = default_gamma_grid()

values = st.floats(-10, 10, allow_nan=False, allow_infinity=False)


@st.composite
def binary_streams(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = draw(st.integers(1, 30))
    d = draw(st.integers(1, 4))
    X = draw(hnp.arrays(np.float64, (n, d), elements=values))
    y = np.array(draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=n, max_size=n)))
    u = draw(hnp.arrays(np.float64, d + 1, elements=values).filter(lambda a: (a != 0).any()))
    return X, y, u


@st.composite
def multiclass_streams(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    n = draw(st.integers(1, 30))
    d = draw(st.integers(1, 3))
    classes = draw(st.integers(2, 4))
    X = draw(hnp.arrays(np.float64, (n, d), elements=values))
    y = np.array(draw(st.lists(st.integers(0, classes - 1), min_size=n, max_size=n)))
    U = draw(
        hnp.arrays(np.float64, (classes, d + 1), elements=values).filter(lambda a: (a != 0).any())
    )
    return X, y, U, classes


def check_every_t(
    tracker: BoundTracker, X: np.ndarray, mistakes: np.ndarray, margins: list[float], kesler: bool
) -> None:
    """Feed events one by one; at each t compare with the literal bound and check M_t ≤ B_t."""
    made = 0
    for t in range(1, len(mistakes) + 1):
        made += int(mistakes[t - 1])
        radius = math.sqrt(max(float(x @ x) for x in X[:t])) * (math.sqrt(2) if kesler else 1)
        expected = bound_at(radius, margins[:t], GRID)
        assert made <= expected * (1 + RELATIVE)
        status = tracker_after(tracker, t)
        assert status.mistakes == made
        assert status.bound == pytest.approx(expected, rel=1e-12)
        assert made <= status.bound
        assert not status.violated
        positive = min(margins[:t]) > 0
        assert (status.novikoff is not None) == positive
        if positive:
            assert made <= status.novikoff * (1 + RELATIVE)


_observed: dict[int, list] = {}


def unit_length(array: np.ndarray) -> np.ndarray:
    scaled = array / np.abs(array).max()  # tiny entries must not underflow the norm
    return scaled / np.sqrt((scaled**2).sum())


def tracker_after(tracker: BoundTracker, t: int):  # type: ignore[no-untyped-def]
    return _observed[id(tracker)][t - 1]


def observe_one_by_one(
    tracker: BoundTracker, X: np.ndarray, y: np.ndarray, mistakes: np.ndarray, n_classes: int = 0
) -> None:
    statuses = []
    for i in range(len(y)):
        extra = {"n_classes": n_classes} if n_classes else {}
        tracker.observe_batch(X[i : i + 1], y[i : i + 1], mistakes[i : i + 1], **extra)
        statuses.append(tracker.status()[0])
    _observed[id(tracker)] = statuses


@settings(max_examples=40, deadline=None)
@given(binary_streams())
def test_binary_mistakes_never_exceed_the_bound_at_any_t(
    stream: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> None:
    features, y, u = stream
    model = Perceptron(SIGNS, encoder=DenseEncoder(features.shape[1]))
    X = model.encoder.encode_batch(features)
    mistakes = np.zeros(0, dtype=bool)
    for _ in range(3):  # several epochs so mistakes pile up on non-separable streams
        mistakes = np.concatenate([mistakes, model.learn_batch(X, y).mistakes])
    X3, y3 = np.vstack([X] * 3), np.concatenate([y] * 3)
    tracker = BoundTracker([Reference("u", u)])
    observe_one_by_one(tracker, X3, y3, mistakes)
    unit = unit_length(u)
    margins = [float(target * (unit @ x)) for x, target in zip(X3, y3, strict=True)]
    check_every_t(tracker, X3, mistakes, margins, kesler=False)
    assert not tracker.violated


@settings(max_examples=40, deadline=None)
@given(multiclass_streams())
def test_multiclass_mistakes_never_exceed_the_kesler_bound_at_any_t(
    stream: tuple[np.ndarray, np.ndarray, np.ndarray, int],
) -> None:
    features, y, U, classes = stream
    model = MulticlassPerceptron(list(range(classes)), encoder=DenseEncoder(features.shape[1]))
    X = model.encoder.encode_batch(features)
    mistakes = np.concatenate([model.learn_batch(X, y).mistakes for _ in range(3)])
    X3, y3 = np.vstack([X] * 3), np.concatenate([y] * 3)
    tracker = BoundTracker([Reference("U", U)], multiclass=True)
    observe_one_by_one(tracker, X3, y3, mistakes, n_classes=classes)
    unit = unit_length(U)
    margins = [kesler_margin(unit, x, int(target)) for x, target in zip(X3, y3, strict=True)]
    check_every_t(tracker, X3, mistakes, margins, kesler=True)


@st.composite
def separable_streams(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, float]:
    d = draw(st.integers(1, 4))
    gamma = draw(st.floats(0.05, 0.5))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(d + 1)
    u /= np.linalg.norm(u)
    X = np.hstack([np.ones((200, 1)), rng.uniform(-2, 2, size=(200, d))])
    margin = X @ u
    keep = np.abs(margin) >= gamma
    return X[keep], np.where(margin[keep] > 0, 1.0, -1.0), gamma


@settings(max_examples=40, deadline=None)
@given(separable_streams())
def test_separable_with_margin_gamma_makes_at_most_r_over_gamma_squared_mistakes(
    stream: tuple[np.ndarray, np.ndarray, float],
) -> None:
    X, y, gamma = stream
    if len(y) == 0:
        return
    model = Perceptron(SIGNS, encoder=DenseEncoder(X.shape[1] - 1))
    reports = fit_epochs(model, X, y, max_epochs=100_000)
    assert reports[-1].converged
    radius = float(np.sqrt((X**2).sum(axis=1).max()))
    assert model.n_updates <= (radius / gamma) ** 2


def test_novikoff_is_reported_while_every_margin_is_positive() -> None:
    tracker = BoundTracker([Reference("u", [0.0, -1.0])])
    X = np.array([[1.0, 2.0], [1.0, -0.25]])
    tracker.observe_batch(X, np.array([-1.0, 1.0]), np.array([True, True]))
    status = tracker.status()[0]
    assert status.min_margin == 0.25
    assert status.novikoff == pytest.approx(5.0 / 0.25**2)
    tracker.observe_batch(np.array([[1.0, 1.0]]), np.array([1.0]), np.array([False]))
    status = tracker.status()[0]
    assert status.novikoff is None and status.min_margin == -1.0
    assert status.k >= 1


def test_kesler_bound_uses_root_two_radius() -> None:
    U = np.array([[1.0, 0.0], [0.0, 1.0]])
    tracker = BoundTracker([Reference("U", U)], multiclass=True)
    X = np.array([[3.0, 4.0]])
    tracker.observe_batch(X, np.array([1]), np.array([False]), n_classes=2)
    status = tracker.status()[0]
    assert status.radius == 5.0
    margin = (4.0 - 3.0) / math.sqrt(2)
    assert status.min_margin == pytest.approx(margin)
    assert status.novikoff == pytest.approx((math.sqrt(2) * 5.0 / margin) ** 2)
    assert status.bound == pytest.approx(bound_at(math.sqrt(2) * 5.0, [margin], GRID))


def test_unknown_classes_count_as_zero_rows() -> None:
    tracker = BoundTracker([Reference("U", [[1.0, 0.0], [0.0, 1.0]])], multiclass=True)
    # Class 2 has no row: its score is 0, which beats class 0's -1 for x = (-1, 2).
    tracker.observe_batch(np.array([[-1.0, 2.0]]), np.array([1]), np.array([False]), n_classes=3)
    assert tracker.status()[0].min_margin == pytest.approx(2.0 / math.sqrt(2))


def test_a_violation_is_detected_and_logged_loudly(caplog: pytest.LogCaptureFixture) -> None:
    tracker = BoundTracker([Reference("u", [0.0, 1.0])])
    X = np.tile([[1.0, 10.0]], (50, 1))  # margin 10/√101... per event, R = √101
    with caplog.at_level(logging.ERROR, logger="learning.bounds"):
        tracker.observe_batch(X, np.ones(50), np.ones(50, dtype=bool))  # 50 fake "mistakes"
    status = tracker.status()[0]
    assert status.violated and tracker.violated
    assert status.violation is not None
    assert status.violation.mistakes > status.violation.bound
    assert status.violation.event == status.violation.mistakes  # every event was a "mistake"
    assert "MISTAKE BOUND VIOLATED" in caplog.text


def test_margin_estimate_is_labelled_a_diagnostic() -> None:
    model = Perceptron(SIGNS, encoder=DenseEncoder(1))
    tracker = BoundTracker(margin_window=2)
    assert tracker.margin_estimate().value is None
    X = np.array([[1.0, 2.0], [1.0, -0.25], [1.0, 3.0]])
    y = np.array([-1.0, 1.0, -1.0])
    result = model.learn_batch(X, y)
    tracker.observe_batch(X, y, result)
    estimate = tracker.margin_estimate()
    assert estimate.window == 2 and estimate.count == 2
    assert estimate.value == pytest.approx(min(result.margins[1:]))
    assert estimate.as_dict()["note"] == "diagnostic, not a certificate"
    assert tracker.mistakes == 2 and tracker.seen == 3


def test_tracker_round_trips_with_the_learner() -> None:
    model = MulticlassPerceptron(["a", "b", "c"], encoder=DenseEncoder(2))
    tracker = BoundTracker([Reference("U", np.eye(3, 3))], multiclass=True)
    rng = np.random.default_rng(0)
    X = model.encoder.encode_batch(rng.standard_normal((30, 2)))
    y = rng.integers(0, 3, 30)
    tracker.observe_batch(X, y, model.learn_batch(X, y))
    learner, loaded, extra = load_state(dump_state(model, tracker, {"offsets": [1, 2]}))
    assert loaded is not None and extra == {"offsets": [1, 2]}
    assert loaded.status() == tracker.status()
    assert loaded.margin_estimate() == tracker.margin_estimate()
    more = model.encoder.encode_batch(rng.standard_normal((10, 2)))
    labels = rng.integers(0, 3, 10)
    tracker.observe_batch(more, labels, model.learn_batch(more, labels))
    loaded.observe_batch(more, labels, learner.learn_batch(more, labels))
    assert loaded.status() == tracker.status()


def test_references_are_normalised_and_validated() -> None:
    assert Reference("u", [0.0, 2.0]).weights.tolist() == [0.0, 1.0]
    U = Reference("U", [[3.0, 0.0], [0.0, 4.0]]).weights
    assert float(np.linalg.norm(U)) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        Reference("zero", [0.0, 0.0])
    with pytest.raises(ValueError):
        Reference("nan", [np.nan, 1.0])
    with pytest.raises(ValueError):
        BoundTracker([Reference("u", [1.0]), Reference("u", [2.0])])
    with pytest.raises(ValueError):
        BoundTracker([Reference("U", [[1.0]])])  # a matrix needs multiclass=True
    with pytest.raises(ValueError):
        BoundTracker(gamma_grid=[0.2, 0.1])


def test_default_grid_is_geometric_with_twelve_steps_per_decade() -> None:
    ratios = GRID[1:] / GRID[:-1]
    assert np.allclose(ratios, 10 ** (1 / 12))
    assert GRID[0] == 1e-6 and GRID[-1] == 1e6


def test_wider_events_than_the_reference_are_handled() -> None:
    tracker = BoundTracker([Reference("u", [1.0, 0.0])])
    tracker.observe_batch(np.array([[1.0, 0.0, 5.0]]), np.array([1.0]), np.array([True]))
    status = tracker.status()[0]
    assert status.radius == pytest.approx(math.sqrt(26.0))
    assert status.min_margin == 1.0
