"""Bad CSR batches are refused with clear reasons and change nothing; width rules; the sparse
single-event path of learn_one / predict_one."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from learning import (
    BoundTracker,
    DenseEncoder,
    FeatureError,
    LabelMap,
    MulticlassPerceptron,
    Perceptron,
    VocabularyEncoder,
    dump_state,
    fit_epochs,
)
from learning.sparse import CSRBatch

SIGNS = LabelMap({1: 1, -1: -1})
GOOD = CSRBatch(
    indptr=np.array([0, 2, 3]),
    indices=np.array([0, 2, 1]),
    values=np.array([1.0, 2.0, -1.0]),
    dimension=3,
)


def trained() -> Perceptron:
    model = Perceptron(SIGNS, encoder=DenseEncoder(2), prequential_voted=True)
    model.learn_batch(GOOD, np.array([1.0, -1.0]))
    model.learn_batch(GOOD, np.array([-1.0, 1.0]))
    return model


MALFORMED: dict[str, tuple[CSRBatch, str]] = {
    "indptr not from 0": (
        CSRBatch(np.array([1, 2, 3]), GOOD.indices, GOOD.values, 3),
        "starting at 0",
    ),
    "indptr short of the data": (
        CSRBatch(np.array([0, 2, 2]), GOOD.indices, GOOD.values, 3),
        "end at len",
    ),
    "indptr decreasing": (
        CSRBatch(np.array([0, 3, 2, 3]), GOOD.indices, GOOD.values, 3),
        "decrease",
    ),
    "columns unsorted": (
        CSRBatch(GOOD.indptr, np.array([2, 0, 1]), GOOD.values, 3),
        "strictly increase",
    ),
    "duplicate column": (
        CSRBatch(GOOD.indptr, np.array([1, 1, 1]), GOOD.values, 3),
        "strictly increase",
    ),
    "column beyond the dimension": (
        CSRBatch(GOOD.indptr, np.array([0, 3, 1]), GOOD.values, 3),
        r"\[0, 3\)",
    ),
    "negative column": (
        CSRBatch(GOOD.indptr, np.array([-1, 2, 1]), GOOD.values, 3),
        r"\[0, 3\)",
    ),
    "values of another length": (
        CSRBatch(GOOD.indptr, GOOD.indices, np.array([1.0, 2.0]), 3),
        "len",
    ),
    "string values": (
        CSRBatch(GOOD.indptr, GOOD.indices, np.array(["a", "b", "c"]), 3),  # type: ignore[arg-type]
        "values must be",
    ),
    "float columns": (
        CSRBatch(GOOD.indptr, np.array([0.0, 2.0, 1.0]), GOOD.values, 3),  # type: ignore[arg-type]
        "indices must be",
    ),
}


@pytest.mark.parametrize(
    ("indices", "reason"),
    [
        ([1, 0, 0, 3], r"\[0, 3\)"),  # an order breach in row 0, a column out of range in row 1
        ([1, 0, 0, 2], "strictly increase"),  # control: the order breach alone
        ([0, 1, 0, 2], None),  # control: well formed
    ],
)
def test_a_column_out_of_range_is_named_before_an_earlier_order_breach(
    indices: list[int], reason: str | None
) -> None:
    batch = CSRBatch(np.array([0, 2, 4]), np.array(indices), np.ones(4), 3)
    if reason is None:
        assert batch.validate() is batch
        return
    with pytest.raises(ValueError, match=reason):
        batch.validate()


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_batch_is_refused_and_changes_nothing(name: str) -> None:
    batch, reason = MALFORMED[name]
    model = trained()
    before = dump_state(model)
    with pytest.raises(ValueError, match=reason) as error:
        model.learn_batch(batch, np.array([1.0, -1.0]))
    assert not isinstance(error.value, FeatureError)  # a bug of the batch's builder, not an event
    assert dump_state(model) == before
    with pytest.raises(ValueError, match=reason):
        model.snapshot().predict_codes(batch)
    with pytest.raises(ValueError, match=reason):
        BoundTracker().observe_batch(batch, np.array([1.0, -1.0]), np.array([True, False]))
    # Control: the well-formed batch is learned.
    assert model.learn_batch(GOOD, np.array([1.0, -1.0])).mistakes.shape == (2,)
    assert dump_state(model) != before


@pytest.mark.parametrize(
    ("value", "code"), [(np.nan, "non_finite"), (-np.inf, "non_finite"), (2e100, "too_large")]
)
def test_bad_values_name_their_row_and_change_nothing(value: float, code: str) -> None:
    model = trained()
    before = dump_state(model)
    values = GOOD.values.copy()
    values[2] = value  # row 1, column 1
    batch = CSRBatch(GOOD.indptr, GOOD.indices, values, 3)
    with pytest.raises(FeatureError) as error:
        model.learn_batch(batch, np.array([1.0, -1.0]))
    assert (error.value.code, error.value.index) == (code, 1)
    assert "x̃[1]" in str(error.value)
    assert dump_state(model) == before


def test_bad_labels_with_a_good_batch_change_nothing() -> None:
    model = trained()
    before = dump_state(model)
    with pytest.raises(ValueError, match="must be \\+1 or -1"):
        model.learn_batch(GOOD, np.array([1.0, 0.5]))
    assert dump_state(model) == before


def test_width_rules_apply_to_sparse_batches() -> None:
    fixed = Perceptron(SIGNS, encoder=DenseEncoder(2))
    narrow = CSRBatch(np.array([0, 1]), np.array([0]), np.array([1.0]), 2)
    with pytest.raises(FeatureError, match="dimension 3, got 2") as error:
        fixed.learn_batch(narrow, np.array([1.0]))
    assert error.value.code == "wrong_dimension"
    vocabulary = Perceptron(SIGNS, encoder=VocabularyEncoder())
    X = vocabulary.encoder.encode_batch([{"a": 1.0}, {"b": 2.0, "c": 1.0}], grow=True)
    dense = Perceptron(SIGNS, encoder=VocabularyEncoder())
    dense.encoder.encode_batch([{"a": 1.0}, {"b": 2.0, "c": 1.0}], grow=True)
    y = np.array([1.0, -1.0])
    # A narrower batch (features learned so far) is fine, and equals the dense one.
    vocabulary.learn_batch(CSRBatch.from_dense(X[:, :2]).with_dimension(2), y[:1][[0, 0]])
    dense.learn_batch(X[:, :2], y[:1][[0, 0]])
    vocabulary.learn_batch(CSRBatch.from_dense(X), y)
    dense.learn_batch(X, y)
    assert dump_state(vocabulary) == dump_state(dense)
    wider = CSRBatch(np.array([0, 1]), np.array([5]), np.array([1.0]), 6)
    with pytest.raises(FeatureError, match="encoder knows only 4"):
        vocabulary.learn_batch(wider, np.array([1.0]))
    # Prediction ignores columns the weights do not have yet (their weights are zero).
    assert (
        vocabulary.predict_batch(wider)[1].tolist()
        == dense.predict_batch(np.zeros((1, 4)))[1].tolist()
    )


class SparseDictEncoder(DenseEncoder):
    """A stand-in sparse encoder: {column: value} dicts, validated output as the protocol says."""

    sparse = True

    def __init__(self, n_features: int, *, validated: bool) -> None:
        super().__init__(n_features)
        self.validated_output = validated
        self.calls = 0

    def encode_sparse(self, features: Any, *, grow: bool = False) -> tuple[np.ndarray, np.ndarray]:
        self.calls += 1
        columns = np.array(sorted(features), dtype=np.int64)
        return columns, np.array([float(features[c]) for c in columns.tolist()])


EVENTS = [{0: 1.0, 3: 2.0}, {0: 1.0, 1: -1.0}, {0: 1.0, 3: -1.0, 5: 0.5}, {0: 1.0, 2: 4.0}] * 5
BINARY = [True, False, False, True] * 5
CLASSES = ["a", "b", "c", "b"] * 5


@pytest.mark.parametrize("validated", [True, False])
def test_learn_one_and_predict_one_route_sparse_encoders_through_the_csr_kernel(
    validated: bool,
) -> None:
    encoder = SparseDictEncoder(5, validated=validated)
    sparse = Perceptron(encoder=encoder, prequential_voted=True, max_voters=3)
    dense = Perceptron(encoder=DenseEncoder(5), prequential_voted=True, max_voters=3)
    X = np.zeros((len(EVENTS), 6))
    for i, event in enumerate(EVENTS):
        X[i, list(event)] = list(event.values())
    for i, (event, label) in enumerate(zip(EVENTS, BINARY, strict=True)):
        assert sparse.predict_one(event) == dense.predict_batch(X[i : i + 1])[0][0]
        assert sparse.learn_one(event, label) == bool(
            dense.learn_batch(X[i : i + 1], dense.encode_labels([label])).mistakes[0]
        )
    assert encoder.calls == 2 * len(EVENTS)  # the sparse form was used, not encode()
    assert np.array_equal(sparse.weights, dense.weights)
    assert sparse.prequential_mistakes == dense.prequential_mistakes
    multi = MulticlassPerceptron(encoder=SparseDictEncoder(5, validated=validated))
    reference = MulticlassPerceptron(encoder=DenseEncoder(5))
    for i, (event, label) in enumerate(zip(EVENTS, CLASSES, strict=True)):
        assert multi.predict_one(event) == reference.predict_batch(X[i : i + 1])[0][0]
        multi.learn_one(event, label)
        reference.learn_batch(X[i : i + 1], reference.encode_labels([label], grow=True))
    assert np.array_equal(multi.weights, reference.weights)


def test_an_unvalidated_sparse_encoder_output_is_checked() -> None:
    model = Perceptron(encoder=SparseDictEncoder(3, validated=False))
    model.learn_one({0: 1.0}, True)
    before = dump_state(model)
    with pytest.raises(FeatureError, match=r"non_finite"):
        model.learn_one({0: 1.0, 2: float("nan")}, True)
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        model.learn_one({0: 1.0, 9: 1.0}, True)
    assert dump_state(model) == before


@pytest.mark.parametrize("bad_value", [np.nan, 5e100])
def test_a_large_sparse_batch_checked_inside_the_kernel_is_all_or_nothing(bad_value: float) -> None:
    rng = np.random.default_rng(6)
    X = np.where(rng.random((4000, 3)) < 0.5, rng.integers(-3, 4, (4000, 3)), 0).astype(float)
    X[:, 0] = 1.0
    y = np.where(rng.random(4000) < 0.5, 1.0, -1.0)
    model = Perceptron(SIGNS, encoder=DenseEncoder(2), prequential_voted=True)
    model.learn_batch(CSRBatch.from_dense(X[:100]), y[:100])
    before = dump_state(model)
    batch = CSRBatch.from_dense(X)
    assert batch.values.nbytes >= 4 * model._state.nbytes  # the in-kernel check is exercised
    values = batch.values.copy()
    values[int(batch.indptr[3000])] = bad_value  # row 3000, its first stored value (the bias)
    bad = CSRBatch(batch.indptr, batch.indices, values, batch.dimension)
    with pytest.raises(FeatureError) as error:
        model.learn_batch(bad, y)
    assert error.value.index == 3000
    assert error.value.code == ("non_finite" if np.isnan(bad_value) else "too_large")
    assert dump_state(model) == before
    # Control: the intact batch is learned, exactly as in small batches checked up front.
    model.learn_batch(batch, y)
    other = Perceptron(SIGNS, encoder=DenseEncoder(2), prequential_voted=True)
    other.learn_batch(CSRBatch.from_dense(X[:100]), y[:100])
    for start in range(0, 4000, 10):
        other.learn_batch(batch.select(start, start + 10), y[start : start + 10])
    assert dump_state(other) == dump_state(model)


def test_fit_epochs_takes_csr_and_shuffles_like_dense() -> None:
    rng = np.random.default_rng(3)
    dense = np.hstack([np.ones((40, 1)), rng.integers(-2, 3, size=(40, 5)).astype(float)])
    y = np.where(dense[:, 1] + 0.5 * dense[:, 2] > 0, 1.0, -1.0)

    def run(X: object) -> tuple[list[int], bytes]:
        model = Perceptron(label_map=LabelMap({1: 1, -1: -1}), encoder=DenseEncoder(5))
        reports = fit_epochs(model, X, y, 5, shuffle_seed=7)  # type: ignore[arg-type]
        return [r.updates for r in reports], model.weights.tobytes()

    assert run(CSRBatch.from_dense(dense)) == run(dense)
    # Control: another shuffle gives another run, so the comparison sees the order.
    model = Perceptron(label_map=LabelMap({1: 1, -1: -1}), encoder=DenseEncoder(5))
    other = fit_epochs(model, dense, y, 5, shuffle_seed=8)
    assert ([r.updates for r in other], model.weights.tobytes()) != run(dense)
