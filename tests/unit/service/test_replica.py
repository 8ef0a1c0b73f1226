"""A read replica on an in-memory state topic: the learner's model, readiness and model age."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from consumers.engine import Engine
from consumers.state.topic import encode_state_record, state_key
from service.http.app import create_app
from service.model import build_learner, build_tracker
from service.observability.metrics import MODEL_AGE_METRIC, Metrics
from service.replica import Replica
from service.settings import Settings, SettingsError, load_settings
from tests.unit.consumers.state_fakes import FakeStateTopic, wait_until
from tests.unit.service.engines import PLA_EVENTS, trained_engine

MAX_AGE_S = 30.0
START = 1_000.0
KEY = state_key("novikoff", "events")


def replica_settings(dim: int = 1) -> Settings:
    return load_settings(
        model={"dim": dim},
        bound={"references": [{"name": "u", "weights": [0.0] + [-1.0] * dim}]},
        kafka={"topic": "events", "group_id": "novikoff"},
        service={"role": "replica", "replica_max_model_age_seconds": MAX_AGE_S},
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def topic() -> FakeStateTopic:
    return FakeStateTopic()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def replica(
    topic: FakeStateTopic, clock: FakeClock, registry: CollectorRegistry
) -> Iterator[Replica]:
    settings = replica_settings()
    learner = build_learner(settings.model)
    engine = Engine(learner, build_tracker(settings, learner.encoder.dimension))
    replica = Replica(
        settings, engine, Metrics(registry), consumer_factory=topic.consumer, clock=clock
    )
    replica.follower.start()
    yield replica
    assert replica.follower.stop(10.0)


@pytest.fixture
def client(replica: Replica, registry: CollectorRegistry) -> Iterator[TestClient]:
    app = create_app(replica_settings(), replica, replica, Metrics(CollectorRegistry()))
    with TestClient(app) as test_client:
        yield test_client


def learner_state(tmp_path: Path, events: list[Any], dim: int = 1) -> tuple[Engine, bytes]:
    engine = trained_engine(replica_settings(dim), events, tmp_path / f"learner-{dim}")
    payload, _ = engine.checkpoint_bytes()
    return engine, payload


def test_the_replica_serves_the_learners_model(
    topic: FakeStateTopic, replica: Replica, client: TestClient, tmp_path: Path
) -> None:
    learner, payload = learner_state(tmp_path, PLA_EVENTS)
    fresh_version = replica.snapshot.model_version
    topic.append(KEY, encode_state_record(payload, 1))
    wait_until(lambda: replica.model_age_seconds is not None, "the model")
    assert fresh_version != learner.snapshot.model_version, "control: a fresh model differs"
    assert replica.snapshot.model == learner.snapshot.model
    assert client.get("/model").json()["model_version"] == learner.snapshot.model_version
    stats = client.get("/stats").json()
    assert stats["model_version"] == learner.snapshot.model_version
    assert stats["seen"] == len(PLA_EVENTS)
    body = {"features": [1.0]}
    answer = client.post("/predict", json=body).json()
    labels, scores = learner.snapshot.predictor.predict_batch([[1.0, 1.0]])
    assert answer["label"] == labels[0] and answer["score"] == pytest.approx(float(scores[0]))


def test_readiness_waits_for_a_model_and_turns_stale_without_the_broker(
    topic: FakeStateTopic,
    replica: Replica,
    client: TestClient,
    clock: FakeClock,
    registry: CollectorRegistry,
    tmp_path: Path,
) -> None:
    response = client.get("/readyz")
    assert response.status_code == 503
    assert "no model from the state topic events.state" in response.json()["detail"]
    assert math.isnan(registry.get_sample_value(MODEL_AGE_METRIC) or 0.0), "NaN before a model"
    _, payload = learner_state(tmp_path, PLA_EVENTS)
    topic.append(KEY, encode_state_record(payload, 1))
    wait_until(lambda: client.get("/readyz").status_code == 200, "ready")
    assert registry.get_sample_value(MODEL_AGE_METRIC) == 0.0
    topic.down = True
    clock.now += MAX_AGE_S  # exactly at the limit: still ready
    wait_until(lambda: replica.follower.problem is not None, "the outage")
    assert client.get("/readyz").status_code == 200
    assert registry.get_sample_value(MODEL_AGE_METRIC) == MAX_AGE_S
    clock.now += 1.0
    response = client.get("/readyz")
    assert response.status_code == 503
    assert "past service.replica_max_model_age_seconds" in response.json()["detail"]
    assert registry.get_sample_value(MODEL_AGE_METRIC) == MAX_AGE_S + 1.0
    assert client.post("/predict", json={"features": [1.0]}).status_code == 200, "still serves"
    topic.down = False
    clock.now += 1.0
    wait_until(lambda: client.get("/readyz").status_code == 200, "fresh again")


def test_a_state_of_another_model_is_skipped_and_the_previous_kept(
    topic: FakeStateTopic, replica: Replica, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    learner, payload = learner_state(tmp_path, PLA_EVENTS)
    topic.append(KEY, encode_state_record(payload, 1))
    wait_until(lambda: replica.snapshot.seen == len(PLA_EVENTS), "the first model")
    _, other = learner_state(tmp_path, [{"features": [1, 2], "label": 1}], dim=2)
    with caplog.at_level(logging.ERROR, logger="consumers.state.follower"):
        topic.append(KEY, encode_state_record(other, 2))
        wait_until(lambda: replica.follower.skipped == 1, "the skip")
    assert "different model than the configuration" in caplog.text
    assert replica.snapshot.model == learner.snapshot.model
    # Control: a newer state of the configured model is taken.
    _, newer = learner_state(tmp_path / "more", [*PLA_EVENTS, {"features": [3], "label": 1}])
    topic.append(KEY, encode_state_record(newer, 3))
    wait_until(lambda: replica.snapshot.seen == len(PLA_EVENTS) + 1, "the newer model")


def test_a_replica_refuses_a_growing_vocabulary() -> None:
    with pytest.raises(SettingsError, match=r"replica.*vocabulary"):
        load_settings(model={"encoding": "vocabulary"}, service={"role": "replica"})
    assert load_settings(model={"encoding": "vocabulary"}).service.role == "learner"
