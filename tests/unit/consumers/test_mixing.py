"""Mixing mode's pure parts: contribution records, a shard's round cut, the deterministic ledger."""

from __future__ import annotations

import itertools
import math

import numpy as np
import orjson
import pytest

from consumers.decoding.events import EventDecoder, Record
from consumers.engine import _labels_of
from consumers.mixing.contribution import Contribution, ContributionError
from consumers.mixing.ledger import MixLedger
from consumers.mixing.serving import mixed_learner
from consumers.mixing.shard import PartitionRound
from learning import BoundTracker, DenseEncoder, LabelMap, Perceptron, Reference
from learning.mixing import DistributedBound, mix_uniform
from learning.seeding import learner_weights, seed_learner

LABELS = LabelMap({"1": 1, "-1": -1})
GRID = [0.5, 1.0]
TOPIC = "events"


def learner() -> Perceptron:
    return Perceptron(LABELS, encoder=DenseEncoder(2))


def tracker() -> BoundTracker:
    return BoundTracker([Reference("u", [0.0, 1.0, 0.0])], gamma_grid=GRID)


def decoder() -> EventDecoder:
    model = learner()
    return EventDecoder(model.encoder, _labels_of(model))


def record(partition: int, offset: int, x: list[float] | None, label: int = 1) -> Record:
    if x is None:
        return Record(TOPIC, partition, offset, b"not json")
    return Record(TOPIC, partition, offset, orjson.dumps({"features": x, "label": label}))


def stream(partition: int, n: int, seed: int, poison_every: int = 0) -> list[Record]:
    rng = np.random.default_rng(seed)
    out = []
    for offset in range(n):
        if poison_every and offset % poison_every == poison_every - 1:
            out.append(record(partition, offset, None))
            continue
        x = rng.standard_normal(2).round(3).tolist()
        out.append(record(partition, offset, x, 1 if x[0] + 0.1 * x[1] > 0 else -1))
    return out


def shard_round(
    partition: int, round_: int, start: np.ndarray, r: int, offset: int = 0
) -> PartitionRound:
    return PartitionRound(
        "g", partition, round_, offset, start,
        round_events=r, learner_factory=learner, tracker_template=tracker(), decoder=decoder(),
    )  # fmt: skip


def test_a_round_ends_right_after_its_r_th_valid_event() -> None:
    records = stream(0, 40, seed=1, poison_every=4)  # offsets 3, 7, 11... are poison
    shard = shard_round(0, 1, np.zeros((1, 3)), r=10)
    taken = shard.feed(records)
    # 10 valid events need offsets 0..12 (three poison records among them).
    assert (taken, shard.learned, len(shard.rejections), shard.next_offset) == (13, 10, 3, 13)
    assert shard.full
    contribution = shard.contribution()
    assert (contribution.start_offset, contribution.end_offset) == (0, 13)
    assert contribution.dead_lettered == {"not_json": 3}
    # Control: one event fewer per round and the cut moves.
    other = shard_round(0, 1, np.zeros((1, 3)), r=9)
    assert other.feed(records) == 11


def test_a_round_fed_in_pieces_learns_what_it_learns_in_one_piece() -> None:
    records = stream(0, 60, seed=2, poison_every=5)
    start = np.array([[0.25, -0.5, 1.0]])
    whole = shard_round(0, 1, start, r=30)
    whole.feed(records)
    pieces = shard_round(0, 1, start, r=30)
    for i in range(0, 60, 7):
        chunk = records[i : i + 7]
        pieces.feed([r for r in chunk if r.offset >= pieces.next_offset])
    a, b = whole.contribution(), pieces.contribution()
    assert a.weights.tolist() == b.weights.tolist()
    assert (a.end_offset, a.mistakes) == (b.end_offset, b.mistakes)
    # Control: another starting point gives other weights.
    moved = shard_round(0, 1, start + 1.0, r=30)
    moved.feed(records)
    assert moved.contribution().weights.tolist() != a.weights.tolist()


