"""Bags of words through Apache Kafka into the real ``novikoff serve``, hashed into 2^18 buckets.

The service runs with ``encoding = "hashing"`` (murmur3, 2^18 buckets). A stream of bag-of-words
events (``{"features": {"word": count, ...}, "label": ±1}``) with a few bad sparse events mixed
in is published to a one-partition topic. What the service learns must equal the offline learner
on the good events in the same order, weight for weight; every bad event must be dead-lettered
with its reason code, and learned + dead-lettered must equal produced. ``POST /predict`` with an
object body must answer the offline model's score.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from learning import LinearLearner
from learning.predictor import PredictorName
from service.model import build_learner
from service.settings import load_settings
from service.topics import ensure_topics
from tests.integration.test_service_kafka import (  # noqa: F401 - pytest fixtures
    bootstrap,
    publish,
    serve,
)
from tests.support.ledger import read_dead_letters

pytestmark = pytest.mark.integration

HASHING_BITS = 18
MAX_FEATURES_PER_EVENT = 40
MODEL_TOML = f"""[model]
encoding = "hashing"
hashing = "murmur3"
hashing_bits = {HASHING_BITS}
max_features_per_event = {MAX_FEATURES_PER_EVENT}
"""
VOCABULARY = 5_000
WORDS_PER_EVENT = 20
TEACHER_WORDS = 500
LABEL_NOISE = 0.05
GOOD_EVENTS = 3_000
SEED = 14
BAD_EVENTS = {
    "non_finite": b'{"features": {"word1": 1.0, "word2": NaN}, "label": 1}',
    "too_many_features": orjson.dumps(
        {"features": {f"word{i}": 1.0 for i in range(MAX_FEATURES_PER_EVENT + 1)}, "label": 1}
    ),
    "empty_features": b'{"features": {}, "label": -1}',
    "non_numeric": b'{"features": {"word1": "three"}, "label": 1}',
}
"""One bad sparse event per reason code the service must give it."""
BAD_EVERY = 500
"""A bad event goes out after every this many good ones."""
PROBE = {"word0": 2.0, "word7": 1.0, "word4999": 3.0, "unseen-word": 1.0}
PREDICTOR: PredictorName = "averaged"


def bag_of_words_events() -> tuple[list[dict[str, float]], list[int]]:
    """Zipf-like bags of words labelled by a hidden sparse teacher, with label noise."""
    rng = np.random.default_rng(SEED)
    ranks = np.arange(1, VOCABULARY + 1, dtype=np.float64)
    probabilities = (1.0 / ranks) / (1.0 / ranks).sum()
    teacher = np.zeros(VOCABULARY)
    teacher[rng.choice(VOCABULARY, TEACHER_WORDS, replace=False)] = rng.standard_normal(
        TEACHER_WORDS
    )
    draws = rng.choice(VOCABULARY, size=(GOOD_EVENTS, WORDS_PER_EVENT), p=probabilities)
    labels = np.where(teacher[draws].sum(axis=1) > 0.0, 1, -1)
    flips = rng.random(GOOD_EVENTS) < LABEL_NOISE
    labels[flips] = -labels[flips]
    rows = [
        {f"word{word}": float(times) for word, times in Counter(row).items()}
        for row in draws.tolist()
    ]
    return rows, labels.tolist()


def offline_learner(rows: list[dict[str, float]], labels: list[int]) -> LinearLearner:
    settings = load_settings(
        model={
            "encoding": "hashing",
            "hashing_bits": HASHING_BITS,
            "max_features_per_event": MAX_FEATURES_PER_EVENT,
        }
    )
    learner = build_learner(settings.model)
    batch = learner.encoder.encode_sparse_batch(rows)  # type: ignore[attr-defined]
    learner.learn_batch(batch, np.array(labels, dtype=np.float64))
    return learner


def interleaved(good: list[bytes]) -> tuple[list[bytes], dict[int, str]]:
    """The good records with a bad one after every BAD_EVERY; offsets of the bad ones."""
    values: list[bytes] = []
    bad_offsets: dict[int, str] = {}
    bad = iter(BAD_EVENTS.items())
    for index, value in enumerate(good, start=1):
        values.append(value)
        if index % BAD_EVERY == 0:
            reason, bad_value = next(bad, (None, b""))
            if reason is not None:
                bad_offsets[len(values)] = reason
                values.append(bad_value)
    return values, bad_offsets


def test_bag_of_words_stream_equals_the_offline_learner(
    serve: Any,  # noqa: F811 - the imported fixture
    bootstrap: str,  # noqa: F811 - the imported fixture
    topic_name: str,
) -> None:
    rows, labels = bag_of_words_events()
    good = [
        orjson.dumps({"features": row, "label": y}) for row, y in zip(rows, labels, strict=True)
    ]
    values, bad_offsets = interleaved(good)
    assert sorted(bad_offsets.values()) == sorted(BAD_EVENTS)
    settings = load_settings(kafka={"bootstrap_servers": bootstrap})
    ensure_topics(settings.kafka, [topic_name, f"{topic_name}.dlq"], partitions=1)
    publish(bootstrap, topic_name, values)
    service = serve(MODEL_TOML)
    service.wait_until(
        lambda: (
            service.json("/stats")["seen"] + sum(service.json("/stats")["invalid"].values())
            >= len(values)
        ),
        120.0,
        "drained",
    )
    stats = service.json("/stats")
    assert stats["seen"] == GOOD_EVENTS
    assert stats["invalid"] == dict.fromkeys(BAD_EVENTS, 1)
    assert stats["seen"] + sum(stats["invalid"].values()) == len(values)
    letters = read_dead_letters(bootstrap, f"{topic_name}.dlq", expected=len(BAD_EVENTS))
    assert {letter.source: letter.reason for letter in letters} == {
        (topic_name, 0, offset): reason for offset, reason in bad_offsets.items()
    }

    offline = offline_learner(rows, labels)
    snapshot = offline.snapshot()
    model = service.json("/model")
    assert len(model["weights"]["last"]) == (1 << HASHING_BITS) + 1
    assert model["weights"]["last"] == snapshot.weights.tolist()
    assert model["weights"]["averaged"] == snapshot.averaged_weights.tolist()
    assert model["counters"]["mistakes"] == offline.n_updates
    assert model["counters"]["prequential_mistakes"] == offline.prequential_mistakes

    # Control: one event fewer gives another mean of the weights, so the comparison can fail.
    fewer = offline_learner(rows[:-1], labels[:-1]).snapshot()
    assert fewer.averaged_weights.tolist() != model["weights"]["averaged"]

    response = httpx.post(
        service.url + "/predict", json={"features": PROBE, "predictor": PREDICTOR}, timeout=10.0
    )
    assert response.status_code == 200, response.text
    probe = offline.encoder.encode_sparse_batch([PROBE])  # type: ignore[attr-defined]
    _, scores = snapshot.predict_codes(probe, PREDICTOR)
    assert scores[0] != 0.0
    assert response.json()["score"] == float(scores[0])
    assert service.terminate() == 0
