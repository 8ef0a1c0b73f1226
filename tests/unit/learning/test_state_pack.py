"""The one-event kernels' state pack always holds the learner's current arrays, and copies and
pickles of a learner never share a state pack or an event pack."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from learning import HashingEncoder, Perceptron, VocabularyEncoder, dump_state
from learning._one import SINGLE_EVENT_KEY
from learning._state_pack import PACK_KEY, state_pack

rng = np.random.default_rng(11)
ROWS = [
    {
        f"w{int(j)}": float(v)
        for j, v in zip(rng.integers(0, 40, 5), rng.normal(size=5), strict=True)
    }
    for _ in range(60)
]
LABELS = (rng.random(60) < 0.5).tolist()


def learned(model: Perceptron, rows: list[dict[str, float]], labels: list[bool]) -> Perceptron:
    for row, label in zip(rows, labels, strict=True):
        model.predict_one(row)
        model.learn_one(row, label)
    return model


def pickled(model: Perceptron) -> Perceptron:
    twin: Perceptron = pickle.loads(pickle.dumps(model))
    return twin


def fresh() -> Perceptron:
    return Perceptron(encoder=HashingEncoder(5), max_voters=4)


def test_replacing_an_array_drops_the_pack() -> None:
    model = learned(fresh(), ROWS[:5], LABELS[:5])
    state = model._state
    assert PACK_KEY in state.__dict__  # control: learn_one made one
    state.ensure_shape(1, state.dimension + 3)
    assert PACK_KEY not in state.__dict__
    assert state_pack(state) is state.__dict__[PACK_KEY]


def test_a_growing_vocabulary_learns_into_the_new_arrays() -> None:
    one = learned(Perceptron(encoder=VocabularyEncoder(), max_voters=4), ROWS, LABELS)
    batch = Perceptron(encoder=VocabularyEncoder(), max_voters=4)
    batch.learn_batch(batch.encoder.encode_batch(ROWS, grow=True), batch.encode_labels(LABELS))
    assert one.dimension > 10 and one.n_updates > 5
    assert dump_state(one) == dump_state(batch)


def test_copies_and_pickles_learn_on_their_own_arrays() -> None:
    reference = learned(fresh(), ROWS, LABELS)
    duplicates: list[Callable[[Perceptron], Perceptron]] = [copy.deepcopy, pickled]
    for duplicate in duplicates:
        model = learned(fresh(), ROWS[:30], LABELS[:30])
        twin = duplicate(model)
        learned(twin, ROWS[:30], [not label for label in LABELS[:30]])  # must not touch model
        learned(model, ROWS[30:], LABELS[30:])
        assert dump_state(model) == dump_state(reference)


def test_a_shared_pack_would_be_seen() -> None:
    # Control of the test above: a copy that kept the original's pack writes into its arrays.
    reference = learned(fresh(), ROWS, LABELS)
    model = learned(fresh(), ROWS[:30], LABELS[:30])
    twin = learned(copy.deepcopy(model), ROWS[:1], LABELS[:1])
    twin._state.__dict__[PACK_KEY] = model._state.__dict__[PACK_KEY]
    learned(twin, ROWS[:30], [not label for label in LABELS[:30]])
    learned(model, ROWS[30:], LABELS[30:])
    assert dump_state(model) != dump_state(reference)


def twin_predicted_between(
    model: Perceptron, duplicate: Callable[[Perceptron], Perceptron]
) -> Perceptron:
    """``model`` predicts ROWS[0], a duplicate of it predicts ROWS[1], then ``model`` learns
    ROWS[0] against its prediction (an update, which reads the row in its buffers)."""
    label = not model.predict_one(ROWS[0])
    duplicate(model).predict_one(ROWS[1])
    assert model.learn_one(ROWS[0], label)
    return model


def event_buffers(model: Perceptron) -> list[Any]:
    """The single-event buffers a learner's kernels write, each as an array."""
    single = model.__dict__[SINGLE_EVENT_KEY]
    byte_buffers = (single.raw, single.names, single.ends, single.row)
    return [
        single.columns,
        single.values,
        *(np.frombuffer(b, dtype=np.uint8) for b in byte_buffers),
    ]


def shares_buffers(model: Perceptron, twin: Perceptron) -> bool:
    pairs = zip(event_buffers(model), event_buffers(twin), strict=True)
    same_pack = model.__dict__[SINGLE_EVENT_KEY].pack is twin.__dict__[SINGLE_EVENT_KEY].pack
    return same_pack or any(np.shares_memory(mine, its) for mine, its in pairs)


@pytest.mark.parametrize("duplicate", [copy.deepcopy, pickled])
def test_a_copy_writes_its_own_event_buffers(duplicate: Callable[[Perceptron], Perceptron]) -> None:
    reference = learned(fresh(), ROWS[:30], LABELS[:30])
    reference.learn_one(dict(ROWS[0]), not reference.predict_one(dict(ROWS[0])))
    model = twin_predicted_between(learned(fresh(), ROWS[:30], LABELS[:30]), duplicate)
    assert dump_state(model) == dump_state(reference)
    twin = duplicate(model)
    twin.predict_one(ROWS[1])
    assert not shares_buffers(model, twin)
    shared = copy.copy(model)  # control: a shallow copy keeps the original's buffers
    shared.predict_one(ROWS[1])
    assert shares_buffers(model, shared)
