"""Mixing mode on Apache Kafka: one model learned by 1, 2 or 3 instances on 4 partitions (IPM).

* Whatever the number of instances, every instance serves bit-identical mixed models, equal to
  the offline IPM of the same stream (``round_seconds = 0``); the ledger balances (produced =
  learned + dead-lettered), every dead letter is there exactly once ``read_committed``, and the
  distributed bound holds on the noisy stream. Controls: the offline IPM with another R, or one
  round fewer, gives other weights; a dead letter left out makes the ledger check fail.
* A SIGKILL of one of two instances mid-round, then its restart (a rebalance mid-round), change
  nothing. Control: the survivor's log shows the killed rounds started again from their starts.
* ``round_seconds``: every cut is recorded in the contributions, an idle partition does not stall
  the others, and replaying the recorded cuts gives the served model. Control: other cuts give
  other weights.
* Separable data: the shards' mistakes stay within P·(R/gamma)^2 and stop. Control: the first round
  has mistakes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from service.settings import load_settings
from service.topics import ensure_topics
from tests.support.faults import ConfiguredStream, FaultyService
from tests.support.ledger import EventPlan, Ledger, PacedPublisher, publish, read_dead_letters
from tests.support.mixing import (
    PARTITIONS,
    instances,
    mixed_round,
    mixing_env,
    offline_mix,
    planned_stream,
    read_contributions,
    replay_cuts,
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
            section = stats["mixing"]
            assert (section["partitions"], section["round_events"]) == (PARTITIONS, ROUND_EVENTS)
            # Every partition has contributed its rounds and is in the next one.
            assert [s["contributed_round"] for s in section["shards"]] == [ROUNDS] * PARTITIONS
            assert [s["round"] for s in section["shards"]] == [ROUNDS + 1] * PARTITIONS
            bound = section["bound"][0]
            assert (bound["name"], bound["rounds"], bound["partitions"]) == ("u", ROUNDS, 4)
            assert bound["total_mistakes"] == stats["mistakes"] > 0
            assert not bound["violated"], bound
            assert bound["total_mistakes"] <= bound["total_bound"]
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


KILL_ROUND_EVENTS = 100
KILL_ROUNDS = 10
KILL_RATE = 2_000.0
KILL_POINT = int(PARTITIONS * KILL_ROUND_EVENTS * 2.5)
"""The publisher pauses here: every partition is half-way through its third round."""


def shards_mid_round(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """The shards an instance is learning a round of, with events learned in it already."""
    return [
        s for s in stats["mixing"]["shards"] if s["state"] == "learning" and s["learned_in_round"]
    ]


def test_a_sigkill_mid_round_changes_nothing_in_the_result(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    stream = ConfiguredStream(dim=4, seed=29, noise=0.1)
    kafka = load_settings(kafka={"bootstrap_servers": kafka_bootstrap}).kafka
    dlq = f"{topic_name}.dlq"
    ensure_topics(kafka, [topic_name], partitions=PARTITIONS)
    ensure_topics(kafka, [dlq])
    planned = planned_stream(stream, KILL_ROUNDS, KILL_ROUND_EVENTS, POISON_PER_PARTITION, seed=4)
    publisher = PacedPublisher(kafka_bootstrap, topic_name, planned, KILL_RATE)
    victim, survivor = instances(
        tmp_path, 2, bootstrap=kafka_bootstrap, topic=topic_name, stream=stream,
        group=f"{topic_name}-mix", env=mixing_env(KILL_ROUND_EVENTS, dlq),
    )  # fmt: skip
    try:
        victim.start()
        survivor.start()
        publisher.allow(KILL_POINT)
        publisher.start()
        # Both own two partitions, each stuck half-way through round 3 (the publisher waits).
        caught = victim.wait_for(
            "mid-round",
            lambda s: mixed_round(s) == 2 and len(shards_mid_round(s)) == 2 and s,
            MIXED_TIMEOUT_S,
            POLL_S,
        )
        lost = {s["partition"]: s["learned_in_round"] for s in shards_mid_round(caught)}
        assert all(0 < n < KILL_ROUND_EVENTS for n in lost.values()), caught["mixing"]
        victim.kill()
        produced = publisher.join()
        # The survivor replays the victim's rounds from their starts, then the victim comes
        # back and takes two partitions again, wherever they are in their rounds.
        survivor.wait_for("taken over", lambda s: mixed_round(s) >= 4, MIXED_TIMEOUT_S, POLL_S)
        victim.start()
        wait_all_mixed([victim, survivor], KILL_ROUNDS)
        ledger = Ledger(topic_name, produced)
        expected = offline_mix(stream, ledger.records, KILL_ROUND_EVENTS)
        assert len(expected) == KILL_ROUNDS
        want = expected[-1].ravel().tolist()
        assert served_last(survivor) == want
        assert served_last(victim) == want
        stats = survivor.stats()
        letters = read_dead_letters(
            kafka_bootstrap, dlq, len(ledger.poison), isolation_level=COMMITTED
        )
        report = ledger.check(stats, letters)
        assert report.problems == [], report.summary()
        assert report.duplicate_dead_letters == 0, report.summary()
        # Control: the kill did interrupt rounds: the survivor took the victim's partitions and
        # started them again at the start of round 3, so the events learned were learned again.
        for partition in lost:
            assert f"partition {partition} active: round 3 next" in survivor.all_logs, partition
    finally:
        publisher.cancel()
        victim.stop()
        survivor.stop()


CUT_SECONDS = 1.0
CUT_ROUND_EVENTS = 1_000
CUT_EVENTS_PER_PARTITION = 300
CUT_ROUNDS = 3


def test_time_cuts_are_recorded_and_an_idle_partition_does_not_stall_the_others(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    stream = ConfiguredStream(dim=4, seed=31, noise=0.1)
    kafka = load_settings(kafka={"bootstrap_servers": kafka_bootstrap}).kafka
    dlq = f"{topic_name}.dlq"
    ensure_topics(kafka, [topic_name], partitions=PARTITIONS)
    ensure_topics(kafka, [dlq])
    # Partition 3 stays empty; the others hold fewer events than one round.
    plan = EventPlan(ConfiguredStream(dim=4, seed=31).synthetic(), partitions=PARTITIONS - 1)
    produced = publish(kafka_bootstrap, topic_name, plan.valid(3 * CUT_EVENTS_PER_PARTITION))
    group = f"{topic_name}-mix"
    env = {**mixing_env(CUT_ROUND_EVENTS, dlq), "NOVIKOFF_MIXING__ROUND_SECONDS": str(CUT_SECONDS)}
    (service,) = instances(
        tmp_path, 1, bootstrap=kafka_bootstrap, topic=topic_name, stream=stream, group=group,
        env=env,
    )  # fmt: skip
    try:
        service.start()
        wait_all_mixed([service], CUT_ROUNDS)
        model = service.get("/model").json()
    finally:
        service.stop()
    cuts = read_contributions(kafka_bootstrap, f"{topic_name}.mixing", group)
    served_round = int(model["model_version"])
    mixed = [c for c in cuts if c.round <= served_round]
    assert len(mixed) == PARTITIONS * served_round
    assert all(c.time_cut for c in mixed)
    idle = [c for c in mixed if c.partition == PARTITIONS - 1]
    assert [(c.learned, c.start_offset, c.end_offset) for c in idle] == [(0, 0, 0)] * served_round
    assert sum(c.learned for c in mixed) == 3 * CUT_EVENTS_PER_PARTITION
    # Replaying the recorded cuts gives the served model.
    replayed = replay_cuts(stream, produced, mixed)
    assert model["weights"]["last"] == replayed[-1].ravel().tolist()
    # Control: other cuts (everything in round 1 of a single shard) give other weights.
    moved = [dataclasses.replace(c, partition=0) if c.round == 1 else c for c in mixed]
    assert replay_cuts(stream, produced, moved)[-1].ravel().tolist() != model["weights"]["last"]


SEPARABLE_ROUND_EVENTS = 300
SEPARABLE_ROUNDS = 6
QUIET_ROUNDS = 3
"""The last rounds, in which the shards must make no mistake any more."""


def test_on_separable_data_the_mistakes_stay_within_novikoff_and_stop(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    stream = ConfiguredStream(dim=4, seed=37, margin=0.1, noise=0.0)
    kafka = load_settings(kafka={"bootstrap_servers": kafka_bootstrap}).kafka
    dlq = f"{topic_name}.dlq"
    ensure_topics(kafka, [topic_name], partitions=PARTITIONS)
    ensure_topics(kafka, [dlq])
    planned = planned_stream(stream, SEPARABLE_ROUNDS, SEPARABLE_ROUND_EVENTS, 0, seed=5)
    publish(kafka_bootstrap, topic_name, planned)
    group = f"{topic_name}-mix"
    (service,) = instances(
        tmp_path, 1, bootstrap=kafka_bootstrap, topic=topic_name, stream=stream, group=group,
        env=mixing_env(SEPARABLE_ROUND_EVENTS, dlq),
    )  # fmt: skip
    try:
        service.start()
        wait_all_mixed([service], SEPARABLE_ROUNDS)
        stats = service.stats()
    finally:
        service.stop()
    bound = stats["mixing"]["bound"][0]
    # Separable: the smallest margin is positive and the bound is P·(R/gamma)^2 (Novikoff's).
    assert bound["min_margin"] > 0 and bound["novikoff"] is not None
    assert bound["total_mistakes"] <= PARTITIONS * bound["novikoff"]
    assert not bound["violated"]
    cuts = read_contributions(kafka_bootstrap, f"{topic_name}.mixing", group)
    by_round: dict[int, int] = {}
    for c in cuts:
        by_round[c.round] = by_round.get(c.round, 0) + c.mistakes
    assert [
        by_round[r] for r in range(SEPARABLE_ROUNDS - QUIET_ROUNDS + 1, SEPARABLE_ROUNDS + 1)
    ] == [0] * QUIET_ROUNDS, by_round
    # Control: the shards did make mistakes at first (the check above can fail).
    assert by_round[1] > 0


REPLICA_ROUNDS = 3


def test_a_read_replica_follows_the_mixed_models(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """A ``--role replica`` in mixing mode learns nothing and serves the learner's mixed model:
    the same round, ``model_version``, ``last`` weights and distributed bound. Control: a replica
    of another group serves no mixed round of this one (the comparison tells models apart)."""
    stream = ConfiguredStream(dim=4, seed=37, noise=0.1)
    kafka = load_settings(kafka={"bootstrap_servers": kafka_bootstrap}).kafka
    dlq = f"{topic_name}.dlq"
    ensure_topics(kafka, [topic_name], partitions=PARTITIONS)
    ensure_topics(kafka, [dlq])
    group = f"{topic_name}-mix"
    env = mixing_env(ROUND_EVENTS, dlq)
    replica_env = {**env, "NOVIKOFF_SERVICE__ROLE": "replica"}
    (learner,) = instances(
        tmp_path, 1, bootstrap=kafka_bootstrap, topic=topic_name, stream=stream, group=group,
        env=env,
    )  # fmt: skip
    replica, stranger = (
        FaultyService.in_workdir(
            tmp_path,
            name,
            bootstrap=kafka_bootstrap,
            topic=topic_name,
            stream=stream,
            group_id=group_id,
            env=replica_env,
        )
        for name, group_id in (("replica", group), ("stranger", f"{group}-other"))
    )
    try:
        learner.start()
        replica.start()
        stranger.start()
        planned = planned_stream(stream, REPLICA_ROUNDS, ROUND_EVENTS, 2, seed=5)
        publish(kafka_bootstrap, topic_name, planned)
        wait_all_mixed([learner, replica], REPLICA_ROUNDS)
        stats, copied = learner.stats(), replica.stats()
        assert mixed_round(copied) == mixed_round(stats) == REPLICA_ROUNDS
        assert copied["model_version"] == stats["model_version"] == REPLICA_ROUNDS
        assert served_last(replica) == served_last(learner)
        assert copied["mixing"]["bound"] == stats["mixing"]["bound"]
        assert copied["mixing"]["mistakes"] == stats["mixing"]["mistakes"] > 0
        assert {s["state"] for s in copied["mixing"]["shards"]} == {"owned elsewhere"}
        assert replica.get("/readyz").status_code == 200
        metrics = replica.get("/metrics").text
        assert "novikoff_model_age_seconds " in metrics
        assert f"novikoff_mixing_round {float(REPLICA_ROUNDS)}" in metrics
        # Control: the other group's replica has no mixed round of this group.
        assert mixed_round(stranger.stats()) == 0
        assert served_last(stranger) != served_last(learner)
    finally:
        for service in (learner, replica, stranger):
            service.stop()
