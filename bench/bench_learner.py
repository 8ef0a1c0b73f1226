"""Prequential predict-then-learn throughput of the learning core against river.

For d = 10, 100 and 1000 one synthetic stream is generated: x ~ N(0, I_d), a random teacher
u over x̃ = (1, x) labels y = sign(u·x̃), and a fraction ``LABEL_NOISE`` of labels is flipped so
the learner keeps making mistakes (and keeps adding voters) all along the stream. On that same
stream, in the same run, three things are measured:

* ``river.linear_model.Perceptron``: ``predict_one`` then ``learn_one`` per event on dicts;
* a plain numpy reference perceptron (w·x̃ ≤ 0 → w += y·x̃ per event), whose update count ours
  must equal exactly;
* ours: ``Perceptron.learn_batch`` over the already decoded batch (what the consumer and the
  offline trainer call), in batches of ``BATCH_SIZE``, in the default configuration: every event
  is predicted by ``last`` and ``averaged`` (both counted), then learned, and the voters are
  maintained.

Timings are the best of ``REPEATS`` runs, river's and ours interleaved, so a noisy neighbour on
a shared machine penalises neither side more than the other.

Records: ``learner_d{d}_vs_river`` (the bar: 10x, 30x, 100x), ``learner_d{d}_vs_numpy_loop``,
``learner_d{d}_voted_vs_river`` (``prequential_voted=True``: the voted predictor's prequential
mistakes counted too) and ``learner_learn_one_d{d}_vs_river`` (our river-style per-event API on
dicts, ``LEARN_ONE_BAR``: at least as fast as river's on the same dicts, also best of ``REPEATS``
interleaved runs).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from river import linear_model

from bench import BenchRecord, ResultMismatchError, best_time
from learning import DenseEncoder, LabelMap, Perceptron, VocabularyEncoder

logger = logging.getLogger(__name__)

DIMENSIONS = (10, 100, 1000)
BARS = {10: 10.0, 100: 30.0, 1000: 100.0}
LEARN_ONE_BAR = 1.0
"""``learner_learn_one_d*_vs_river``: the per-event API at least as fast as river's."""
EVENTS = {10: 60_000, 100: 20_000, 1000: 4_000}
QUICK_EVENTS = {10: 4_000, 100: 2_000, 1000: 500}
LEARN_ONE_EVENTS = 10_000
LABEL_NOISE = 0.05
BATCH_SIZE = 1_000
REPEATS = 3
OURS_REPEATS = 5
SEED = 20_240_601
LABELS = LabelMap({True: 1, False: -1})


@dataclass(frozen=True)
class Stream:
    """One synthetic stream in the three shapes the contenders take."""

    X: NDArray[np.float64]
    labels: NDArray[np.bool_]
    rows: list[dict[Hashable, Any]]
    encoded: NDArray[np.float64]
    signs: NDArray[np.float64]


def make_stream(dimension: int, n: int, seed: int = SEED) -> Stream:
    """The noisy linearly labelled stream described in the module docstring."""
    rng = np.random.default_rng(seed + dimension)
    X = rng.standard_normal((n, dimension))
    teacher = rng.standard_normal(dimension + 1)
    labels = (teacher[0] + X @ teacher[1:]) >= 0
    flips = rng.random(n) < LABEL_NOISE
    labels = labels ^ flips
    names = [f"x{j}" for j in range(dimension)]
    rows: list[dict[Hashable, Any]] = [dict(zip(names, row, strict=True)) for row in X.tolist()]
    encoded = DenseEncoder(dimension).encode_batch(X)
    signs = np.where(labels, 1.0, -1.0)
    return Stream(X, labels, rows, encoded, signs)


def river_run(stream: Stream) -> tuple[float, int]:
    """(seconds, prequential mistakes) of river's Perceptron, predict then learn per event."""
    model = linear_model.Perceptron()
    mistakes = 0
    start = time.perf_counter()
    for row, label in zip(stream.rows, stream.labels.tolist(), strict=True):
        if model.predict_one(row) != label:
            mistakes += 1
        model.learn_one(row, label)
    return time.perf_counter() - start, mistakes


def numpy_reference(stream: Stream) -> tuple[float, int, NDArray[np.float64]]:
    """(seconds, updates, weights) of the plain per-event numpy perceptron."""
    weights = np.zeros(stream.encoded.shape[1])
    updates = 0
    start = time.perf_counter()
    for x, y in zip(stream.encoded, stream.signs.tolist(), strict=True):
        if y * float(x @ weights) <= 0.0:
            weights += y * x
            updates += 1
    return time.perf_counter() - start, updates, weights


def ours_batch(stream: Stream, prequential_voted: bool = False) -> Perceptron:
    """Learn the stream with learn_batch in BATCH_SIZE chunks; returns the learner."""
    dimension = stream.X.shape[1]
    model = Perceptron(
        label_map=LABELS, encoder=DenseEncoder(dimension), prequential_voted=prequential_voted
    )
    for start in range(0, stream.encoded.shape[0], BATCH_SIZE):
        stop = start + BATCH_SIZE
        model.learn_batch(stream.encoded[start:stop], stream.signs[start:stop])
    return model


