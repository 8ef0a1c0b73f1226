"""The size of a state record (what the learner writes to the state topic) as the model grows.

Three service models learn ``EVENTS`` seeded events each, as ``novikoff serve`` does
(:class:`consumers.engine.Engine`, the settings' defaults: 64 voters, prequential voted count):

* ``d10`` and ``d1000``: dense binary models over 10 and 1,000 features, on a synthetic stream
  with 10 % label noise (so the model keeps updating);
* ``h18``: a hashed model over 2^18 buckets, each event ``HASHED_NAMES`` random feature names
  with normal values and a random label.

Each record is the state record's size in bytes (``encode_state_record(checkpoint_bytes())``)
against Kafka's default ``message.max.bytes`` (a fixed limit, not a measurement; no bar: a
record above it is split by the writer, :mod:`consumers.state.chunks`). The details give the
number of records it is written as at the default ``[kafka] state_record_max_bytes``, and its
gzip size (the producer's compression would not bring the larger ones under the limit).
"""

from __future__ import annotations

import gzip
import logging
from collections.abc import Iterator

import numpy as np
import orjson

from bench import BenchRecord
from consumers.decoding.events import Record
from consumers.engine import Engine
from consumers.state.chunks import DEFAULT_MAX_RECORD_BYTES, split_state_value
from consumers.state.topic import encode_state_record, state_key
from service.cli.synthetic import SyntheticStream
from service.model import build_learner, build_tracker
from service.settings import Settings, load_settings

logger = logging.getLogger(__name__)

EVENTS = 20_000
QUICK_EVENTS = 5_000
BATCH = 2_000
SEED = 1
NOISE = 0.1
HASHING_BITS = 18
HASHED_NAMES = 50
NAME_SPACE = 10_000_000
KAFKA_MESSAGE_MAX_BYTES = 1_048_588
"""Apache Kafka's default ``message.max.bytes``."""
TOPIC = "events"
SEQUENCE = 1


def dense_events(dim: int, count: int) -> Iterator[bytes]:
    stream = SyntheticStream(dim=dim, margin=0.0, noise=NOISE, seed=SEED)
    return (value for _, value in stream.records(count))


def hashed_events(count: int) -> Iterator[bytes]:
    rng = np.random.default_rng(SEED)
    for _ in range(count):
        names = rng.integers(0, NAME_SPACE, HASHED_NAMES)
        features = {
            f"f{name}": float(x)
            for name, x in zip(names, rng.normal(size=HASHED_NAMES), strict=True)
        }
        label = int(rng.choice([-1, 1]))
        yield orjson.dumps({"features": features, "label": label})


def learned_engine(settings: Settings, events: Iterator[bytes]) -> Engine:
    """A service engine that has learned ``events`` in batches of ``BATCH``."""
    learner = build_learner(settings.model)
    engine = Engine(learner, build_tracker(settings, learner.encoder.dimension))
    values = list(events)
    for start in range(0, len(values), BATCH):
        records = [
            Record(TOPIC, 0, start + i, value)
            for i, value in enumerate(values[start : start + BATCH])
        ]
        engine.apply(engine.decoder.decode_batch(records))
    return engine


def measure(name: str, settings: Settings, events: Iterator[bytes]) -> BenchRecord:
    engine = learned_engine(settings, events)
    value = encode_state_record(engine.checkpoint_bytes()[0], SEQUENCE)
    learner = engine.learner
    written = split_state_value(state_key("novikoff", TOPIC), value, DEFAULT_MAX_RECORD_BYTES)
    return BenchRecord(
        f"state_record_bytes_{name}",
        float(len(value)),
        float(KAFKA_MESSAGE_MAX_BYTES),
        "bytes",
        "Kafka's default message.max.bytes (a fixed limit, not a measurement)",
        higher_is_better=False,
        details={
            "events": learner.n_seen,
            "updates": learner.n_updates,
            "voters": learner.n_voters,
            "dimension": learner.dimension,
            "gzip_bytes": len(gzip.compress(value)),
            "records_written": len(written),
            "state_record_max_bytes": DEFAULT_MAX_RECORD_BYTES,
        },
    )


def run(quick: bool = False) -> list[BenchRecord]:
    """State record sizes at d = 10, 1,000 and 2^18 hashed buckets."""
    count = QUICK_EVENTS if quick else EVENTS
    hashed = load_settings(model={"encoding": "hashing", "hashing_bits": HASHING_BITS})
    return [
        measure("d10", load_settings(model={"dim": 10}), dense_events(10, count)),
        measure("d1000", load_settings(model={"dim": 1000}), dense_events(1000, count)),
        measure("h18", hashed, hashed_events(count)),
    ]
