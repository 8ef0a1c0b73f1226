"""Sparse, high-dimensional events: bags of words hashed into 2^18 (and 2^10) buckets.

The workload is :class:`bench.sparse_stream.WordStream`: 20 words per event drawn (Zipf-like,
with replacement) from a vocabulary of 100,000, labels from a hidden sparse separator with 5%
label noise. Features are hashed by our murmur3 :class:`learning.HashingEncoder` (scikit-learn's
``FeatureHasher``, bucket for bucket). Every reference is measured in the same run.

Records, for b = 18 and b = 10 (the bars apply to both):

``learner_sparse_b{b}_vs_river`` (bar 2x)
    ``predict_one`` then ``learn_one`` per event on the same dicts: ours (hashing included)
    against ``river.linear_model.Perceptron`` (which keeps the words as dict keys).
``learner_sparse_batch_b{b}_vs_river`` (bar 20x)
    ``learn_batch`` on CSR batches of ``BATCH_SIZE`` events, already encoded (as the consumer
    hands them over: its decoder builds the CSR batch, see ``pipeline_sparse``), in the learner's
    default configuration, against river's per-event learning.
``learner_sparse_batch_encoded_b{b}_vs_river`` (no bar)
    The same with ``encode_sparse_batch`` of the dicts included in the timing.
``pipeline_sparse_b{b}_vs_decode`` (bar 0.3x)
    The ingest pipeline of :mod:`bench.bench_pipeline` (exactly-once filter, decode straight to
    CSR, predict with last / averaged / voted, learn, bound, metrics; the service's default
    settings with ``encoding = "hashing"``) against ``orjson.loads`` of the same record values.
``pipeline_sparse_b18_peak_rss`` and ``pipeline_sparse_b18_state_bytes`` (lower is better)
    The peak resident memory (bar: at most ``MAX_RSS_BYTES``) and the checkpoint size (bar: at
    most ``MAX_STATE_BYTES``) of the pipeline after ``MEMORY_EVENTS`` events with the default
    settings, measured by :mod:`bench.sparse_memory` in a fresh interpreter. The reference is
    the limit, so the ratio is limit / measured and the bar is 1.

Correctness checks (:class:`bench.ResultMismatchError`): our per-event and batch learners make
exactly the updates, and end with exactly the weights, of a plain per-event perceptron over
scikit-learn ``FeatureHasher`` vectors; the pipeline learned every event, the metrics counted
every event, and its weights equal the offline learner's on the same events; the memory probe
applied every event.
"""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
import time
from collections.abc import Hashable
from functools import partial
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray
from river import linear_model
from sklearn.feature_extraction import FeatureHasher

from bench import BenchRecord, ResultMismatchError, best_time
from bench.bench_pipeline import consumer_records, measure_pipeline, poll_batches
from bench.sparse_memory import sparse_settings
from bench.sparse_stream import LABEL_NOISE, VOCABULARY, WORDS_PER_EVENT, Rows, WordStream
from learning import CSRBatch, HashingEncoder, Perceptron
from service.model import build_learner

logger = logging.getLogger(__name__)

BITS = (18, 10)
MEMORY_BITS = 18
PER_EVENT_BAR = 2.0
BATCH_BAR = 20.0
PIPELINE_BAR = 0.3
MEMORY_BAR = 1.0
MAX_RSS_BYTES = 200 * 2**20
MAX_STATE_BYTES = 20 * 2**20
MEMORY_EVENTS = 100_000
EVENTS = 100_000
QUICK_EVENTS = 10_000
PER_EVENT_EVENTS = 20_000
QUICK_PER_EVENT_EVENTS = 4_000
PIPELINE_EVENTS = 50_000
QUICK_PIPELINE_EVENTS = 6_000
BATCH_SIZE = 1_000
REPEATS = 3
QUICK_REPEATS = 1
BATCH_REPEATS = 5
PIPELINE_REPEATS = 5
QUICK_PIPELINE_REPEATS = 2
WARM_UP_EVENTS = 50
MIB = 2**20
RIVER = "river.linear_model.Perceptron predict_one+learn_one"


def stream_details() -> dict[str, Any]:
    return {
        "vocabulary": VOCABULARY,
        "words_per_event": WORDS_PER_EVENT,
        "word_distribution": "Zipf-like (rank r with probability proportional to 1/r)",
        "label_noise": LABEL_NOISE,
        "hash": "murmur3 (scikit-learn FeatureHasher)",
    }


def river_run(rows: Rows, labels: list[bool]) -> tuple[float, int]:
    """(seconds, prequential mistakes) of river's Perceptron, predict then learn per event."""
    model = linear_model.Perceptron()
    mistakes = 0
    start = time.perf_counter()
    for row, label in zip(cast(list[dict[Hashable, Any]], rows), labels, strict=True):
        if model.predict_one(row) != label:
            mistakes += 1
        model.learn_one(row, label)
    return time.perf_counter() - start, mistakes


