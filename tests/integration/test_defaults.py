"""The defaults matrix: each mode runs with the default configuration plus only what it needs.

A defect that hides behind a setting every other test configures (a bound reference, say) shows
here by construction: every cell is a real ``novikoff serve`` on the session's Apache Kafka, with
a config file holding nothing but the cell's needs.

* Modes: ``learner`` (the default: exactly-once), ``learner-no-transactions`` (``[kafka]
  transactions = false``), ``replica`` (``[service] role = "replica"`` beside a default learner of
  the same group: a replica follows the state topic, which only a transactional learner writes,
  so its learner is the default one), ``mixing`` (``[mixing] round_events``).
* References: ``none`` (the default) and ``one`` (``[[bound.references]]``).
* Variants: ``binary-dense`` (the default model), ``binary-hashed`` (``[model] encoding =
  "hashing"``), ``multiclass-dense`` (``[model] variant = "multiclass"``; mixing also declares the
  classes, which mixing a multiclass model needs, and the multiclass reference has one row per
  class).

Every combination applies; none is skipped. Each cell checks the events are learned (``/stats``
``seen`` is every event, ``model_version`` moved) and served: ``/predict`` gives the label and
score that the weights ``/model`` reports give (computed here); a replica serves its learner's
exact weights; a mixing learner serves exactly the offline IPM of the same partitions
(:func:`tests.support.mixing.ipm`), which is also the issue's done-when check for the default
configuration. Controls: the offline IPM of another round size differs from the served model; a
prediction computed from other weights differs from the served one.

Each variant's events are published once, to a topic of :data:`PARTITIONS` partitions that all of
its cells read (every cell has its own consumer group).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from consumers.mixing.contribution import REFUSAL_REASONS
from learning.encoders import Encoder
from service.model import build_encoder
from service.settings import ModelSettings, load_settings
from service.topics import ensure_topics
from tests.support.ledger import Planned, publish
from tests.support.mixing import Row, ipm
from tests.support.running_service import RunningService, Stream

pytestmark = pytest.mark.integration

PARTITIONS = 2
ROUND_EVENTS = 100
ROUNDS = 3
EVENTS = PARTITIONS * ROUNDS * ROUND_EVENTS
MARGIN = 0.1
CLASSES = ("a", "b", "c")
HASHED_NAMES = ("left", "right")
PREDICT_INSTANCES = 8
SEED = 7
LEARNED_TIMEOUT_S = 120.0
POLL_S = 0.2
SCORE_TOLERANCE = 1e-9
PREDICT_TIMEOUT_S = 120.0

MODES = ("learner", "learner-no-transactions", "replica", "mixing")
REFERENCES = ("none", "one")
VARIANTS = ("binary-dense", "binary-hashed", "multiclass-dense")

MODE_TOML = {
    "learner": "",
    "learner-no-transactions": "[kafka]\ntransactions = false\n",
    "replica": "",
    "mixing": f"[mixing]\nround_events = {ROUND_EVENTS}\n",
}
VARIANT_MODEL = {
    "binary-dense": {},
    "binary-hashed": {"encoding": "hashing"},
    "multiclass-dense": {"variant": "multiclass"},
}


@dataclass(frozen=True)
class Events:
    """A variant's events: per partition, in offset order, (features, label) as published."""

    topic: str
    partitions: list[list[Row]]

    def rows(self) -> list[Row]:
        return [row for partition in self.partitions for row in partition]


@dataclass(frozen=True)
class CellConfig(Stream):
    """A ``novikoff serve`` config file holding exactly ``toml``."""

    toml: str = ""

    def config_toml(self) -> str:
        return self.toml


def draw_events(variant: str, count: int, rng: np.random.Generator) -> list[Row]:
    """``count`` events of the default width (2 features) with a margin of :data:`MARGIN`."""
    rows: list[Row] = []
    angles = np.array([0.0, 2.0, 4.0]) * np.pi / 3
    centres = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    while len(rows) < count:
        x = rng.uniform(-1.0, 1.0, 2).round(4)
        if variant == "multiclass-dense":
            scores = centres @ x
            top, second = np.sort(scores)[::-1][:2]
            if top - second < MARGIN:
                continue
            label = CLASSES[int(np.argmax(scores))]
        else:
            score = 0.6 * x[0] + 0.8 * x[1]
            if abs(score) < MARGIN:
                continue
            label = "1" if score > 0 else "-1"
        features: Any = (
            dict(zip(HASHED_NAMES, x.tolist(), strict=True))
            if variant == "binary-hashed"
            else x.tolist()
        )
        rows.append((features, label))
    return rows


def model_settings(variant: str, mode: str) -> dict[str, Any]:
    model: dict[str, Any] = dict(VARIANT_MODEL[variant])
    if mode == "mixing" and variant == "multiclass-dense":
        model["classes"] = list(CLASSES)  # mixing a multiclass model needs its classes declared
    return model


