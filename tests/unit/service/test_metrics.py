"""Metrics: novikoff_* on the registry passed in, values equal to /stats, clean exposition."""

from __future__ import annotations

import math
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from prometheus_client import REGISTRY, CollectorRegistry

from consumers.decoding.events import Record
from consumers.faults import FAULT_KINDS, ConsumerFault, FaultKind, unknown_topic
from consumers.state.checkpoint import CheckpointStore
from service.observability.metrics import Metrics
from service.settings import load_settings
from tests.unit.service.engines import PLA_EVENTS, trained_engine


def stats(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "seen": 10,
        "mistakes": 4,
        "prequential_mistakes": {"last": 4, "averaged": 3, "voted": 2},
        "radius": 1.5,
        "bounds": [
            {
                "name": "u",
                "gamma": 0.25,
                "k": 1.5,
                "bound": 63.0,
                "novikoff": None,
                "min_margin": -0.1,
                "violated": False,
            }
        ],
        "margin_estimate": {"value": 0.05, "window": 1000, "note": "diagnostic"},
        "invalid": {"not_json": 2, "non_finite": 1},
        "partitions": [{"topic": "events", "partition": 0, "next_offset": 13, "lag": 7}],
        "lag": 7,
        "model_version": 4,
        "ready": True,
    }
    base.update(changes)
    return base


@dataclass(frozen=True)
class FakePredictor:
    weights: NDArray[np.float64] = field(default_factory=lambda: np.array([3.0, 4.0]))
    averaged_weights: NDArray[np.float64] = field(default_factory=lambda: np.array([0.0, 0.5]))


@dataclass(frozen=True)
class FakeSnapshot:
    stats: dict[str, Any]
    predictor: FakePredictor = field(default_factory=FakePredictor)


def following(registry: CollectorRegistry, **changes: Any) -> Metrics:
    """Metrics on ``registry`` that export a snapshot whose ``/stats`` is ``stats(**changes)``."""
    metrics = Metrics(registry)
    snapshot = FakeSnapshot(stats(**changes))
    metrics.follow(lambda: snapshot)
    return metrics


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def test_metrics_use_the_registry_passed_in(registry: CollectorRegistry) -> None:
    following(registry)
    assert registry.get_sample_value("novikoff_events_learned_total") == 10
    assert REGISTRY.get_sample_value("novikoff_events_learned_total") is None


def test_two_instances_coexist() -> None:
    Metrics(CollectorRegistry())
    Metrics(CollectorRegistry())


def test_values_follow_stats(registry: CollectorRegistry) -> None:
    following(registry).set_ready(True)
    value = registry.get_sample_value
    assert value("novikoff_mistakes_total") == 4
    assert value("novikoff_prequential_mistakes_total", {"predictor": "averaged"}) == 3
    assert value("novikoff_invalid_events_total", {"reason": "not_json"}) == 2
    assert value("novikoff_bound", {"reference": "u"}) == 63.0
    assert value("novikoff_bound_gamma", {"reference": "u"}) == 0.25
    assert value("novikoff_bound_k", {"reference": "u"}) == 1.5
    assert value("novikoff_bound_violated", {"reference": "u"}) == 0
    separable = value("novikoff_separable_bound", {"reference": "u"})
    assert separable is not None and math.isnan(separable)
    assert value("novikoff_radius") == 1.5
    assert value("novikoff_model_version") == 4
    assert value("novikoff_consumer_lag", {"topic": "events", "partition": "0"}) == 7
    assert value("novikoff_ready") == 1
    assert value("novikoff_margin_estimate") == 0.05
    assert value("novikoff_weight_norm", {"predictor": "last"}) == 5.0
    assert value("novikoff_weight_norm", {"predictor": "averaged"}) == 0.5


def test_nothing_is_exported_before_there_is_a_snapshot(registry: CollectorRegistry) -> None:
    metrics = Metrics(registry)
    assert registry.get_sample_value("novikoff_events_learned_total") is None
    # Control: the same registry exports the values once the metrics follow a snapshot.
    snapshot = FakeSnapshot(stats())
    metrics.follow(lambda: snapshot)
    assert registry.get_sample_value("novikoff_events_learned_total") == 10


