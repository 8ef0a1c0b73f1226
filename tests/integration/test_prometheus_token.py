"""A real Prometheus scrapes a token-protected ``/metrics`` with ``config/prometheus-token.yml``.

The documented scrape job is used as written except for its target (the app served by this
process) and its token file; a second copy of the job with a wrong token is the control: it is
refused (``up`` 0) and the service counts the refusals.
"""

from __future__ import annotations

import copy
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import CollectorRegistry

from service.http.app import create_app
from service.http.server import HttpServer
from service.observability.metrics import Metrics
from service.settings import TOKENS_ENV_VAR, load_settings
from tests.integration.test_prometheus_scrape import tool
from tests.support.broker import free_port, wait_for_port
from tests.unit.service.engines import PLA_EVENTS, FakeRunner, trained_engine

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TOKEN_CONFIG = ROOT / "config" / "prometheus-token.yml"
METRICS_TOKEN = secrets.token_urlsafe(32)
WRONG_TOKEN = secrets.token_urlsafe(32)
SCRAPE_INTERVAL = "1s"
WAIT_S = 60.0
POLL_S = 0.5
STOP_S = 10.0


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry: CollectorRegistry
) -> Iterator[HttpServer]:
    monkeypatch.setenv(TOKENS_ENV_VAR, f"metrics:{METRICS_TOKEN}")
    settings = load_settings(
        model={"dim": 1}, http={"port": 0, "auth": "token", "open_paths": ["/healthz"]}
    )
    metrics = Metrics(registry)
    engine = trained_engine(settings, PLA_EVENTS, tmp_path / "state", metrics)
    app = create_app(settings, engine, FakeRunner(connected=True), metrics)
    running = HttpServer(app, "127.0.0.1", 0, graceful_timeout_s=1.0)
    running.start()
    try:
        yield running
    finally:
        assert running.stop(STOP_S)


def scrape_config(server: HttpServer, workdir: Path) -> Path:
    """config/prometheus-token.yml pointed at ``server``, plus a copy of its job with a wrong
    token."""
    config: dict[str, Any] = yaml.safe_load(TOKEN_CONFIG.read_text(encoding="utf-8"))
    config["global"]["scrape_interval"] = SCRAPE_INTERVAL
    (job,) = config["scrape_configs"]
    job["static_configs"] = [{"targets": [f"127.0.0.1:{server.port}"]}]
    right, wrong = workdir / "right-token", workdir / "wrong-token"
    right.write_text(METRICS_TOKEN + "\n")
    wrong.write_text(WRONG_TOKEN + "\n")
    job["authorization"]["credentials_file"] = str(right)
    impostor = copy.deepcopy(job)
    impostor["job_name"] = "impostor"
    impostor["authorization"]["credentials_file"] = str(wrong)
    config["scrape_configs"].append(impostor)
    path = workdir / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_documented_config_is_valid() -> None:
    checked = subprocess.run(
        [tool("promtool"), "check", "config", "--syntax-only", str(TOKEN_CONFIG)],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert checked.returncode == 0, (checked.stdout + checked.stderr).decode()


def query(base: str, expr: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{base}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def test_prometheus_scrapes_with_its_token_and_a_wrong_one_is_refused(
    server: HttpServer, registry: CollectorRegistry, tmp_path: Path, artifacts_dir: Path
) -> None:
    assert httpx.get(f"{server.url}/metrics", timeout=STOP_S).status_code == 401
    config = scrape_config(server, tmp_path)
    port = free_port()
    with open(artifacts_dir / "prometheus-token.log", "ab") as log:
        proc = subprocess.Popen(
            [
                tool("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_port("127.0.0.1", port, timeout_s=30)
        deadline = time.monotonic() + WAIT_S
        up: dict[str, str] = {}
        while time.monotonic() < deadline and len(up) < len(("novikoff", "impostor")):
            up = {s["metric"]["job"]: s["value"][1] for s in query(base, "up")}
            time.sleep(POLL_S)
        assert up == {"novikoff": "1", "impostor": "0"}, up
        learned = query(base, 'novikoff_events_learned_total{job="novikoff"}')
        assert [float(s["value"][1]) for s in learned] == [len(PLA_EVENTS)]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    refused = registry.get_sample_value("novikoff_http_auth_failures_total", {"outcome": "invalid"})
    assert refused is not None and refused >= 1, "the impostor's scrapes were counted"