def test_a_contribution_reads_back_bit_identical() -> None:
    shard = shard_round(2, 3, np.array([[0.1, 1 / 3, -2 / 7]]), r=5, offset=100)
    shard.feed([Record(TOPIC, 2, 100 + r.offset, r.value) for r in stream(2, 10, seed=3)])
    original = shard.contribution(time_cut=True)
    back = Contribution.decode(original.encode())
    assert back.weights.tobytes() == original.weights.tobytes()
    assert back.averaged.tobytes() == original.averaged.tobytes()
    assert back.bound.histograms.tolist() == original.bound.histograms.tolist()
    assert (back.partition, back.round, back.start_offset, back.end_offset, back.time_cut) == (
        2, 3, 100, original.end_offset, True,
    )  # fmt: skip
    empty = shard_round(0, 1, np.zeros((1, 3)), r=5).contribution()
    assert math.isinf(Contribution.decode(empty.encode()).bound.min_margins[0])
    # Control: a record that is not a contribution is refused.
    with pytest.raises(ContributionError):
        Contribution.decode(b'{"format": 1}')


def contributions(rounds: int, partitions: int, r: int) -> list[Contribution]:
    """What `partitions` shards contribute over `rounds` rounds of IPM."""
    streams = [stream(p, rounds * r, seed=10 + p) for p in range(partitions)]
    weights = np.zeros((1, 3))
    out = []
    for round_ in range(1, rounds + 1):
        made = []
        for p in range(partitions):
            shard = shard_round(p, round_, weights, r=r, offset=(round_ - 1) * r)
            shard.feed(streams[p][(round_ - 1) * r :])
            made.append(shard.contribution())
        weights = mix_uniform([c.weights for c in made])
        out.extend(made)
    return out


def ledger(partitions: int) -> MixLedger:
    return MixLedger(partitions, np.zeros((1, 3)), DistributedBound(["u"], partitions, GRID))


def test_the_mix_does_not_depend_on_the_arrival_order() -> None:
    made = contributions(rounds=3, partitions=3, r=8)
    first = ledger(3)
    for c in made:
        first.add(c)
    assert first.current.round == 3
    for order in itertools.islice(itertools.permutations(range(3)), 6):
        other = ledger(3)
        # Rounds arrive in order per partition, partitions in any interleaving.
        for round_ in range(3):
            for p in order:
                other.add(made[round_ * 3 + p])
        assert other.current.weights.tobytes() == first.current.weights.tobytes()
        assert other.current.averaged.tobytes() == first.current.averaged.tobytes()
    # Control: leaving out one shard's last round leaves round 3 unmixed.
    short = ledger(3)
    for c in made[:-1]:
        short.add(c)
    assert short.current.round == 2


def test_a_repeated_contribution_is_counted_once() -> None:
    made = contributions(rounds=2, partitions=2, r=5)
    once, twice = ledger(2), ledger(2)
    for c in made:
        once.add(c)
        twice.add(c)
        twice.add(c)
    assert twice.current.learned == once.current.learned == 20
    assert twice.bound.status()[0].total_mistakes == once.bound.status()[0].total_mistakes


def test_the_served_learner_holds_the_mix_and_its_average() -> None:
    made = contributions(rounds=2, partitions=2, r=6)
    book = ledger(2)
    for c in made:
        book.add(c)
    mixed = book.current
    served = mixed_learner(learner(), mixed)
    assert isinstance(served, Perceptron)
    assert served.weights.tolist() == mixed.weights[0].tolist()
    assert np.allclose(served.averaged_weights, mixed.averaged[0])
    assert (served.n_seen, served.n_updates) == (24, mixed.mistakes)
    # Control: the average is not the last weights.
    assert served.averaged_weights.tolist() != served.weights.tolist()


def test_seeding_refuses_a_learner_that_has_learned() -> None:
    model = learner()
    model.learn_one([1.0, 0.0], "1")
    with pytest.raises(ValueError, match="learned nothing"):
        seed_learner(model, np.zeros((1, 3)))
    fresh = seed_learner(learner(), np.array([[1.0, 2.0, 3.0]]))
    assert learner_weights(fresh).tolist() == [[1.0, 2.0, 3.0]]