def test_every_scrape_reads_the_current_snapshot(registry: CollectorRegistry) -> None:
    metrics = Metrics(registry)
    current = [FakeSnapshot(stats())]
    metrics.follow(lambda: current[-1])
    assert registry.get_sample_value("novikoff_events_learned_total") == 10
    current.append(
        FakeSnapshot(stats(seen=25, mistakes=6, invalid={"not_json": 3, "non_finite": 1}))
    )
    assert registry.get_sample_value("novikoff_events_learned_total") == 25
    assert registry.get_sample_value("novikoff_mistakes_total") == 6
    assert registry.get_sample_value("novikoff_invalid_events_total", {"reason": "not_json"}) == 3


def test_revoked_partitions_lose_their_lag_series(registry: CollectorRegistry) -> None:
    metrics = Metrics(registry)
    two = [
        {"topic": "events", "partition": 0, "lag": 1},
        {"topic": "events", "partition": 1, "lag": 2},
    ]
    current = [FakeSnapshot(stats(partitions=two))]
    metrics.follow(lambda: current[-1])
    labels = {"topic": "events", "partition": "1"}
    assert registry.get_sample_value("novikoff_consumer_lag", labels) == 2
    current.append(FakeSnapshot(stats(partitions=two[:1])))
    assert registry.get_sample_value("novikoff_consumer_lag", labels) is None


def test_batch_and_request_histograms(registry: CollectorRegistry) -> None:
    metrics = Metrics(registry)
    metrics.observe_batch(0.002, 500)
    metrics.observe_request("/predict", "POST", 200, 0.0003)
    metrics.observe_request("/predict", "BREW", 405, 0.0003)
    assert registry.get_sample_value("novikoff_batch_processing_seconds_count") == 1
    assert registry.get_sample_value("novikoff_batch_events_total") == 500
    labels = {"route": "/predict", "method": "POST", "status": "200"}
    assert registry.get_sample_value("novikoff_http_request_duration_seconds_count", labels) == 1
    other = {"route": "/predict", "method": "other", "status": "405"}
    assert registry.get_sample_value("novikoff_http_request_duration_seconds_count", other) == 1


def test_every_metric_is_named_novikoff_and_counters_end_in_total(
    registry: CollectorRegistry,
) -> None:
    following(registry)
    for family in registry.collect():
        assert family.name.startswith("novikoff_")
        for sample in family.samples:
            if family.type == "counter" and not sample.name.endswith("_created"):
                assert sample.name.endswith("_total")
            assert not {"id", "key", "offset"} & set(sample.labels)


