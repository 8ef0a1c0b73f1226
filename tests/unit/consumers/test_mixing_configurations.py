"""A contribution round-trips, and mixes, whatever the model and bound configuration.

Every configuration a mixing service can run with: no reference (the default), one, several;
binary and multiclass; dense and hashed. The shard, the record and the ledger are the service's
own, built from settings as the service builds them. Controls: malformed records are refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest

from consumers.decoding.events import EventDecoder, Record
from consumers.engine import _labels_of
from consumers.mixing.contribution import Contribution, ContributionError
from consumers.mixing.ledger import MixLedger
from consumers.mixing.shard import PartitionRound
from learning.mixing import DistributedBound
from learning.seeding import learner_weights
from service.model import build_learner, build_tracker
from service.settings import Settings, load_settings

TOPIC = "events"
CLASSES = ("a", "b", "c")
ROUND_EVENTS = 12
PARTITIONS = 2
HASHED_FEATURES = ("x", "y", "z")


def settings(references: int, variant: str, encoding: str) -> Settings:
    """Mixing's settings: the defaults plus the variant, encoding and ``references`` references."""
    model: dict[str, Any] = {"variant": variant, "encoding": encoding}
    if variant == "multiclass":
        model["classes"] = CLASSES  # mixing a multiclass model needs its classes declared
    width = load_settings(model=model).model.feature_dimension
    assert width is not None
    rows = len(CLASSES) if variant == "multiclass" else 1
    refs = []
    for i in range(references):
        weights = np.zeros((rows, width + 1))
        weights[:, (i % width) + 1] = 1.0
        refs.append(
            {
                "name": f"u{i}",
                "weights": weights.tolist() if variant == "multiclass" else weights[0].tolist(),
            }
        )
    return load_settings(model=model, bound={"references": refs}, mixing={"round_events": 5})


def events(config: Settings, partition: int, seed: int) -> list[Record]:
    rng = np.random.default_rng(seed)
    out = []
    for offset in range(2 * ROUND_EVENTS):
        x = rng.standard_normal(len(HASHED_FEATURES)).round(3).tolist()
        if config.model.variant == "multiclass":
            label: object = CLASSES[int(np.argmax(x))]
        else:
            label = 1 if x[0] - x[1] > 0 else -1
        features: object = (
            dict(zip(HASHED_FEATURES, x, strict=True))
            if config.model.encoding == "hashing"
            else x[: config.model.dim]
        )
        value = orjson.dumps({"features": features, "label": label})
        out.append(Record(TOPIC, partition, offset, value))
    return out


def shard(config: Settings, partition: int, start: np.ndarray) -> PartitionRound:
    model = build_learner(config.model)
    return PartitionRound(
        "g", partition, 1, 0, start,
        round_events=ROUND_EVENTS,
        learner_factory=lambda: build_learner(config.model),
        tracker_template=build_tracker(config, model.encoder.dimension),
        decoder=EventDecoder(model.encoder, _labels_of(model)),
    )  # fmt: skip


def assert_same(back: Contribution, original: Contribution) -> None:
    assert back.weights.shape == original.weights.shape
    assert back.weights.tobytes() == original.weights.tobytes()
    assert back.averaged.tobytes() == original.averaged.tobytes()
    assert back.bound.histograms.shape == original.bound.histograms.shape
    assert back.bound.histograms.tolist() == original.bound.histograms.tolist()
    assert back.bound.min_margins.tolist() == original.bound.min_margins.tolist()
    assert (back.learned, back.mistakes, back.end_offset) == (
        original.learned,
        original.mistakes,
        original.end_offset,
    )


@pytest.mark.parametrize("encoding", ["dense", "hashing"])
@pytest.mark.parametrize("variant", ["binary", "multiclass"])
@pytest.mark.parametrize("references", [0, 1, 3])
def test_a_contribution_round_trips_and_mixes_in_every_configuration(
    references: int, variant: str, encoding: str
) -> None:
    config = settings(references, variant, encoding)
    zero = learner_weights(build_learner(config.model)) * 0.0
    made = []
    for p in range(PARTITIONS):
        round_ = shard(config, p, zero)
        round_.feed(events(config, p, seed=p))
        made.append(round_.contribution())
    # A round cut by time before its first event contributes the weights it started from.
    idle = shard(config, 0, zero).contribution(time_cut=True)
    tracker = build_tracker(config, build_learner(config.model).encoder.dimension)
    for original in [*made, idle]:
        assert original.bound.histograms.shape[0] == references
        assert_same(Contribution.decode(original.encode()), original)
    # The follower's path: decoded records into the ledger, which mixes the round.
    ledger = MixLedger(
        PARTITIONS,
        zero,
        DistributedBound(
            [ref.name for ref in tracker.references],
            PARTITIONS,
            gamma_grid=tracker.gamma_grid,
            multiclass=tracker.multiclass,
        ),
    )
    assert [ledger.add(Contribution.decode(c.encode())) for c in made] == [False, True]
    assert ledger.current.round == 1
    assert ledger.current.learned == PARTITIONS * ROUND_EVENTS
    assert len(ledger.bound_status) == references
    assert np.abs(ledger.current.weights).sum() > 0


def record(**changes: Any) -> bytes:
    """A valid contribution record (no reference) with top-level fields changed."""
    config = settings(0, "binary", "dense")
    round_ = shard(config, 0, learner_weights(build_learner(config.model)) * 0.0)
    round_.feed(events(config, 0, seed=0))
    data = orjson.loads(round_.contribution().encode())
    for key, value in changes.items():
        if value is None:
            del data[key]
        else:
            data[key] = value
    return orjson.dumps(data)


def test_the_unchanged_control_record_is_read() -> None:
    assert Contribution.decode(record()).bound.histograms.shape[0] == 0


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"shapes": {"weights": [1, 4], "averaged": [1, 3], "histograms": [0, 33]}}, "shape"),
        ({"shapes": {"weights": [1, 3, 1], "averaged": [1, 3], "histograms": [0, 33]}}, "two"),
        ({"shapes": {"weights": [0, 3], "averaged": [1, 3], "histograms": [0, 33]}}, "shape"),
        ({"shapes": {"weights": [1, 3], "averaged": [1, 3], "histograms": [1, 33]}}, "shape"),
        ({"shapes": {"weights": [1, 3], "averaged": [1, 3], "histograms": ["x", 1]}}, "not a"),
        ({"shapes": None}, "non-empty matrix"),  # no shapes: `[]` has no width
        ({"weights": [1.0, 2.0, 3.0]}, "shape"),
        ({"format": 2}, "format"),
    ],
)
def test_a_malformed_record_is_refused(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(ContributionError, match=match):
        Contribution.decode(record(**changes))


def test_a_record_without_shapes_is_read_from_its_nested_lists() -> None:
    config = settings(1, "binary", "dense")
    round_ = shard(config, 0, learner_weights(build_learner(config.model)) * 0.0)
    round_.feed(events(config, 0, seed=0))
    original = round_.contribution()
    data = orjson.loads(original.encode())
    del data["shapes"]
    assert_same(Contribution.decode(orjson.dumps(data)), original)
