"""Soak (``make soak``; not in ``make test``): full-rate production and 64 prediction clients for
60 s against one ``novikoff serve``.

The 64 clients are 64 keep-alive connections of ``wrk`` (a C load generator; ``make bench-deps``
installs it): a Python client would be the bottleneck and measure itself.

Must hold:

* no prediction error (and some predictions made);
* the ledger: after production stops the consumer catches up (``/stats`` lag 0) and, per
  partition, the service learned exactly as many events as the broker acknowledged and applied
  exactly the acknowledged offsets ``[0, acknowledged)`` (one range: none applied twice, none
  skipped); the dead-letter topic is empty, so learned + dead-lettered = produced;
* the peak resident memory after a 20 s warm-up stays under 110% of its value at warm-up;
* the set of Prometheus series is the same at warm-up and at the end (no label grows with the
  traffic).

How long the catch-up took, the rates and the latencies are recorded, not asserted (speed is
measured in ``bench/``).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.bench_predict import LoadResult, run_wrk, wrk_script
from service.settings import load_settings
from service.topics import ensure_topics
from tests.support.faults import ConfiguredStream, FaultyService
from tests.support.ledger import read_dead_letters, record_figures
from tests.support.load import FullRateProducer

pytestmark = [pytest.mark.integration, pytest.mark.soak]

CLIENTS = 64
LOAD_S = 60.0
WARM_UP_S = 20.0
SAMPLE_S = 1.0
MAX_RSS_GROWTH = 0.10
PARTITIONS = 3
DIM = 10
CATCH_UP_TIMEOUT_S = 300.0
PREDICT_BODY = b'{"features": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]}'


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


def series(text: str) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_full_rate_production_and_64_prediction_clients_for_a_minute(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path, artifacts_dir: Path
) -> None:
    settings = load_settings(kafka={"bootstrap_servers": kafka_bootstrap})
    ensure_topics(settings.kafka, [topic_name], partitions=PARTITIONS)
    ensure_topics(settings.kafka, [f"{topic_name}.dlq"])
    stream = ConfiguredStream(dim=DIM, seed=13, margin=0.05, noise=0.05)
    service = FaultyService(
        workdir=tmp_path,
        bootstrap=kafka_bootstrap,
        topic=topic_name,
        stream=stream,
        log_path=tmp_path / "serve.log",
    )
    producer = FullRateProducer(kafka_bootstrap, topic_name, stream.synthetic(), PARTITIONS)
    results: list[LoadResult] = []
    try:
        service.start()
        service.get("/metrics")  # every route the test itself uses exists before the baseline
        service.stats()
        script = wrk_script(tmp_path, "predict", PREDICT_BODY)
        clients = threading.Thread(
            target=lambda: results.append(
                run_wrk(f"{service.base_url}/predict", script, CLIENTS, int(LOAD_S))
            )
        )
        started = time.monotonic()
        clients.start()
        producer.start()
        rss: list[tuple[float, int]] = []
        baseline_series = None
        while time.monotonic() - started < LOAD_S:
            elapsed = time.monotonic() - started
            rss.append((elapsed, rss_bytes(service.pid)))
            if baseline_series is None and elapsed >= WARM_UP_S:
                baseline_series = series(service.get("/metrics").text)
                service.stats()
            time.sleep(SAMPLE_S)
        acknowledged = producer.stop()
        produced_s = time.monotonic() - started
        clients.join(LOAD_S)
        assert results, "wrk did not finish"
        report = results[0]
        produced = sum(acknowledged.values())
        stats = service.wait_for(
            "caught up",
            lambda s: s["seen"] >= produced and s["lag"] == 0 and s,
            CATCH_UP_TIMEOUT_S,
            poll_s=0.5,
        )
        caught_up_s = time.monotonic() - started - produced_s
        final_rss = rss_bytes(service.pid)
        final_series = series(service.get("/metrics").text)

        assert report.errors == 0, report
        assert report.requests > 0
        assert stats["seen"] == produced and stats["invalid"] == {}
        assert len(stats["partitions"]) == PARTITIONS, stats["partitions"]
        for progress in stats["partitions"]:
            count = acknowledged[progress["partition"]]
            assert progress["learned"] == count and progress["rejected"] == 0, progress
            assert progress["applied"] == [[0, count]], progress
        dead_letters = read_dead_letters(kafka_bootstrap, f"{topic_name}.dlq", 0)
        assert dead_letters == [], dead_letters[:3]
        warm = [value for t, value in rss if t >= WARM_UP_S]
        baseline_rss = warm[0]
        peak_rss = max([*warm, final_rss])
        assert peak_rss < baseline_rss * (1 + MAX_RSS_GROWTH), (baseline_rss, peak_rss)
        assert baseline_series is not None
        assert final_series == baseline_series, final_series ^ baseline_series
        record_figures(
            artifacts_dir,
            "soak",
            seconds=LOAD_S,
            clients=CLIENTS,
            predictions=report.requests,
            predictions_per_s=round(report.requests_per_s),
            predict_p50_ms=report.p50_ms,
            predict_p99_ms=report.p99_ms,
            prediction_errors=report.errors,
            produced=produced,
            produced_per_s=round(produced / produced_s),
            caught_up_after_s=round(caught_up_s, 1),
            learned=stats["seen"],
            dead_lettered=len(dead_letters),
            missing=produced - stats["seen"],
            rss_after_warm_up_mb=round(baseline_rss / 2**20, 1),
            rss_peak_mb=round(peak_rss / 2**20, 1),
            rss_growth_pct=round(100 * (peak_rss / baseline_rss - 1), 2),
            metric_series=len(final_series),
        )
    finally:
        producer.stop()
        service.stop()