def test_promtool_accepts_the_exposition(registry: CollectorRegistry) -> None:
    assert shutil.which("promtool"), "promtool is missing: `make test` installs it (system-deps)"
    metrics = following(registry)
    metrics.observe_batch(0.01, 10)
    metrics.observe_request("/stats", "GET", 200, 0.001)
    result = subprocess.run(
        ["promtool", "check", "metrics"],
        input=metrics.exposition(),
        capture_output=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == b"" and result.stderr.strip() == b""


def test_the_engine_observer_mirrors_the_snapshot(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    settings = load_settings(
        model={"dim": 1}, bound={"references": [{"name": "u", "weights": [0.0, -1.0]}]}
    )
    events = [*PLA_EVENTS, b"not json", {"features": [1.0, 2.0], "label": 1}]
    engine = trained_engine(settings, events, tmp_path, metrics)
    stats = engine.snapshot.stats
    value = registry.get_sample_value
    assert value("novikoff_events_learned_total") == stats["seen"] == 2
    assert value("novikoff_mistakes_total") == stats["mistakes"] == 2
    assert value("novikoff_invalid_events_total", {"reason": "not_json"}) == 1
    assert value("novikoff_invalid_events_total", {"reason": "wrong_dimension"}) == 1
    for predictor, count in stats["prequential_mistakes"].items():
        assert value("novikoff_prequential_mistakes_total", {"predictor": predictor}) == count
    assert value("novikoff_bound", {"reference": "u"}) == stats["bounds"][0]["bound"]
    assert value("novikoff_radius") == stats["radius"]
    assert value("novikoff_weight_norm", {"predictor": "last"}) == 2.25
    assert value("novikoff_batch_processing_seconds_count") == 1
    assert value("novikoff_batch_events_total") == 4


def test_the_weight_norms_follow_the_newest_snapshot(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    engine = trained_engine(load_settings(model={"dim": 1}), PLA_EVENTS, tmp_path, metrics)
    value = registry.get_sample_value
    # After the PLA events: w = (0, -2.25); w-bar = mean of (-1, -2) and (0, -2.25).
    assert value("novikoff_weight_norm", {"predictor": "last"}) == 2.25
    averaged = engine.snapshot.predictor.averaged_weights
    assert averaged.tolist() == [-0.5, -2.125]
    assert value("novikoff_weight_norm", {"predictor": "averaged"}) == math.hypot(-0.5, -2.125)
    # A third event, a mistake (w . x = -2.25 * 4 < 0 for label 1): w becomes (1, 1.75).
    engine.apply(
        engine.decoder.decode_batch([Record("events", 0, 2, b'{"features": [4], "label": 1}')])
    )
    assert engine.snapshot.predictor.weights.tolist() == [1.0, 1.75]
    assert value("novikoff_weight_norm", {"predictor": "last"}) == math.hypot(1.0, 1.75)


def test_checkpoints_are_counted(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    engine = trained_engine(load_settings(model={"dim": 1}), PLA_EVENTS, tmp_path, metrics)
    engine.checkpoint(CheckpointStore(tmp_path / "state"))
    assert registry.get_sample_value("novikoff_checkpoints_total", {"outcome": "ok"}) == 1
    size = registry.get_sample_value("novikoff_checkpoint_size_bytes")
    assert size is not None and size > 0
    assert registry.get_sample_value("novikoff_checkpoint_duration_seconds_count") == 1


def test_consumer_errors_are_counted_by_kind(registry: CollectorRegistry) -> None:
    metrics = Metrics(registry)
    name = "novikoff_consumer_errors_total"
    # Every kind is exported from the start, at zero.
    assert {kind: registry.get_sample_value(name, {"kind": kind}) for kind in FAULT_KINDS} == {
        "codec": 0.0,
        "authorization": 0.0,
        "unknown_topic": 0.0,
        "transient": 0.0,
    }
    metrics.on_consumer_error(unknown_topic("events", "127.0.0.1:9092", 10.0))
    metrics.on_consumer_error(ConsumerFault(FaultKind.TRANSIENT, "consumer error: reset"))
    metrics.on_consumer_error(ConsumerFault(FaultKind.TRANSIENT, "consumer error: reset"))
    assert registry.get_sample_value(name, {"kind": "unknown_topic"}) == 1.0
    assert registry.get_sample_value(name, {"kind": "transient"}) == 2.0
    assert registry.get_sample_value(name, {"kind": "codec"}) == 0.0


def test_the_distributed_bound_follows_the_mixing_section(registry: CollectorRegistry) -> None:
    bound = {"name": "u", "total_bound": 80.0, "bound": 20.0, "mixed_mistakes": 3.5}
    following(registry, mixing={"round": 7, "bound": [{**bound, "k_mixed": 0.25}]})
    assert registry.get_sample_value("novikoff_mixing_round") == 7
    labels = {"reference": "u"}
    assert registry.get_sample_value("novikoff_distributed_bound", labels) == 80.0
    assert registry.get_sample_value("novikoff_distributed_mixed_bound", labels) == 20.0
    assert registry.get_sample_value("novikoff_distributed_mixed_mistakes", labels) == 3.5
    assert registry.get_sample_value("novikoff_distributed_bound_k", labels) == 0.25
    assert registry.get_sample_value("novikoff_distributed_bound_violated", labels) == 0
    # Control: without mixing there is no sample.
    other = CollectorRegistry()
    following(other)
    assert other.get_sample_value("novikoff_mixing_round") is None
    assert other.get_sample_value("novikoff_distributed_bound", labels) is None
