"""The single-event paths (learn_one / predict_one) equal learn_batch, whatever happens between."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from learning import FeatureError, HashingEncoder, Perceptron, VocabularyEncoder, _one, dump_state

EVENTS: list[dict[str, Any]] = [
    {"alpha": 1.0, "beta": 2.0},
    {"beta": -1.0, "gamma": 0.5},
    {"alpha": -2.0, "delta": 1.0, "gamma": 3},
    {"epsilon": 1.5},
] * 6
LABELS = [True, False, True, False, False, True] * 4


def batch_reference(rows: list[dict[str, Any]], labels: list[bool]) -> Perceptron:
    model = Perceptron(encoder=HashingEncoder(6), max_voters=4)
    batch = model.encoder.encode_sparse_batch(rows)  # type: ignore[attr-defined]
    model.learn_batch(batch, model.encode_labels(labels))
    return model


def test_predict_then_learn_equals_learn_batch() -> None:
    model = Perceptron(encoder=HashingEncoder(6), max_voters=4)
    for row, label in zip(EVENTS, LABELS, strict=True):
        model.predict_one(row)
        model.learn_one(row, label)
    reference = batch_reference(EVENTS, LABELS)
    assert dump_state(model) == dump_state(reference)
    control = batch_reference(EVENTS[1:], LABELS[1:])
    assert dump_state(model) != dump_state(control)  # the comparison sees a different stream


def test_a_dict_changed_between_predict_and_learn_is_learned_as_it_is_then() -> None:
    model = Perceptron(encoder=HashingEncoder(6), max_voters=4)
    learned = []
    for row, label in zip(EVENTS, LABELS, strict=True):
        event = dict(row)
        model.predict_one(event)
        event["alpha"] = event.get("alpha", 0.0) + 1.0  # the same dict, new content
        learned.append(dict(event))
        model.learn_one(event, label)
    assert dump_state(model) == dump_state(batch_reference(learned, LABELS))


def test_a_refused_event_between_predict_and_learn_leaves_no_stale_row() -> None:
    model = Perceptron(encoder=HashingEncoder(6), max_voters=4)
    for row, label in zip(EVENTS, LABELS, strict=True):
        model.predict_one(row)
        with pytest.raises(FeatureError, match="too_large"):
            model.predict_one({**row, "zeta": 1e300})  # written into the buffers, then refused
        model.learn_one(row, label)
    assert dump_state(model) == dump_state(batch_reference(EVENTS, LABELS))


@pytest.mark.parametrize("predictor", ["last", "averaged", "voted"])
def test_predict_one_equals_predict_batch(predictor: Any) -> None:
    model = Perceptron(encoder=HashingEncoder(6), predictor=predictor, max_voters=4)
    for row, label in zip(EVENTS, LABELS, strict=True):
        batch = model.encoder.encode_sparse_batch([row])  # type: ignore[attr-defined]
        assert model.predict_one(row) == model.predict_batch(batch)[0][0]
        model.learn_one(row, label)
    assert model.n_updates > 1 and model.n_voters > 0  # control: the predictors differ from zero


def test_dense_learn_one_equals_learn_batch_as_the_vocabulary_grows() -> None:
    one = Perceptron(encoder=VocabularyEncoder(), max_voters=4)
    for row, label in zip(EVENTS, LABELS, strict=True):
        one.predict_one(row)
        one.learn_one(row, label)
    batch = Perceptron(encoder=VocabularyEncoder(), max_voters=4)
    X = batch.encoder.encode_batch(EVENTS, grow=True)
    batch.learn_batch(X, batch.encode_labels(LABELS))
    assert np.array_equal(one.weights, batch.weights)
    assert one.prequential_mistakes == batch.prequential_mistakes
    assert dump_state(one) == dump_state(batch)


def test_whole_vocabulary_events_run_as_dense_rows_with_the_same_results() -> None:
    rng = np.random.default_rng(4)
    names = ["a", "b", "c", "d", "e"]
    rows = [dict(zip(names, values, strict=True)) for values in rng.normal(size=(40, 5)).tolist()]
    labels = (rng.random(40) < 0.5).tolist()
    one = Perceptron(encoder=VocabularyEncoder(), max_voters=4)
    batch = Perceptron(encoder=VocabularyEncoder(), max_voters=4)
    X = batch.encoder.encode_batch(rows, grow=True)
    for i, (row, label) in enumerate(zip(rows, labels, strict=True)):
        if i > 0:  # the vocabulary is complete from the second event on
            assert _one.sparse_row(one, row, grow=False)[3]  # a complete row: run dense
        assert one.predict_one(row) == batch.predict_batch(X[i : i + 1])[0][0]
        one.learn_one(row, label)
        batch.learn_batch(X[i : i + 1], batch.encode_labels([label]))
    assert not _one.sparse_row(one, {"b": 1.0}, grow=False)[3]  # control: a partial row is not
    assert one.n_updates > 3
    assert dump_state(one) == dump_state(batch)


def test_a_whole_vocabulary_dict_changed_between_predict_and_learn_is_learned_as_it_is() -> None:
    rng = np.random.default_rng(5)
    names = ["a", "b", "c"]
    rows = [dict(zip(names, values, strict=True)) for values in rng.normal(size=(30, 3)).tolist()]
    labels = (rng.random(30) < 0.5).tolist()
    one = Perceptron(encoder=VocabularyEncoder(), max_voters=4)
    learned = []
    for row, label in zip(rows, labels, strict=True):
        event = dict(row)
        one.predict_one(event)
        event["b"] = -event["b"]  # the same dict, new content (still the whole vocabulary)
        learned.append(dict(event))
        one.learn_one(event, label)
    batch = Perceptron(encoder=VocabularyEncoder(), max_voters=4)
    batch.learn_batch(batch.encoder.encode_batch(learned, grow=True), batch.encode_labels(labels))
    assert dump_state(one) == dump_state(batch)
    control = Perceptron(encoder=VocabularyEncoder(), max_voters=4)
    control.learn_batch(control.encoder.encode_batch(rows, grow=True), batch.encode_labels(labels))
    assert dump_state(one) != dump_state(control)  # the comparison sees the change


def test_a_state_with_strided_arrays_still_learns_and_predicts_exactly() -> None:
    rng = np.random.default_rng(6)
    rows = [{"a": a, "b": b} for a, b in rng.normal(size=(40, 2)).tolist()]
    labels = (rng.random(40) < 0.5).tolist()
    plain = Perceptron(encoder=VocabularyEncoder(), max_voters=4)
    strided = Perceptron(encoder=VocabularyEncoder(), max_voters=4)
    for model in (plain, strided):
        model.learn_one(rows[0], labels[0])
    state = strided._state
    for name in ("weights", "weight_sums"):
        array = getattr(state, name)
        wide = np.zeros((array.shape[0], 2 * array.shape[1]))
        wide[:, ::2] = array
        setattr(state, name, wide[:, ::2])  # the same values, every other float of a buffer
    assert state.irregular == {"weights", "weight_sums"}  # control: the guard sees them
    for row, label in zip(rows[1:], labels[1:], strict=True):
        assert strided.predict_one(row) == plain.predict_one(row)
        assert strided.learn_one(row, label) == plain.learn_one(row, label)
    assert np.array_equal(strided.weights, plain.weights)
    assert plain.n_updates > 10
    state.weights = np.ascontiguousarray(state.weights)
    assert state.irregular == {"weight_sums"}  # a regular array leaves the set


@pytest.mark.parametrize("prequential_voted", [False, True])
@pytest.mark.parametrize("max_voter_bytes", [4 * 2**20, 64])
def test_learn_one_equals_learn_batch_at_the_voter_bounds(
    prequential_voted: bool, max_voter_bytes: int
) -> None:
    def learner() -> Perceptron:
        return Perceptron(
            encoder=HashingEncoder(6),
            max_voters=3,
            max_voter_bytes=max_voter_bytes,
            prequential_voted=prequential_voted,
        )

    one = learner()
    for row, label in zip(EVENTS, LABELS, strict=True):
        one.predict_one(row)
        one.learn_one(row, label)
    batch = learner()
    batch.learn_batch(batch.encoder.encode_sparse_batch(EVENTS), batch.encode_labels(LABELS))  # type: ignore[attr-defined]
    assert one.dropped_voters > 0  # control: the bounds were reached
    assert dump_state(one) == dump_state(batch)
