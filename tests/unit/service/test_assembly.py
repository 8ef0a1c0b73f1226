"""The assembled service in this process, with no broker: it serves, says why it is not ready,
and stops within its deadline."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from consumers.state.follower import StateFollower
from service.assembly import build_service
from service.settings import load_settings
from tests.support.broker import free_port


def test_service_without_a_broker_serves_and_stops(tmp_path: Path) -> None:
    settings = load_settings(
        kafka={"bootstrap_servers": f"127.0.0.1:{free_port()}"},
        http={"port": 0},
        checkpoint={"path": str(tmp_path / "state")},
        service={"shutdown_deadline_seconds": 10.0},
    )
    service = build_service(settings)
    service.start()
    try:
        assert service.running
        assert httpx.get(service.url + "/healthz").json() == {"status": "ok"}
        ready = httpx.get(service.url + "/readyz")
        assert ready.status_code == 503
        assert ready.headers["content-type"] == "application/problem+json"
        assert ready.json()["detail"].startswith("not ready: ")
        answer = httpx.post(service.url + "/predict", json={"features": [1.0, 2.0]})
        assert answer.status_code == 200
        assert answer.json()["model_version"] == 0
        assert "novikoff_ready 0.0" in httpx.get(service.url + "/metrics").text
    finally:
        started = time.monotonic()
        stopped = service.stop()
    assert stopped
    assert time.monotonic() - started < settings.service.shutdown_deadline_seconds
    assert not service.running


def test_a_replica_without_a_broker_serves_follows_nothing_and_stops(tmp_path: Path) -> None:
    settings = load_settings(
        kafka={"bootstrap_servers": f"127.0.0.1:{free_port()}"},
        http={"port": 0},
        checkpoint={"path": str(tmp_path / "state")},
        service={"shutdown_deadline_seconds": 10.0, "role": "replica"},
    )
    service = build_service(settings)
    assert isinstance(service.runner, StateFollower)
    service.start()
    try:
        assert service.running
        ready = httpx.get(service.url + "/readyz")
        assert ready.status_code == 503
        assert "no model from the state topic events.state" in ready.json()["detail"]
        answer = httpx.post(service.url + "/predict", json={"features": [1.0, 2.0]})
        assert answer.status_code == 200
        metrics = httpx.get(service.url + "/metrics").text
        assert "novikoff_model_age_seconds NaN" in metrics
    finally:
        assert service.stop()
    assert not (tmp_path / "state").exists(), "a replica keeps no checkpoint"
    # Control: a learner with the same settings opens its checkpoint directory.
    build_service(load_settings(checkpoint={"path": str(tmp_path / "state")}, http={"port": 0}))
    assert (tmp_path / "state").exists()