def ours_learn_one(stream: Stream) -> tuple[float, int]:
    """(seconds, prequential mistakes) of our predict_one + learn_one on dicts."""
    model = Perceptron(label_map=LABELS, encoder=VocabularyEncoder())
    mistakes = 0
    start = time.perf_counter()
    for row, label in zip(stream.rows, stream.labels.tolist(), strict=True):
        if model.predict_one(row) != label:
            mistakes += 1
        model.learn_one(row, label)
    return time.perf_counter() - start, mistakes


def warm_up() -> None:
    """Compile (or load from the numba cache) every kernel outside the timed regions."""
    stream = make_stream(3, 50)
    ours_batch(stream)
    ours_batch(stream, prequential_voted=True)
    ours_learn_one(stream)


def interleaved(stream: Stream) -> dict[str, float]:
    """Best times (s) of river, ours and ours with the voted count, measured in turns."""
    best = {"river": math.inf, "ours": math.inf, "voted": math.inf}
    for _ in range(REPEATS):
        best["river"] = min(best["river"], river_run(stream)[0])
        best["ours"] = min(best["ours"], best_time(lambda: ours_batch(stream), OURS_REPEATS))
        voted = best_time(lambda: ours_batch(stream, prequential_voted=True), OURS_REPEATS)
        best["voted"] = min(best["voted"], voted)
    return best


def bench_dimension(dimension: int, n: int) -> list[BenchRecord]:
    """All records for one dimension."""
    stream = make_stream(dimension, n)
    _, river_mistakes = river_run(stream)
    numpy_seconds, numpy_updates, numpy_weights = numpy_reference(stream)
    model = ours_batch(stream)
    voted_model = ours_batch(stream, prequential_voted=True)
    seconds = interleaved(stream)
    short = make_stream(dimension, min(n, LEARN_ONE_EVENTS))
    one_seconds = river_short_seconds = math.inf
    for _ in range(REPEATS):
        seconds_one, one_mistakes = ours_learn_one(short)
        one_seconds = min(one_seconds, seconds_one)
        river_short_seconds = min(river_short_seconds, river_run(short)[0])
    same_updates = model.n_updates == numpy_updates
    same_weights = bool(np.array_equal(model.weights, numpy_weights))
    if not (same_updates and same_weights):
        raise ResultMismatchError(
            f"d={dimension}: ours {model.n_updates} updates, numpy {numpy_updates}; "
            f"same weights: {same_weights}"
        )
    details: dict[str, Any] = {
        "events": n,
        "path": "learn_batch over a decoded batch, last + averaged counted",
        "batch_size": BATCH_SIZE,
        "label_noise": LABEL_NOISE,
        "river_prequential_mistakes": river_mistakes,
        "ours_prequential_mistakes": model.prequential_mistakes,
        "ours_updates": model.n_updates,
        "numpy_reference_updates": numpy_updates,
        "updates_equal_numpy_reference": same_updates,
        "weights_equal_numpy_reference": same_weights,
        "ours_microseconds_per_event": 1e6 * seconds["ours"] / n,
        "river_microseconds_per_event": 1e6 * seconds["river"] / n,
    }
    river_rate = n / seconds["river"]
    return [
        BenchRecord(
            f"learner_d{dimension}_vs_river",
            n / seconds["ours"],
            river_rate,
            "events/s",
            "river.linear_model.Perceptron predict_one+learn_one",
            bar=BARS[dimension],
            details=details,
        ),
        BenchRecord(
            f"learner_d{dimension}_vs_numpy_loop",
            n / seconds["ours"],
            n / numpy_seconds,
            "events/s",
            "plain numpy per-event perceptron (last weights only)",
            details={"updates_equal": same_updates, "weights_equal": same_weights},
        ),
        BenchRecord(
            f"learner_d{dimension}_voted_vs_river",
            n / seconds["voted"],
            river_rate,
            "events/s",
            "river.linear_model.Perceptron predict_one+learn_one",
            details={
                "prequential_voted": True,
                "ours_prequential_mistakes": voted_model.prequential_mistakes,
                "voters_kept": voted_model.n_voters,
                "voters_dropped": voted_model.dropped_voters,
            },
        ),
        BenchRecord(
            f"learner_learn_one_d{dimension}_vs_river",
            len(short.rows) / one_seconds,
            len(short.rows) / river_short_seconds,
            "events/s",
            "river.linear_model.Perceptron predict_one+learn_one",
            bar=LEARN_ONE_BAR,
            details={"ours_prequential_mistakes": one_mistakes, "path": "dicts, per event"},
        ),
    ]


def run(quick: bool = False) -> list[BenchRecord]:
    """Every learner benchmark."""
    warm_up()
    sizes = QUICK_EVENTS if quick else EVENTS
    records: list[BenchRecord] = []
    for dimension in DIMENSIONS:
        records.extend(bench_dimension(dimension, sizes[dimension]))
    return records