def ours_per_event(bits: int, rows: Rows, labels: list[bool]) -> tuple[float, int, Perceptron]:
    """(seconds, prequential mistakes, learner) of our predict_one + learn_one on the dicts."""
    model = Perceptron(encoder=HashingEncoder(bits))
    mistakes = 0
    start = time.perf_counter()
    for row, label in zip(rows, labels, strict=True):
        if model.predict_one(row) != label:
            mistakes += 1
        model.learn_one(row, label)
    return time.perf_counter() - start, mistakes, model


def encoded_batches(encoder: HashingEncoder, rows: Rows) -> list[CSRBatch]:
    return [
        encoder.encode_sparse_batch(rows[start : start + BATCH_SIZE])
        for start in range(0, len(rows), BATCH_SIZE)
    ]


def ours_batch(bits: int, batches: list[CSRBatch], signs: NDArray[np.float64]) -> Perceptron:
    """``learn_batch`` over already encoded CSR batches, the learner's defaults."""
    model = Perceptron(encoder=HashingEncoder(bits))
    for number, batch in enumerate(batches):
        start = number * BATCH_SIZE
        model.learn_batch(batch, signs[start : start + batch.n_rows])
    return model


def ours_batch_encoded(bits: int, rows: Rows, signs: NDArray[np.float64]) -> Perceptron:
    """The same, ``encode_sparse_batch`` of the dicts included."""
    encoder = HashingEncoder(bits)
    return ours_batch(bits, encoded_batches(encoder, rows), signs)


def hashed_reference(
    bits: int, rows: Rows, signs: NDArray[np.float64]
) -> tuple[int, NDArray[np.float64]]:
    """(updates, weights) of a plain per-event perceptron over ``FeatureHasher`` vectors.

    The bias is column 0, scikit-learn's bucket i is column i + 1 (see ``HashingEncoder``).
    """
    hashed = FeatureHasher(n_features=1 << bits, input_type="dict").transform(rows).tocsr()
    weights = np.zeros((1 << bits) + 1)
    updates = 0
    for i, y in enumerate(signs.tolist()):
        start, stop = hashed.indptr[i], hashed.indptr[i + 1]
        columns = hashed.indices[start:stop] + 1
        values = hashed.data[start:stop]
        if y * (weights[0] + float(weights[columns] @ values)) <= 0.0:
            weights[0] += y
            weights[columns] += y * values
            updates += 1
    return updates, weights


def check_against_reference(
    bits: int, what: str, model: Perceptron, rows: Rows, signs: Any
) -> None:
    updates, weights = hashed_reference(bits, rows, signs)
    same_weights = bool(np.array_equal(model.weights, weights))
    if model.n_updates != updates or not same_weights:
        raise ResultMismatchError(
            f"b={bits} {what}: {model.n_updates} updates, FeatureHasher reference {updates}; "
            f"same weights: {same_weights}"
        )


def warm_up(bits: int) -> None:
    """Compile (or load from the numba cache) every kernel outside the timed regions."""
    rows, signs = WordStream().events(WARM_UP_EVENTS)
    labels = (signs > 0).tolist()
    ours_per_event(bits, rows, labels)
    ours_batch_encoded(bits, rows, signs)