def reference_toml(variant: str) -> str:
    """One reference separator of the model's width (bias first)."""
    width = load_settings(model=VARIANT_MODEL[variant]).model.feature_dimension
    assert width is not None
    if variant == "binary-dense":
        weights: Any = [0.0, 0.6, 0.8]
    elif variant == "binary-hashed":
        weights = [1.0] + [0.0] * width
    else:
        angles = np.array([0.0, 2.0, 4.0]) * np.pi / 3
        weights = [[0.0, float(np.cos(a)), float(np.sin(a))] for a in angles]
    return f'[[bound.references]]\nname = "u"\nweights = {orjson.dumps(weights).decode()}\n'


def cell_toml(mode: str, references: str, variant: str) -> str:
    lines = [
        f"{key} = {orjson.dumps(value).decode()}\n"
        for key, value in model_settings(variant, mode).items()
    ]
    toml = "[model]\n" + "".join(lines) if lines else ""
    toml += MODE_TOML[mode]
    if references == "one":
        toml += reference_toml(variant)
    return toml


@pytest.fixture(scope="module")
def variant_events(kafka_bootstrap: str) -> Callable[[str], Events]:
    """Publishes each variant's events once (on first use), to a topic of its own."""
    published: dict[str, Events] = {}
    kafka = load_settings(kafka={"bootstrap_servers": kafka_bootstrap}).kafka

    def events(variant: str) -> Events:
        if variant not in published:
            topic = f"defaults-{variant}-{uuid.uuid4().hex[:8]}"
            ensure_topics(kafka, [topic], partitions=PARTITIONS)
            rng = np.random.default_rng(SEED)
            partitions = [
                draw_events(variant, EVENTS // PARTITIONS, rng) for _ in range(PARTITIONS)
            ]
            planned = [
                Planned(
                    f"{variant}-{p}-{i}",
                    orjson.dumps({"features": features, "label": label}),
                    p,
                )
                for i in range(EVENTS // PARTITIONS)
                for p, (features, label) in enumerate(row[i] for row in partitions)
            ]
            produced = publish(kafka_bootstrap, topic, planned)
            for p in range(PARTITIONS):
                offsets = [r.offset for r in produced if r.planned.partition == p]
                assert offsets == sorted(offsets)
            published[variant] = Events(topic, partitions)
        return published[variant]

    return events


@pytest.fixture
def start(tmp_path: Path, kafka_bootstrap: str) -> Iterator[Callable[..., RunningService]]:
    """Starts ``novikoff serve`` processes; stops them all after the test."""
    running: list[RunningService] = []

    def start_service(name: str, topic: str, toml: str, env: dict[str, str]) -> RunningService:
        workdir = tmp_path / name
        workdir.mkdir()
        service = RunningService(
            workdir=workdir,
            bootstrap=kafka_bootstrap,
            topic=topic,
            stream=CellConfig(toml=toml),
            log_path=workdir / "serve.log",
            extra_env=env,
            wait_until_ready=False,
        )
        running.append(service)
        return service.start()

    try:
        yield start_service
    finally:
        for service in running:
            service.stop()


def wait_learned(service: RunningService, condition: Callable[[dict[str, Any]], bool]) -> Any:
    """``/stats`` once ``condition`` holds on it."""
    deadline = time.monotonic() + LEARNED_TIMEOUT_S
    stats: dict[str, Any] = {}
    while time.monotonic() < deadline:
        service._check_alive()
        try:
            response = service.get("/stats")
        except httpx.TransportError:  # not listening yet
            time.sleep(POLL_S)
            continue
        if response.status_code == 200:
            stats = response.json()
            if condition(stats):
                return stats
            if sum(stats["invalid"].values()):
                # Every event is valid: a dead-lettered one means the cell cannot pass.
                raise AssertionError(f"valid events dead-lettered: {stats['invalid']}")
            if not stats["ready"]:
                readyz = service.get("/readyz")
                if "fix:" in readyz.text:  # a cause retrying cannot fix
                    raise AssertionError(f"not ready: {readyz.text}")
        time.sleep(POLL_S)
    raise AssertionError(
        f"not learned within {LEARNED_TIMEOUT_S}s: {stats}; see {service.log_path}"
    )


def served_model(service: RunningService) -> dict[str, Any]:
    response = service.get("/model")
    response.raise_for_status()
    model: dict[str, Any] = response.json()
    return model


def expected_predictions(
    model: dict[str, Any], predictor: str, encoder: Encoder, features: Sequence[Any]
) -> list[tuple[Any, float]]:
    """Label and score of each instance under the weights ``/model`` reports (bias first)."""
    X = encoder.encode_batch(list(features))
    dense = X.to_dense() if hasattr(X, "to_dense") else np.asarray(X)
    weights = np.atleast_2d(np.asarray(model["weights"][predictor], dtype=np.float64))
    scores = dense @ weights.T
    if model["variant"] == "multiclass":
        best = scores.argmax(axis=1)
        return [(model["classes"][b], float(s[b])) for b, s in zip(best, scores, strict=True)]
    return [("1" if s[0] >= 0 else "-1", float(s[0])) for s in scores]


def assert_serves(
    service: RunningService, model_settings_: ModelSettings, features: Sequence[Any]
) -> None:
    """``/predict`` gives the labels and scores of the weights ``/model`` reports.

    Under mixing ``/model``'s ``model_version`` is the mixed round while ``/predict``'s is the
    mixed model's update count, so the versions are compared outside mixing only.
    """
    # A process's first prediction of a kind may compile its kernel (numba, cached on disk
    # afterwards): on a loaded machine that takes longer than the client's default timeout.
    with httpx.Client(base_url=service.base_url, timeout=PREDICT_TIMEOUT_S) as client:
        response = client.post("/predict", json={"instances": [{"features": f} for f in features]})
    assert response.status_code == 200, response.text
    body = response.json()
    model = served_model(service)
    if "mixing" not in service.stats():
        assert body["model_version"] == model["model_version"]
    encoder = build_encoder(model_settings_)
    want = expected_predictions(model, body["predictor"], encoder, features)
    got = [(p["label"], p["score"]) for p in body["predictions"]]
    assert [label for label, _ in got] == [label for label, _ in want]
    assert np.allclose([s for _, s in got], [s for _, s in want], rtol=0, atol=SCORE_TOLERANCE)
    # Control: the weights of the other predictor score differently.
    other = "last" if body["predictor"] == "averaged" else "averaged"
    assert [s for _, s in expected_predictions(model, other, encoder, features)] != [
        s for _, s in got
    ]


def learned_everything(stats: dict[str, Any]) -> bool:
    return bool(stats["seen"] == EVENTS and stats["model_version"] > 0 and stats["ready"])


def cells() -> list[Any]:
    """Every (mode, references, variant)."""
    return [
        pytest.param(
            mode,
            references,
            variant,
            id=f"{mode}-{references}-{variant}",
        )
        for mode in MODES
        for references in REFERENCES
        for variant in VARIANTS
    ]


@pytest.mark.parametrize(("mode", "references", "variant"), cells())
def test_defaults_learn_and_serve(
    mode: str,
    references: str,
    variant: str,
    variant_events: Callable[[str], Events],
    start: Callable[..., RunningService],
) -> None:
    events = variant_events(variant)
    toml = cell_toml(mode, references, variant)
    settings = load_settings(model=model_settings(variant, mode))
    probe = [features for features, _ in events.rows()[:PREDICT_INSTANCES]]
    if mode == "replica":
        group = f"defaults-{uuid.uuid4().hex[:8]}"
        env = {"NOVIKOFF_KAFKA__GROUP_ID": group}
        learner = start("learner", events.topic, cell_toml("learner", references, variant), env)
        replica = start("replica", events.topic, toml, {**env, "NOVIKOFF_SERVICE__ROLE": "replica"})
        learned = wait_learned(learner, learned_everything)
        wait_learned(
            replica, lambda s: s["seen"] == EVENTS and s["ready"] and s["model_version"] > 0
        )
        model = served_model(replica)
        assert model["weights"] == served_model(learner)["weights"]
        assert model["model_version"] == learned["model_version"]
        assert_serves(replica, settings.model, probe)
        return
    service = start(mode, events.topic, toml, {})
    if mode == "mixing":
        stats = wait_learned(service, lambda s: s["model_version"] >= ROUNDS and s["ready"])
        assert (stats["model_version"], stats["seen"]) == (ROUNDS, EVENTS)
        assert len(stats["mixing"]["bound"]) == (references == "one")
        expected = ipm(settings.model, events.partitions, ROUND_EVENTS)
        served = served_model(service)["weights"]["last"]
        assert np.asarray(served).tolist() == expected[-1].reshape(np.shape(served)).tolist()
        refused = [
            line
            for line in service.get("/metrics").text.splitlines()
            if line.startswith("novikoff_mixing_contributions_refused_total{")
        ]
        assert len(refused) == len(REFUSAL_REASONS)
        assert all(line.endswith(" 0.0") for line in refused), refused
        # Control: the offline IPM of another round size is another model.
        other = ipm(settings.model, events.partitions, ROUND_EVENTS // 2)[-1]
        assert other.reshape(np.shape(served)).tolist() != np.asarray(served).tolist()
    else:
        stats = wait_learned(service, learned_everything)
        assert len(stats["bounds"]) == (references == "one")
    assert stats["invalid"] == {} or sum(stats["invalid"].values()) == 0
    assert_serves(service, settings.model, probe)
