"""Mixing-mode test support: a planned 4-partition stream, instances, and the offline IPM.

:func:`offline_mix` runs iterative parameter mixing with the learning package alone: for each
round, each partition's learner starts from the previous mix and learns its next R valid events,
and the mix is their uniform mean in partition order. A service in mixing mode must serve
exactly these weights.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from kafka import KafkaConsumer, TopicPartition
from numpy.typing import NDArray

from consumers.mixing.contribution import Contribution
from learning.mixing import mix_uniform
from learning.seeding import learner_weights, seed_learner
from service.model import build_learner
from service.settings import ModelSettings, load_settings
from tests.support.faults import ConfiguredStream, FaultyService
from tests.support.ledger import EventPlan, Planned, Produced
from tests.support.poison import poison_catalogue

PARTITIONS = 4
READ_TIMEOUT_S = 30.0
POLL_MS = 200
CHEAP_POISON = tuple(k for k in poison_catalogue() if k.value is None or len(k.value) < 1000)


def mixing_env(round_events: int, dlq_topic: str) -> dict[str, str]:
    """Environment of a learner in mixing mode."""
    return {
        "NOVIKOFF_MIXING__ROUND_EVENTS": str(round_events),
        "NOVIKOFF_KAFKA__DLQ_TOPIC": dlq_topic,
    }


def planned_stream(
    stream: ConfiguredStream, rounds: int, round_events: int, poison_per_partition: int, seed: int
) -> list[Planned]:
    """``rounds`` x ``round_events`` valid events per partition, poison at seeded places.

    No poison follows a partition's last valid event: every record then belongs to a complete
    round (records after the last complete round are neither learned nor dead-lettered yet).
    The partitions' records are interleaved in publication order.
    """
    plan = EventPlan(stream.synthetic(), partitions=PARTITIONS)
    valid = plan.valid(PARTITIONS * rounds * round_events)
    rng = np.random.default_rng(seed)
    per_partition: list[list[Planned]] = []
    for p in range(PARTITIONS):
        out: list[Planned] = []
        mine = [v for v in valid if v.partition == p]
        places = sorted(rng.integers(0, len(mine) - 1, size=poison_per_partition).tolist())
        cursor = 0
        for i, place in enumerate(places):
            out.extend(mine[cursor:place])
            cursor = place
            kind = CHEAP_POISON[(p * poison_per_partition + i) % len(CHEAP_POISON)]
            out.append(dataclasses.replace(plan.poison(kind), partition=p))
        out.extend(mine[cursor:])
        per_partition.append(out)
    # Interleaved, so that a paced publication feeds every partition at once.
    mixed = itertools.zip_longest(*per_partition)
    return [item for row in mixed for item in row if item is not None]


Row = tuple[Any, Hashable]
"""An event as published: its features (a list, or a mapping of names) and its label."""


def ipm(
    model: ModelSettings, partitions: Sequence[Sequence[Row]], round_events: int
) -> list[NDArray[np.float64]]:
    """The mixed weights w⁽¹⁾, w⁽²⁾, ... of IPM over ``partitions`` (each one's valid events in
    offset order; complete rounds only), with learners built from ``model``."""
    rounds = min(len(rows) for rows in partitions) // round_events
    weights = learner_weights(build_learner(model)) * 0.0
    mixes = []
    for r in range(rounds):
        shards = []
        for rows in partitions:
            chunk = rows[r * round_events : (r + 1) * round_events]
            learner = seed_learner(build_learner(model), weights)
            X = learner.encoder.encode_batch([features for features, _ in chunk])
            learner.learn_batch(X, learner.encode_labels([label for _, label in chunk]))
            shards.append(learner_weights(learner))
        weights = mix_uniform(shards)
        mixes.append(weights)
    return mixes


def offline_mix(
    stream: ConfiguredStream, produced: Sequence[Produced], round_events: int
) -> list[NDArray[np.float64]]:
    """The mixed weights w⁽¹⁾, w⁽²⁾, ... of the produced stream (complete rounds only)."""
    by_partition: dict[int, list[Row]] = {}
    for record in sorted(produced, key=lambda r: (r.planned.partition, r.offset)):
        if record.planned.reason is None:
            # The synthetic stream's labels are the default label map's keys, "1" and "-1".
            label = f"{record.planned.label:g}"
            features = list(record.planned.features or ())
            by_partition.setdefault(record.planned.partition, []).append((features, label))
    model = load_settings(model={"dim": stream.dim}).model
    return ipm(model, [by_partition[p] for p in sorted(by_partition)], round_events)


def instances(
    root: Path,
    count: int,
    *,
    bootstrap: str,
    topic: str,
    stream: ConfiguredStream,
    group: str,
    env: Mapping[str, str],
) -> list[FaultyService]:
    """``count`` learner instances of one group in mixing mode."""
    return [
        FaultyService.in_workdir(
            root,
            f"{group}-{i}",
            bootstrap=bootstrap,
            topic=topic,
            stream=stream,
            group_id=group,
            env=env,
        )
        for i in range(count)
    ]


def mixed_round(stats: Mapping[str, Any]) -> int:
    """The round of the mixed model an instance serves."""
    return int(stats["mixing"]["round"])


def served_last(service: FaultyService) -> list[float]:
    """The served ``last`` weights (the mixed model)."""
    response = service.get("/model")
    response.raise_for_status()
    weights: list[float] = response.json()["weights"]["last"]
    return weights


def read_contributions(bootstrap: str, topic: str, group: str) -> list[Contribution]:
    """Every committed contribution of ``group`` in the contributions topic ``topic``."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed"
    )
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        out: list[Contribution] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=POLL_MS).values():
                out.extend(Contribution.decode(r.value) for r in records)
        return [c for c in out if c.group == group]
    finally:
        consumer.close()


def replay_cuts(
    stream: ConfiguredStream, produced: Sequence[Produced], cuts: Sequence[Contribution]
) -> list[NDArray[np.float64]]:
    """The mixed weights of each round, replaying the offsets each contribution covered."""
    settings = load_settings(model={"dim": stream.dim})
    valid = {(r.planned.partition, r.offset): r for r in produced if r.planned.reason is None}
    by_round: dict[int, list[Contribution]] = {}
    for c in cuts:
        by_round.setdefault(c.round, []).append(c)
    weights = learner_weights(build_learner(settings.model)) * 0.0
    mixes = []
    for round_ in sorted(by_round):
        shards = []
        for c in sorted(by_round[round_], key=lambda c: c.partition):
            rows = [
                valid[(c.partition, o)]
                for o in range(c.start_offset, c.end_offset)
                if (c.partition, o) in valid
            ]
            learner = seed_learner(build_learner(settings.model), weights)
            if rows:
                X = learner.encoder.encode_batch([list(r.planned.features or ()) for r in rows])
                y = np.array([r.planned.label for r in rows], dtype=np.float64)
                learner.learn_batch(X, y)
            shards.append(learner_weights(learner))
        weights = mix_uniform(shards)
        mixes.append(weights)
    return mixes
