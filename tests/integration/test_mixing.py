"""Mixing mode on Apache Kafka: one model learned by 1, 2 or 3 instances on 4 partitions (IPM).

* Whatever the number of instances, every instance serves bit-identical mixed models, equal to
  the offline IPM of the same stream (``round_seconds = 0``); the ledger balances (produced =
  learned + dead-lettered) and every dead letter is there exactly once ``read_committed``.
  Controls: the offline IPM with another R, and one sequential perceptron over the same events,
  give other weights (the comparison can fail); a dead letter removed from what was read makes
  the ledger check fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from service.settings import load_settings
from service.topics import ensure_topics
from tests.support.faults import ConfiguredStream, FaultyService
from tests.support.ledger import Ledger, publish, read_dead_letters
from tests.support.mixing import (
    PARTITIONS,
    instances,
    mixed_round,
    mixing_env,
    offline_mix,
    planned_stream,
    served_last,
)

pytestmark = pytest.mark.integration

COMMITTED = "read_committed"
ROUND_EVENTS = 150
ROUNDS = 4
POISON_PER_PARTITION = 6
MIXED_TIMEOUT_S = 180.0
POLL_S = 0.1


def wait_all_mixed(services: list[FaultyService], rounds: int) -> None:
    for service in services:
        service.wait_for(
            f"mixed round {rounds}", lambda s: mixed_round(s) >= rounds, MIXED_TIMEOUT_S, POLL_S
        )


def test_one_two_and_three_instances_serve_the_same_mixed_models(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    stream = ConfiguredStream(dim=4, seed=23, noise=0.1)
    kafka = load_settings(kafka={"bootstrap_servers": kafka_bootstrap}).kafka
    ensure_topics(kafka, [topic_name], partitions=PARTITIONS)
    planned = planned_stream(stream, ROUNDS, ROUND_EVENTS, POISON_PER_PARTITION, seed=3)
    ledger = Ledger(topic_name, publish(kafka_bootstrap, topic_name, planned))
    expected = offline_mix(stream, ledger.records, ROUND_EVENTS)
    assert len(expected) == ROUNDS
    served: dict[int, list[list[float]]] = {}
    for count in (1, 2, 3):
        dlq = f"{topic_name}.dlq.{count}"
        ensure_topics(kafka, [dlq])
        group = f"{topic_name}-mix{count}"
        env = mixing_env(ROUND_EVENTS, dlq)
        services = instances(
            tmp_path, count, bootstrap=kafka_bootstrap, topic=topic_name, stream=stream,
            group=group, env=env,
        )  # fmt: skip
        try:
            for service in services:
                service.start()
            wait_all_mixed(services, ROUNDS)
            served[count] = [served_last(service) for service in services]
            stats = services[0].stats()
            assert mixed_round(stats) == ROUNDS
            assert stats["model_version"] == ROUNDS
            letters = read_dead_letters(
                kafka_bootstrap, dlq, len(ledger.poison), isolation_level=COMMITTED
            )
            report = ledger.check(stats, letters)
            assert report.problems == [], report.summary()
            assert report.duplicate_dead_letters == 0, report.summary()
            assert report.learned + report.dead_lettered == report.produced
            # Control: one dead letter fewer and the same check fails.
            assert ledger.check(stats, letters[1:]).problems != []
        finally:
            for service in services:
                service.stop()
    want = expected[-1].ravel().tolist()
    for count, models in served.items():
        for model in models:
            assert model == want, f"{count} instance(s) served {model}, offline IPM gives {want}"
    # Controls: the comparison tells other models apart.
    other_r = offline_mix(stream, ledger.records, ROUND_EVENTS // 2)[2 * ROUNDS - 1]
    assert other_r.ravel().tolist() != want
    assert expected[-2].ravel().tolist() != want
