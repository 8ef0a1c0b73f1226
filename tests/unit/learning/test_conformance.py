"""One conformance suite over every learner variant and encoder."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from learning import (
    AveragedPerceptron,
    DenseEncoder,
    HashingEncoder,
    LabelMap,
    MulticlassPerceptron,
    Perceptron,
    SchemaEncoder,
    VocabularyEncoder,
    VotedPerceptron,
    dump_state,
    load_state,
)
from learning._base import LinearLearner

NAMES = ["a", "b", "c", "d"]
LATE_NAMES = ["late_1", "late_2"]


@dataclass(frozen=True)
class Variant:
    name: str
    build: Callable[[], LinearLearner]
    dict_input: bool
    emerging: bool
    multiclass: bool


def encoders() -> dict[str, Callable[[], Any]]:
    return {
        "dense": lambda: DenseEncoder(len(NAMES)),
        "schema": lambda: SchemaEncoder(NAMES + LATE_NAMES),
        "vocabulary": VocabularyEncoder,
        "hashing": lambda: HashingEncoder(n_bits=6),
    }


def variants() -> list[Variant]:
    found = []
    labels = LabelMap({"pos": 1, "neg": -1})
    for encoder_name, encoder in encoders().items():
        dict_input = encoder_name != "dense"
        for cls in (Perceptron, AveragedPerceptron, VotedPerceptron):
            for voted in (False, True):
                found.append(
                    Variant(
                        f"{cls.__name__}-{encoder_name}-voted{voted}",
                        lambda cls=cls, encoder=encoder, voted=voted: cls(
                            labels, encoder=encoder(), prequential_voted=voted, max_voters=4
                        ),
                        dict_input,
                        dict_input,
                        False,
                    )
                )
        for declared in (False, True):
            for predictor in ("last", "averaged", "voted"):
                found.append(
                    Variant(
                        f"Multiclass-{encoder_name}-declared{declared}-{predictor}",
                        lambda encoder=encoder, declared=declared, predictor=predictor: (
                            MulticlassPerceptron(
                                ["r", "g", "b"] if declared else None,
                                encoder=encoder(),
                                predictor=predictor,
                                prequential_voted=True,
                                max_voters=4,
                            )
                        ),
                        dict_input,
                        dict_input,
                        True,
                    )
                )
    return found


VARIANTS = variants()


def events(variant: Variant, n: int, seed: int, late: bool = False) -> list[tuple[Any, str]]:
    rng = np.random.default_rng(seed)
    out: list[tuple[Any, str]] = []
    for _ in range(n):
        values = rng.normal(size=len(NAMES))
        label_index = int(values[0] > 0) + int(values[1] > 0.5) if variant.multiclass else 0
        label = (
            ["r", "g", "b"][label_index]
            if variant.multiclass
            else ("pos" if values[0] + values[2] > 0 else "neg")
        )
        if not variant.dict_input:
            out.append((values.tolist(), label))
            continue
        present = [name for name in NAMES if rng.random() < 0.7] or ["a"]
        features = {name: float(values[NAMES.index(name)]) for name in present}
        if late:
            features[LATE_NAMES[int(rng.integers(0, 2))]] = float(rng.normal())
        out.append((features, label))
    return out


@pytest.fixture(params=VARIANTS, ids=[v.name for v in VARIANTS])
def variant(request: pytest.FixtureRequest) -> Variant:
    return request.param  # type: ignore[no-any-return]


def test_predicting_changes_neither_its_input_nor_the_model(variant: Variant) -> None:
    model = variant.build()
    stream = events(variant, 40, 1)
    for x, label in stream[:30]:
        model.learn_one(x, label)
    state = dump_state(model)
    for x, _ in stream[30:]:
        original = copy.deepcopy(x)
        model.predict_one(x)
        assert x == original
        snapshot = model.snapshot()
        vector = model.encoder.encode(x)
        snapshot.predict_batch(vector[None, :])
        assert dump_state(model) == state


def test_predict_one_before_any_learning(variant: Variant) -> None:
    model = variant.build()
    x, _ = events(variant, 1, 2)[0]
    prediction = model.predict_one(x)
    if variant.multiclass:
        assert prediction in (None, "r", "g", "b")
    else:
        assert prediction == "pos"  # sign(0) = +1


def test_state_round_trips(variant: Variant) -> None:
    model = variant.build()
    stream = events(variant, 50, 3)
    for x, label in stream[:40]:
        model.learn_one(x, label)
    loaded, _, _ = load_state(dump_state(model))
    assert type(loaded) is type(model)
    assert dump_state(loaded) == dump_state(model)
    for x, label in stream[40:]:
        assert loaded.predict_one(x) == model.predict_one(x)
        assert loaded.learn_one(x, label) == model.learn_one(x, label)
    assert dump_state(loaded) == dump_state(model)


def test_mistake_counts_never_decrease(variant: Variant) -> None:
    model = variant.build()
    previous_updates = 0
    previous_prequential = dict.fromkeys(model.prequential_mistakes, 0)
    for seen, (x, label) in enumerate(events(variant, 60, 4), start=1):
        updated = model.learn_one(x, label)
        assert model.n_seen == seen
        assert model.n_updates == previous_updates + int(updated)
        prequential = model.prequential_mistakes
        assert all(prequential[k] >= previous_prequential[k] for k in prequential)
        previous_updates, previous_prequential = model.n_updates, prequential
    assert model.n_updates > 0


def test_emerging_and_vanishing_features_are_handled(variant: Variant) -> None:
    model = variant.build()
    early = events(variant, 30, 5)
    for x, label in early:
        model.learn_one(x, label)
    if not variant.emerging:
        with pytest.raises(ValueError):
            model.learn_one([1.0, 2.0], early[0][1])  # a dense event of the wrong length
        return
    dimension = model.dimension
    late = events(variant, 30, 6, late=True)
    predicted = [model.predict_one(x) for x, _ in late[:5]]  # unseen names: no error
    assert dump_state(model) == dump_state(load_state(dump_state(model))[0])
    for x, label in late:
        model.learn_one(x, label)
    assert all(p is not None for p in predicted) or variant.multiclass
    if isinstance(model.encoder, VocabularyEncoder):
        assert model.dimension == dimension + len(LATE_NAMES)
        assert set(LATE_NAMES) <= set(model.encoder.vocabulary)
    for x, label in early[:10]:  # the late names vanish again
        model.learn_one(x, label)
        model.predict_one(x)


def test_learn_batch_matches_learn_one(variant: Variant) -> None:
    one, batch = variant.build(), variant.build()
    stream = events(variant, 40, 7, late=variant.emerging)
    for x, label in stream:
        one.learn_one(x, label)
    X = batch.encoder.encode_batch([x for x, _ in stream], grow=True)
    y = batch.encode_labels([label for _, label in stream], grow=True)
    batch.learn_batch(X, y)
    assert dump_state(batch) == dump_state(one)
