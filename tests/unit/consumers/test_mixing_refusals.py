"""Refused contributions are counted by reason, and while they keep the mix from advancing,
the runner is not ready and says why and what to do.

The follower's record handling (``_take``) is driven directly, so these hold whichever Kafka
client delivers the records. Controls: once the mix advances the runner is ready again; another
group's refused record and a learner with no shard waiting for the mix leave it ready.
"""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from prometheus_client import CollectorRegistry

from consumers.mixing.contribution import REFUSAL_REASONS, Contribution
from consumers.mixing.ledger import MixLedger
from consumers.mixing.options import MixingOptions
from consumers.mixing.runner import MixingRunner
from learning.mixing import DistributedBound
from service.observability.metrics import Metrics
from tests.unit.consumers.test_mixing import GRID, contributions, learner
from tests.unit.consumers.test_runner import new_engine, settings

GROUP = "g"
"""The group of ``tests.unit.consumers.test_runner.settings`` and of the contributions made."""


class Refusals:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def on_contribution_refused(self, reason: str) -> None:
        self.reasons.append(reason)


def runner(observer: Refusals, *, learns: bool = True, references: int = 1) -> MixingRunner:
    mixing = MixingRunner(
        new_engine(),
        settings(),
        MixingOptions(round_events=8, round_seconds=0.0, contributions_topic="t.mixing"),
        learner,
        lambda partitions: DistributedBound([], partitions),
        learns=learns,
        refusal_observer=observer,
    )
    names = ["u"][:references]
    mixing._ledger = MixLedger(2, np.zeros((1, 3)), DistributedBound(names, 2, GRID))
    mixing._connected = True
    return mixing


def take(mixing: MixingRunner, offset: int, contribution: Contribution | bytes) -> None:
    value = contribution if isinstance(contribution, bytes) else contribution.encode()
    key = b"junk" if isinstance(contribution, bytes) else contribution.key
    assert mixing._ledger is not None
    mixing._take(mixing._ledger, offset, key, value)


def test_a_refused_contribution_blocks_readiness_until_the_mix_advances() -> None:
    observer = Refusals()
    mixing = runner(observer)
    first, second = contributions(rounds=1, partitions=2, r=8)
    take(mixing, 0, first)
    mixing._positions[0] = (1, first.end_offset)  # this instance's shard waits for round 1
    assert mixing.connected
    take(mixing, 1, b'{"format": 1, "group": "g"}')
    assert observer.reasons == ["malformed"]
    assert not mixing.connected
    reason = mixing.not_ready_reason or ""
    assert reason.startswith("the mix cannot advance past round 0: contributions record @1")
    assert "fix: only novikoff instances" in reason
    # Control: the missing contribution arrives, the mix advances, the runner is ready again.
    take(mixing, 2, second)
    assert mixing._ledger is not None and mixing._ledger.current.round == 1
    assert mixing.connected and mixing.not_ready_reason is None


def test_a_refusal_blocks_only_while_the_mix_is_awaited() -> None:
    observer = Refusals()
    learning = runner(observer)
    take(learning, 0, b"not json")
    # No shard of this learner has committed a round the mix lacks: nothing waits.
    assert learning.connected
    # A replica cannot know who waits: a refusal since the last mix blocks it.
    follower = runner(observer, learns=False)
    take(follower, 0, b"not json")
    assert not follower.connected
    assert observer.reasons == ["malformed", "malformed"]


def test_another_groups_refused_record_is_counted_but_does_not_block() -> None:
    observer = Refusals()
    mixing = runner(observer, learns=False)
    (first,) = contributions(rounds=1, partitions=1, r=8)
    other = orjson.loads(first.encode())
    other["format"] = 99
    assert mixing._ledger is not None
    mixing._take(mixing._ledger, 0, b"other:0:1", orjson.dumps(other))
    assert observer.reasons == ["format"]
    assert mixing.connected
    # Control: the same record under this group's key blocks.
    mixing._take(mixing._ledger, 1, b"g:0:1", orjson.dumps(other))
    assert not mixing.connected


def test_contributions_that_do_not_fit_are_refused_by_reason() -> None:
    observer = Refusals()
    (first,) = contributions(rounds=1, partitions=1, r=8)
    # A bound of no reference cannot take a contribution of one.
    take(runner(observer, references=0), 0, first)
    # A partition the events topic (2 partitions) lacks.
    data = orjson.loads(first.encode())
    data["partition"] = 5
    take(runner(observer), 1, orjson.dumps(data))
    assert observer.reasons == ["shape", "partition"]


@pytest.mark.parametrize("reason", REFUSAL_REASONS)
def test_the_refusal_counter_has_every_reason_from_the_start(reason: str) -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    name = "novikoff_mixing_contributions_refused_total"
    assert registry.get_sample_value(name, {"reason": reason}) == 0.0
    metrics.on_contribution_refused(reason)
    assert registry.get_sample_value(name, {"reason": reason}) == 1.0
