"""A real Prometheus scrapes a real novikoff: the stored values are the ones ``/stats`` reports.

Debian's ``prometheus`` and ``promtool`` (installed by ``scripts/system-deps.sh``) run against the
service started by ``novikoff serve`` after ``novikoff produce`` streamed through a real broker.
Every query of the provisioned Grafana dashboard is also evaluated by this Prometheus, so a
panel whose PromQL is wrong fails here rather than on a user's screen.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from service.observability.metrics import MODEL_AGE_METRIC
from tests.support.broker import free_port, wait_for_port
from tests.support.running_service import RunningService, Stream, produce

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "config" / "grafana" / "dashboards" / "novikoff.json"
REPLICA_ONLY_QUERIES = (MODEL_AGE_METRIC,)
"""Dashboard queries of metrics only a read replica exports (a learner has none of them)."""
PROMETHEUS_CONFIG = ROOT / "config" / "prometheus.yml"
ALERTS = ROOT / "config" / "prometheus-alerts.yml"

SCRAPE_INTERVAL = "1s"
RATE_WINDOW = "30s"
"""Stands in for Grafana's ``$__rate_interval``: several 1 s scrapes."""
SCRAPE_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.5

STREAM = Stream(dim=4, seed=23, count=2_000, noise=0.05, malformed=0.02)


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path is not None, f"{name} is not installed (`make system-deps` installs it)"
    return path


@pytest.fixture(scope="module")
def service(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory, artifacts_dir: Path
) -> Iterator[tuple[RunningService, dict[str, Any]]]:
    """novikoff after a drained stream, with its final ``/stats``."""
    workdir = tmp_path_factory.mktemp("novikoff")
    topic = f"prom-{workdir.name}"
    log = artifacts_dir / "prometheus-scrape-novikoff.log"
    with RunningService(workdir, kafka_bootstrap, topic, STREAM, log) as running:
        produce(kafka_bootstrap, topic, STREAM, log)
        stats = running.wait_drained(STREAM.count)
        yield running, stats


@pytest.fixture(scope="module")
def prometheus(
    service: tuple[RunningService, dict[str, Any]],
    tmp_path_factory: pytest.TempPathFactory,
    artifacts_dir: Path,
) -> Iterator[str]:
    """A Prometheus scraping the service every second; yields its base URL."""
    binary = tool("prometheus")
    running, _ = service
    workdir = tmp_path_factory.mktemp("prometheus")
    config = workdir / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": "1s"},
                "scrape_configs": [
                    {
                        "job_name": "novikoff",
                        "static_configs": [{"targets": [f"127.0.0.1:{running.port}"]}],
                    }
                ],
            }
        )
    )
    port = free_port()
    with open(artifacts_dir / "prometheus.log", "ab") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_port("127.0.0.1", port, timeout_s=30)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=10)
    body = response.json()
    assert body["status"] == "success", f"{expr}: {body}"
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def wait_for_series(prometheus: str, expr: str, samples: int = 1) -> list[dict[str, Any]]:
    """The instant result of ``expr`` once it has ``samples`` scrapes behind it."""
    deadline = time.monotonic() + SCRAPE_TIMEOUT_S
    while time.monotonic() < deadline:
        if query(prometheus, f"count_over_time(({expr})[1m:1s]) >= {samples}"):
            return query(prometheus, expr)
        time.sleep(POLL_INTERVAL_S)
    raise TimeoutError(f"Prometheus has no {samples} samples of {expr} after {SCRAPE_TIMEOUT_S}s")


def value_of(result: list[dict[str, Any]], **labels: str) -> float:
    matching = [
        sample for sample in result if all(sample["metric"].get(k) == v for k, v in labels.items())
    ]
    assert len(matching) == 1, (labels, result)
    return float(matching[0]["value"][1])


def test_prometheus_stores_what_stats_reports(
    service: tuple[RunningService, dict[str, Any]], prometheus: str
) -> None:
    running, stats = service
    at_rest = ("seen", "mistakes", "bounds", "invalid", "radius", "model_version")
    now = running.stats()
    assert {k: stats[k] for k in at_rest} == {k: now[k] for k in at_rest}, "must be at rest"
    assert stats["mistakes"] > 0
    mistakes = wait_for_series(prometheus, 'novikoff_mistakes_total{job="novikoff"}')
    assert value_of(mistakes) == stats["mistakes"]
    learned = query(prometheus, "novikoff_events_learned_total")
    assert value_of(learned) == stats["seen"]
    (reference,) = stats["bounds"]
    for metric, key in [
        ("novikoff_bound", "bound"),
        ("novikoff_bound_gamma", "gamma"),
        ("novikoff_bound_k", "k"),
    ]:
        stored = value_of(query(prometheus, metric), reference=reference["name"])
        assert stored == pytest.approx(reference[key], rel=1e-12), metric
    assert value_of(query(prometheus, "novikoff_radius")) == pytest.approx(stats["radius"])
    invalid = query(prometheus, "novikoff_invalid_events_total")
    assert stats["invalid"], "the stream has malformed records"
    for reason, count in stats["invalid"].items():
        assert value_of(invalid, reason=reason) == count


def test_every_grafana_query_evaluates(
    service: tuple[RunningService, dict[str, Any]], prometheus: str
) -> None:
    wait_for_series(prometheus, "novikoff_mistakes_total", samples=5)
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    empty = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", RATE_WINDOW)
            result = query(prometheus, expr)  # every query must evaluate
            if not result:
                empty.append(expr)
            for sample in result:
                assert not math.isinf(float(sample["value"][1])), (panel["title"], expr)
    # Every panel has data once a stream with bad records has run, except the replica panels: this
    # test scrapes a learner, and only a read replica exports those metrics
    # (tests/unit/service/test_replica.py checks their values).
    assert empty == list(REPLICA_ONLY_QUERIES)


def test_promtool_finds_the_exposition_clean(
    service: tuple[RunningService, dict[str, Any]],
) -> None:
    promtool = tool("promtool")
    running, _ = service
    exposition = running.get("/metrics")
    assert exposition.status_code == 200
    checked = subprocess.run(
        [promtool, "check", "metrics"],
        input=exposition.content,
        capture_output=True,
        timeout=30,
        check=False,
    )
    report = (checked.stdout + checked.stderr).decode()
    assert checked.returncode == 0, report
    assert report.strip() == "", report


def test_compose_prometheus_config_is_valid(tmp_path: Path) -> None:
    """``promtool check config`` on config/prometheus.yml with its rule file where it mounts."""
    promtool = tool("promtool")
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text(encoding="utf-8"))
    local_rules = tmp_path / "alerts.yml"
    shutil.copy(ALERTS, local_rules)
    config["rule_files"] = [str(local_rules)]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    checked = subprocess.run(
        [promtool, "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert checked.returncode == 0, (checked.stdout + checked.stderr).decode()
