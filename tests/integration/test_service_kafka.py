"""``novikoff serve`` as a real subprocess against a real broker: what it learns is exact.

Each test writes a temporary config, publishes events with kafka-python, runs the service as a
subprocess and reads the model, the stats and the metrics over HTTP. The expected numbers come
from the offline learner run on the same events in the same order.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from kafka import KafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from service.cli.demo import TANSU_TRANSACTIONS
from service.cli.synthetic import SyntheticStream
from service.model import build_learner, build_tracker
from service.settings import load_settings
from service.topics import ensure_topics
from tests.support.broker import free_port
from tests.support.running_service import group_timing_toml

pytestmark = pytest.mark.integration

READY_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
POLL_S = 0.1


def config_text(
    bootstrap: str,
    topic: str,
    port: int,
    state: Path,
    extra: str,
    checkpoint_every: int,
    transactions: bool | None = None,
) -> str:
    """The service's config; ``transactions`` is left to the default unless given."""
    setting = "" if transactions is None else f"transactions = {str(transactions).lower()}"
    return f"""
[kafka]
bootstrap_servers = "{bootstrap}"
topic = "{topic}"
group_id = "{topic}-group"
{setting}
{group_timing_toml()}
[http]
port = {port}

[checkpoint]
path = "{state}"
every_events = {checkpoint_every}
every_seconds = 600.0

{extra}
"""


@dataclass
class ServeProcess:
    """``novikoff serve --config FILE`` in a subprocess, with its log in a file."""

    config: Path
    port: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServeProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NOVIKOFF_")}
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "service", "serve", "--config", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        self.wait_until(lambda: self.get("/readyz").status_code == 200, READY_TIMEOUT_S, "ready")
        return self

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, timeout=5.0)

    def json(self, path: str) -> Any:
        response = self.get(path)
        response.raise_for_status()
        return response.json()

    def wait_until(self, condition: Any, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"novikoff serve exited ({self.proc.returncode}):\n{self.tail()}"
                )
            try:
                if condition():
                    return
            except httpx.HTTPError:
                pass
            time.sleep(POLL_S)
        raise AssertionError(f"not {what} after {timeout_s}s:\n{self.tail()}")

    def wait_seen(self, count: int, timeout_s: float = DRAIN_TIMEOUT_S) -> dict[str, Any]:
        self.wait_until(lambda: self.json("/stats")["seen"] >= count, timeout_s, f"seen {count}")
        stats: dict[str, Any] = self.json("/stats")
        return stats

    def terminate(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=STOP_TIMEOUT_S)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


BOTH_BROKERS = pytest.mark.parametrize("bootstrap", ["apache", "tansu"], indirect=True)
"""The smoke subset that also runs on the demo's embedded Tansu, so that ``make run``'s broker
stays covered: one stream equal to the offline learner and one SIGKILL restart."""


@pytest.fixture
def bootstrap(request: pytest.FixtureRequest) -> str:
    """The broker ``serve`` uses: Apache Kafka unless a test asks for ``tansu`` too."""
    kind = getattr(request, "param", "apache")
    fixture = "tansu_bootstrap" if kind == "tansu" else "kafka_bootstrap"
    value: str = request.getfixturevalue(fixture)
    return value


@pytest.fixture
def serve(
    tmp_path: Path, bootstrap: str, topic_name: str, request: pytest.FixtureRequest
) -> Iterator[Any]:
    """Start ``novikoff serve`` with the given extra config; every process is killed at the end.

    On Tansu it runs without transactions, as the demo does there (``TANSU_TRANSACTIONS``).
    """
    processes: list[ServeProcess] = []
    port = free_port()
    state = tmp_path / "state"
    callspec = getattr(request.node, "callspec", None)
    on_tansu = callspec is not None and callspec.params.get("bootstrap") == "tansu"
    transactions = TANSU_TRANSACTIONS if on_tansu else None

    def start(extra: str = "", checkpoint_every: int = 10_000) -> ServeProcess:
        config = tmp_path / "novikoff.toml"
        text = config_text(
            bootstrap, topic_name, port, state, extra, checkpoint_every, transactions
        )
        config.write_text(text)
        process = ServeProcess(config, port, tmp_path / f"serve-{len(processes)}.log")
        processes.append(process)
        return process.start()

    yield start
    for process in processes:
        process.kill()


