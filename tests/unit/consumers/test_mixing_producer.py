"""A shard's producer learns the contributions topic's partitions when it is made (activation),
so a round's commit does not wait for that metadata; if it cannot, the producer is closed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from kafka.errors import KafkaTimeoutError

from consumers.engine import Engine
from consumers.mixing.options import MixingOptions
from consumers.mixing.runner import MixingRunner
from learning import BoundTracker
from learning.mixing import DistributedBound
from tests.unit.consumers.test_mixing import learner
from tests.unit.consumers.test_runner import settings

CONTRIBUTIONS = "t.mix"


class MetadataSpy:
    """A producer stand-in recording metadata look-ups and closes."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.looked_up: list[str] = []
        self.closed = False

    def partitions_for(self, topic: str) -> set[int]:
        self.looked_up.append(topic)
        if self.error is not None:
            raise self.error
        return {0}

    def close(self, timeout: float | None = None) -> None:
        self.closed = True


def runner(made: list[MetadataSpy], error: Exception | None = None) -> MixingRunner:
    def build(config: Mapping[str, Any]) -> MetadataSpy:
        made.append(MetadataSpy(error))
        return made[-1]

    return MixingRunner(
        Engine(learner(), BoundTracker()),
        settings(),
        MixingOptions(round_events=10, round_seconds=0.0, contributions_topic=CONTRIBUTIONS),
        learner,
        lambda partitions: DistributedBound([], partitions),
        producer_builder=build,
    )


def test_a_shard_producer_knows_the_contributions_topic_before_its_first_round() -> None:
    made: list[MetadataSpy] = []
    producer = runner(made)._shard_producer({"transactional_id": "x"})
    assert producer is made[0]
    assert (made[0].looked_up, made[0].closed) == ([CONTRIBUTIONS], False)


def test_a_shard_producer_that_cannot_learn_the_metadata_is_closed() -> None:
    made: list[MetadataSpy] = []
    with pytest.raises(KafkaTimeoutError):
        runner(made, KafkaTimeoutError("no metadata"))._shard_producer({})
    assert made[0].closed
    # Control: the same producer without the error stays open.
    assert not runner([])._shard_producer({}).closed
