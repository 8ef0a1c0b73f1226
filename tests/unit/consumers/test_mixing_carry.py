"""A round's end is no seek: the next round starts from the records a poll returned past it.

The runner keeps those records (the carry) and only pauses the partition, so kafka-python keeps
its buffered fetch; the next round learns exactly what it learns after a seek to the round's end
(the path every replay takes, and the control: a revocation drops the carry).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from kafka import TopicPartition

from consumers.engine import Engine
from consumers.mixing.contribution import Contribution
from consumers.mixing.ledger import MixLedger
from consumers.mixing.options import MixingOptions
from consumers.mixing.runner import MixingRunner
from learning import BoundTracker
from learning.mixing import DistributedBound
from tests.unit.consumers.test_mixing import learner, stream
from tests.unit.consumers.test_runner import settings

ROUND_EVENTS = 10
POLLED = 15
"""The first poll returns five records past round 1's end."""
TP = TopicPartition("t", 0)


class SeekSpy:
    """The events consumer's calls the runner makes between rounds; seeks are recorded."""

    def __init__(self) -> None:
        self.seeks: list[tuple[Any, int]] = []

    def seek(self, tp: Any, offset: int) -> None:
        self.seeks.append((tp, offset))

    def pause(self, *partitions: Any) -> None:
        pass

    def resume(self, *partitions: Any) -> None:
        pass

    def group_metadata(self) -> None:
        return None


class CommittedRounds:
    """A shard producer whose commits always succeed; it keeps the contributions."""

    def __init__(self) -> None:
        self.rounds: list[Contribution] = []

    def commit_round(self, contribution: Contribution, rejections: Any, **_: Any) -> None:
        self.rounds.append(contribution)

    def abort(self) -> None:
        pass


def two_rounds(*, revoked_between: bool) -> tuple[list[tuple[Any, int]], Contribution]:
    """Rounds 1 and 2 of partition 0 (the only one) fed ``stream(0, 20)``; (seeks, round 2)."""
    runner = MixingRunner(
        Engine(learner(), BoundTracker()),
        settings(),
        MixingOptions(round_events=ROUND_EVENTS, round_seconds=0.0, contributions_topic="t.mix"),
        learner,
        lambda partitions: DistributedBound([], partitions),
    )
    consumer, producer = SeekSpy(), CommittedRounds()
    runner._consumer = consumer
    runner._producers[0] = producer  # type: ignore[assignment]
    ledger = MixLedger(1, np.zeros((1, 3)), DistributedBound([], 1))
    records = stream(0, 2 * ROUND_EVENTS, seed=4)
    runner._positions[0] = (0, 0)
    runner._start_rounds(ledger)
    runner._learn(TP, records[:POLLED])
    (first,) = producer.rounds
    assert first.end_offset == ROUND_EVENTS
    assert ledger.add(first)
    if revoked_between:
        runner._on_revoked([TP])
        runner._positions[0] = (first.round, first.end_offset)  # as activation finds it
        runner._producers[0] = producer  # type: ignore[assignment]
    runner._start_rounds(ledger)
    shard = runner._shards[0]
    runner._learn(TP, records[shard.next_offset :])
    return consumer.seeks, producer.rounds[-1]


def test_the_next_round_starts_from_the_carry_without_a_seek() -> None:
    seeks, second = two_rounds(revoked_between=False)
    assert seeks == [(TP, 0)]
    assert (second.round, second.start_offset, second.end_offset) == (2, 10, 20)
    # Control: a revocation drops the carry; the round starts with a seek to the round's end
    # and learns the same contribution.
    replayed_seeks, replayed = two_rounds(revoked_between=True)
    assert replayed_seeks == [(TP, 0), (TP, ROUND_EVENTS)]
    assert replayed.weights.tolist() == second.weights.tolist()
    assert (replayed.end_offset, replayed.mistakes) == (second.end_offset, second.mistakes)