def bench_learner(bits: int, quick: bool) -> list[BenchRecord]:
    """The three learner records for 2^bits buckets."""
    n = QUICK_EVENTS if quick else EVENTS
    n_one = QUICK_PER_EVENT_EVENTS if quick else PER_EVENT_EVENTS
    repeats = QUICK_REPEATS if quick else REPEATS
    warm_up(bits)
    rows, signs = WordStream().events(n)
    labels = (signs > 0).tolist()
    batches = encoded_batches(HashingEncoder(bits), rows)
    best = {"river": math.inf, "river_one": math.inf, "one": math.inf}
    best |= {"batch": math.inf, "encoded": math.inf}
    one_mistakes = river_mistakes = 0
    one_model: Perceptron | None = None
    for _ in range(repeats):
        river_seconds, river_mistakes = river_run(rows, labels)
        best["river"] = min(best["river"], river_seconds)
        best["river_one"] = min(best["river_one"], river_run(rows[:n_one], labels[:n_one])[0])
        one_seconds, one_mistakes, one_model = ours_per_event(bits, rows[:n_one], labels[:n_one])
        best["one"] = min(best["one"], one_seconds)
        batch_seconds = best_time(partial(ours_batch, bits, batches, signs), BATCH_REPEATS)
        best["batch"] = min(best["batch"], batch_seconds)
        encoded = best_time(partial(ours_batch_encoded, bits, rows, signs), BATCH_REPEATS)
        best["encoded"] = min(best["encoded"], encoded)
    assert one_model is not None
    batch_model = ours_batch(bits, batches, signs)
    check_against_reference(bits, "per event", one_model, rows[:n_one], signs[:n_one])
    check_against_reference(bits, "learn_batch", batch_model, rows, signs)
    river_rate = n / best["river"]
    common = stream_details() | {
        "hashing_bits": bits,
        "updates_equal_featurehasher_reference": True,
    }
    one_details = common | {
        "events": n_one,
        "ours_prequential_mistakes": one_mistakes,
        "ours_microseconds_per_event": 1e6 * best["one"] / n_one,
        "river_microseconds_per_event": 1e6 * best["river_one"] / n_one,
    }
    batch_details = common | {
        "events": n,
        "batch_size": BATCH_SIZE,
        "path": "learn_batch over already encoded CSR batches, last + averaged counted",
        "ours_updates": batch_model.n_updates,
        "ours_prequential_mistakes": batch_model.prequential_mistakes,
        "river_prequential_mistakes": river_mistakes,
        "ours_microseconds_per_event": 1e6 * best["batch"] / n,
        "encoding_included_microseconds_per_event": 1e6 * best["encoded"] / n,
        "river_microseconds_per_event": 1e6 * best["river"] / n,
    }
    return [
        BenchRecord(
            f"learner_sparse_b{bits}_vs_river",
            n_one / best["one"],
            n_one / best["river_one"],
            "events/s",
            RIVER,
            bar=PER_EVENT_BAR,
            details=one_details,
        ),
        BenchRecord(
            f"learner_sparse_batch_b{bits}_vs_river",
            n / best["batch"],
            river_rate,
            "events/s",
            RIVER,
            bar=BATCH_BAR,
            details=batch_details,
        ),
        BenchRecord(
            f"learner_sparse_batch_encoded_b{bits}_vs_river",
            n / best["encoded"],
            river_rate,
            "events/s",
            RIVER,
            details={"path": "encode_sparse_batch + learn_batch", "events": n},
        ),
    ]


def bench_pipeline(bits: int, quick: bool) -> BenchRecord:
    """``pipeline_sparse_b{bits}_vs_decode``."""
    n = QUICK_PIPELINE_EVENTS if quick else PIPELINE_EVENTS
    repeats = QUICK_PIPELINE_REPEATS if quick else PIPELINE_REPEATS
    settings = sparse_settings(bits)
    stream = WordStream()
    rows, signs = stream.events(n)
    batches = poll_batches(
        consumer_records(stream.records(rows, signs)), settings.kafka.max_poll_records
    )
    offline = build_learner(settings.model)
    offline.learn_batch(offline.encoder.encode_sparse_batch(rows), signs)  # type: ignore[attr-defined]
    return measure_pipeline(
        f"pipeline_sparse_b{bits}_vs_decode",
        settings,
        batches,
        offline.weights,
        repeats,
        PIPELINE_BAR,
        stream_details() | {"hashing_bits": bits},
    )


def bench_memory() -> list[BenchRecord]:
    """Peak RSS and state size, from :mod:`bench.sparse_memory` in a fresh interpreter."""
    command = [sys.executable, "-m", "bench.sparse_memory", str(MEMORY_EVENTS), str(MEMORY_BITS)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    probe: dict[str, Any] = json.loads(done.stdout)
    if probe["seen"] != MEMORY_EVENTS or probe["learned"] != MEMORY_EVENTS:
        raise ResultMismatchError(f"memory probe applied {probe['seen']} of {MEMORY_EVENTS}")
    details = stream_details() | probe | {"settings": "defaults + encoding = hashing"}
    return [
        BenchRecord(
            f"pipeline_sparse_b{MEMORY_BITS}_peak_rss",
            probe["peak_rss_bytes"] / MIB,
            MAX_RSS_BYTES / MIB,
            "MiB",
            "limit: peak RSS of the whole pipeline process",
            higher_is_better=False,
            bar=MEMORY_BAR,
            details=details,
        ),
        BenchRecord(
            f"pipeline_sparse_b{MEMORY_BITS}_state_bytes",
            probe["state_bytes"] / MIB,
            MAX_STATE_BYTES / MIB,
            "MiB",
            "limit: checkpoint size",
            higher_is_better=False,
            bar=MEMORY_BAR,
            details=details,
        ),
    ]


def run(quick: bool = False) -> list[BenchRecord]:
    """Every sparse benchmark (see the module docstring)."""
    records: list[BenchRecord] = []
    for bits in BITS:
        records.extend(bench_learner(bits, quick))
        records.append(bench_pipeline(bits, quick))
    records.extend(bench_memory())
    return records
