"""learn_one reuses the row predict_one wrote only for the very event it wrote it for.

Each test changes the event between ``predict_one`` and ``learn_one`` in a way the snapshot's
``==`` alone does not see (an equal value of another type, the same names in another order, a
zero of the other sign) and checks the learner ends exactly as a fresh one that learned the
changed event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np
import pytest

from learning import FeatureError, HashingEncoder, Perceptron, VocabularyEncoder, _one, dump_state
from learning.seeding import seed_learner

Factory = Callable[[], Perceptron]
ENCODERS: dict[str, Factory] = {
    "hashing": lambda: Perceptron(encoder=HashingEncoder(6), max_voters=4),
    "vocabulary": lambda: Perceptron(encoder=VocabularyEncoder(), max_voters=4),
}
WARM_UP = [({"alpha": 1.0, "beta": -2.0, "gamma": 0.5}, True)] * 3
"""Events that make the vocabulary whole (its in-order path keys rows) and the weights non-zero."""


def warmed(factory: Factory) -> Perceptron:
    model = factory()
    for row, label in WARM_UP:
        model.learn_one(dict(row), label)
    return model


def held_and_equal(model: Perceptron, event: dict[str, Any], before: dict[str, Any]) -> bool:
    """Whether the learner keeps the row of an event for reuse (a murmur3 hashing learner by
    the event's walk, any other by a copy of it) and that event as it was, ``before``, compares
    equal to ``event``: the reuse must not rest on ``==``."""
    single = _one.single_event(model)
    kept = single.walked > 0 if single.walker is not None else single.event is not None
    return kept and before == event


@pytest.mark.parametrize("kind", ENCODERS)
def test_a_value_swapped_for_an_equal_boolean_is_refused_as_a_fresh_learner_refuses_it(
    kind: str,
) -> None:
    model = warmed(ENCODERS[kind])
    event = {"alpha": 1.0, "beta": 2.0, "gamma": 0.0}
    model.predict_one(event)
    before = dump_state(model)
    as_predicted = dict(event)
    event["alpha"] = True
    assert held_and_equal(model, event, as_predicted)  # control: == alone takes True for 1.0
    with pytest.raises(FeatureError, match="boolean_feature"):
        model.learn_one(event, False)
    assert dump_state(model) == before
    with pytest.raises(FeatureError, match="boolean_feature"):
        warmed(ENCODERS[kind]).learn_one(event, False)


@pytest.mark.parametrize("kind", ENCODERS)
@pytest.mark.parametrize(("old", "new"), [(2.0, 2), (0.0, -0.0), (-0.0, 0), (3.0, 3.5)])
def test_a_value_changed_in_place_is_learned_as_it_is_then(kind: str, old: Any, new: Any) -> None:
    model = warmed(ENCODERS[kind])
    event = {"alpha": 1.0, "beta": old, "gamma": -1.0}
    label = not model.predict_one(event)
    event["beta"] = new
    assert model.learn_one(event, label)  # control: an update, so the row's values matter
    fresh = warmed(ENCODERS[kind])
    fresh.learn_one(dict(event), label)
    assert dump_state(model) == dump_state(fresh)


def test_the_same_names_in_another_order_are_hashed_in_that_order() -> None:
    # n10, n13 and n20 share bucket 1 with sign + at 1 bit: the order of their sum matters.
    def learner() -> Perceptron:
        return Perceptron(encoder=HashingEncoder(1), max_voters=4)

    event = {"n10": 1e16, "n13": 1.0, "n20": -1e16}
    model = learner()
    model.predict_one(event)
    as_predicted = dict(event)
    event["n13"] = event.pop("n13")  # n10, n20, n13
    assert held_and_equal(model, event, as_predicted)  # control: == ignores the order
    model.learn_one(event, False)
    fresh = learner()
    fresh.learn_one(dict(event), False)
    assert dump_state(model) == dump_state(fresh)
    other = learner()
    other.learn_one({"n10": 1e16, "n13": 1.0, "n20": -1e16}, False)
    assert dump_state(other) != dump_state(fresh)  # control: the two orders learn differently


def test_weights_learned_between_predict_and_learn_are_the_ones_learn_one_uses() -> None:
    def learner() -> Perceptron:
        model = Perceptron(encoder=VocabularyEncoder(), max_voters=4)
        model.learn_one({"a": 1.0}, True)
        return model

    event = {"a": 1.0}
    model = learner()
    against = model.encoder.encode_batch([event] * 3)
    assert model.predict_one(event) is True  # scored right: learn_one alone would not update
    model.learn_batch(against, np.full(3, -1.0))
    assert model.learn_one(event, True)  # the weights now score it wrong: an update
    fresh = learner()
    fresh.learn_batch(against, np.full(3, -1.0))
    fresh.learn_one(dict(event), True)
    assert dump_state(model) == dump_state(fresh)


def test_weights_seeded_between_predict_and_learn_are_the_ones_learn_one_uses() -> None:
    right, wrong = np.array([[1.0, 1.0]]), np.array([[-1.0, -1.0]])
    event = {"a": 1.0}

    def seeded(weights: Any) -> Perceptron:
        encoder = VocabularyEncoder()
        encoder.encode(event, grow=True)
        model = Perceptron(encoder=encoder, max_voters=4)
        return cast(Perceptron, seed_learner(model, weights))

    model = seeded(right)
    assert model.predict_one(event) is True  # scored right with the first weights
    seed_learner(model, wrong)
    assert model.learn_one(event, True)  # the seeded weights score it wrong: an update
    fresh = seeded(wrong)
    fresh.learn_one(dict(event), True)
    assert dump_state(model) == dump_state(fresh)


def test_a_whole_vocabulary_event_reordered_is_learned_as_a_fresh_learner_learns_it() -> None:
    model = warmed(ENCODERS["vocabulary"])
    event = {"alpha": 2.0, "beta": -1.0, "gamma": 0.5}
    label = not model.predict_one(event)
    kept = _one.single_event(model).event
    assert kept is not None and kept[2] is None  # control: the row is kept for any name order
    event["alpha"] = event.pop("alpha")  # beta, gamma, alpha
    assert model.learn_one(event, label)
    fresh = warmed(ENCODERS["vocabulary"])
    fresh.learn_one(dict(event), label)
    assert dump_state(model) == dump_state(fresh)


@pytest.mark.parametrize("kind", ENCODERS)
def test_an_event_predicted_again_after_its_update_is_learned_with_the_new_weights(
    kind: str,
) -> None:
    model = warmed(ENCODERS[kind])
    event = {"alpha": 4.0, "beta": 1.0, "gamma": 0.5}
    first = model.predict_one(event)
    assert model.learn_one(event, not first)  # an update: the weights change
    again = model.predict_one(event)  # the same dict, its row still in the buffers
    assert again != first  # control: the scores of the first prediction no longer hold
    assert not model.learn_one(event, again)  # scored right with the new weights: no update
    fresh = warmed(ENCODERS[kind])
    fresh.learn_one(dict(event), not first)
    fresh.learn_one(dict(event), again)
    assert dump_state(model) == dump_state(fresh)


def test_a_list_of_the_vocabulary_in_order_is_refused_as_a_fresh_learner_refuses_it() -> None:
    model = warmed(ENCODERS["vocabulary"])
    names = list(WARM_UP[0][0])
    assert tuple(names) == model.encoder._in_order  # control: the order check alone takes it
    with pytest.raises(FeatureError, match="wrong_type"):
        model.predict_one(names)
    with pytest.raises(FeatureError, match="wrong_type"):
        model.learn_one(names, True)
    with pytest.raises(FeatureError, match="wrong_type"):
        warmed(ENCODERS["vocabulary"]).learn_one(names, True)


def test_a_vocabulary_grown_past_the_per_event_bound_refuses_an_event_listing_it() -> None:
    def learner() -> Perceptron:
        model = Perceptron(encoder=VocabularyEncoder(max_features_per_event=2), max_voters=4)
        model.learn_one({"a": 1.0, "b": 2.0}, True)
        model.learn_one({"c": 1.0, "d": -1.0}, False)
        return model

    model = learner()
    event = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}
    assert tuple(event) == model.encoder.vocabulary  # control: it lists the whole vocabulary
    with pytest.raises(FeatureError, match="too_many_features"):
        model.predict_one(event)
    with pytest.raises(FeatureError, match="too_many_features"):
        model.learn_one(event, True)
    assert dump_state(model) == dump_state(learner())