def publish(bootstrap: str, topic: str, values: list[bytes], pause_every: int = 0) -> None:
    """Publish ``values`` in order; ``pause_every`` paces it (10 ms pause per that many)."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        for index, value in enumerate(values, start=1):
            producer.send(topic, value=value)
            if pause_every and index % pause_every == 0:
                producer.flush()
                time.sleep(0.01)
        producer.flush()
    finally:
        producer.close()


def metric_values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def reference_toml(name: str, weights: list[float]) -> str:
    return f'[[bound.references]]\nname = "{name}"\nweights = [{", ".join(map(repr, weights))}]\n'


def test_the_pla_notes_two_events(serve: Any, bootstrap: str, topic_name: str) -> None:
    settings = load_settings(kafka={"bootstrap_servers": bootstrap})
    ensure_topics(settings.kafka, [topic_name, f"{topic_name}.dlq"])
    publish(
        bootstrap,
        topic_name,
        [b'{"features": [2], "label": -1}', b'{"features": [-0.25], "label": 1}'],
    )
    service = serve("[model]\ndim = 1\n" + reference_toml("u", [0.0, -1.0]))
    stats = service.wait_seen(2)
    model = service.json("/model")
    assert model["weights"]["last"] == [0.0, -2.25]
    assert stats["mistakes"] == 2
    assert stats["seen"] == 2
    assert service.terminate() == 0


STREAM = SyntheticStream(dim=10, margin=0.05, noise=0.05, seed=7)
STREAM_EVENTS = 20_000


def offline_expectation(count: int) -> dict[str, Any]:
    """What the offline learner makes of the first ``count`` events of STREAM."""
    settings = load_settings(
        model={"dim": STREAM.dim},
        bound={"references": [{"name": "u", "weights": STREAM.reference.tolist()}]},
    )
    learner = build_learner(settings.model)
    tracker = build_tracker(settings, learner.encoder.dimension)
    X, y = STREAM.arrays(count)
    X = STREAM.augment(X)
    result = learner.learn_batch(X, y)
    tracker.observe_batch(X, y, result)
    snapshot = learner.snapshot()
    status = tracker.status()[0]
    return {
        "last": snapshot.weights.tolist(),
        "averaged": snapshot.averaged_weights.tolist(),
        "mistakes": learner.n_updates,
        "prequential": learner.prequential_mistakes,
        "bound": status.bound,
        "gamma": status.gamma,
        "k": status.k,
        "radius": tracker.radius,
    }


def stream_config(extra: str = "") -> str:
    return f"[model]\ndim = {STREAM.dim}\n" + reference_toml("u", STREAM.reference.tolist()) + extra


def assert_served_model_is(service: ServeProcess, expected: dict[str, Any]) -> None:
    stats = service.json("/stats")
    model = service.json("/model")
    assert model["weights"]["last"] == expected["last"]
    assert model["weights"]["averaged"] == expected["averaged"]
    assert stats["mistakes"] == expected["mistakes"]
    assert stats["prequential_mistakes"] == expected["prequential"]
    assert stats["radius"] == expected["radius"]
    bound = stats["bounds"][0]
    assert (bound["name"], bound["bound"], bound["gamma"], bound["k"]) == (
        "u",
        expected["bound"],
        expected["gamma"],
        expected["k"],
    )


@BOTH_BROKERS
def test_a_noisy_stream_is_learned_exactly_as_offline(
    serve: Any, bootstrap: str, topic_name: str
) -> None:
    settings = load_settings(kafka={"bootstrap_servers": bootstrap})
    ensure_topics(settings.kafka, [topic_name, f"{topic_name}.dlq"], partitions=1)
    publish(bootstrap, topic_name, [value for _, value in STREAM.records(STREAM_EVENTS)])
    service = serve(stream_config())
    service.wait_seen(STREAM_EVENTS)
    expected = offline_expectation(STREAM_EVENTS)
    assert_served_model_is(service, expected)
    # /metrics shows the same numbers as /stats.
    service.wait_until(
        lambda: (
            metric_values(service.get("/metrics").text).get(("novikoff_events_learned_total", ()))
            == STREAM_EVENTS
        ),
        10.0,
        "metrics caught up",
    )
    exposition = service.get("/metrics").text
    metrics = metric_values(exposition)
    assert metrics[("novikoff_mistakes_total", ())] == expected["mistakes"]
    assert metrics[("novikoff_bound", (("reference", "u"),))] == expected["bound"]
    assert metrics[("novikoff_bound_gamma", (("reference", "u"),))] == expected["gamma"]
    assert metrics[("novikoff_radius", ())] == expected["radius"]
    for predictor, count in expected["prequential"].items():
        key = ("novikoff_prequential_mistakes_total", (("predictor", predictor),))
        assert metrics[key] == count
    checked = subprocess.run(
        ["promtool", "check", "metrics"],
        input=exposition.encode(),
        capture_output=True,
        check=False,
    )
    assert checked.returncode == 0 and not checked.stdout + checked.stderr, checked
    assert service.terminate() == 0


@BOTH_BROKERS
def test_sigkill_mid_stream_then_restart_is_bit_identical(
    serve: Any, bootstrap: str, topic_name: str
) -> None:
    settings = load_settings(kafka={"bootstrap_servers": bootstrap})
    ensure_topics(settings.kafka, [topic_name, f"{topic_name}.dlq"], partitions=1)
    values = [value for _, value in STREAM.records(STREAM_EVENTS)]
    # Checkpoints every 1,500 events, so the kill lands between checkpoints with events applied
    # in memory that the restart must re-apply exactly once.
    # Only the first half is published before the kill, so the kill always lands mid-stream;
    # the second half goes out while the restarted service runs.
    half = STREAM_EVENTS // 2
    first = serve(stream_config(), checkpoint_every=1_500)
    producer = threading.Thread(target=publish, args=(bootstrap, topic_name, values[:half], 200))
    producer.start()
    at_kill = first.wait_seen(STREAM_EVENTS // 3)["seen"]
    first.kill()
    producer.join()
    assert at_kill <= half < STREAM_EVENTS
    killed_at = first.tail()
    second = serve(stream_config(), checkpoint_every=1_500)
    publish(bootstrap, topic_name, values[half:], 200)
    stats = second.wait_seen(STREAM_EVENTS)
    assert stats["seen"] == STREAM_EVENTS, killed_at
    time.sleep(1.0)  # nothing more may arrive: each event is applied exactly once
    assert second.json("/stats")["seen"] == STREAM_EVENTS
    assert_served_model_is(second, offline_expectation(STREAM_EVENTS))
    assert second.terminate() == 0


def test_sigterm_writes_a_final_checkpoint(
    serve: Any, bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    settings = load_settings(kafka={"bootstrap_servers": bootstrap})
    ensure_topics(settings.kafka, [topic_name, f"{topic_name}.dlq"], partitions=1)
    count = 3_000
    publish(bootstrap, topic_name, [value for _, value in STREAM.records(count)])
    first = serve(stream_config(), checkpoint_every=1_000_000)
    first.wait_seen(count)
    started = time.monotonic()
    assert first.terminate() == 0
    assert time.monotonic() - started < settings.service.shutdown_deadline_seconds
    assert list((tmp_path / "state").glob("checkpoint-*.ckpt")), first.tail()
    second = serve(stream_config(), checkpoint_every=1_000_000)
    stats = second.json("/stats")
    assert stats["seen"] == count
    assert_served_model_is(second, offline_expectation(count))
    assert np.isfinite(stats["radius"])
    assert second.terminate() == 0
