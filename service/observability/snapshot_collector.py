"""The learning metrics, read from the model's current snapshot at scrape time.

prometheus/client_python's idiom for values owned elsewhere: a custom collector. The engine (or a
replica's model follower) owns the counts; :class:`SnapshotCollector` turns the snapshot that is
current when Prometheus scrapes into metric families, so ``/metrics`` and ``/stats`` show the same
numbers by construction and nothing is pushed per batch. Counters are the snapshot's totals, so
after a restart from a checkpoint they continue from the restored values. A ``None`` (undefined,
e.g. no bound yet) is exported as NaN for gauges and left out for counters.

Labels carry only a few values each: a reference name, a predictor, a reason code, a partition.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

REFERENCE_GAUGES = (
    (
        "bound",
        "novikoff_bound",
        "Mistake bound (R/gamma)^2 + k(1 + 2R/gamma) for a reference separator.",
    ),
    (
        "novikoff",
        "novikoff_separable_bound",
        "Novikoff's separable-case bound (R/gamma_min)^2; NaN once a margin is <= 0.",
    ),
    (
        "gamma",
        "novikoff_bound_gamma",
        "The gamma that minimises the bound for a reference separator.",
    ),
    (
        "k",
        "novikoff_bound_k",
        "Events whose margin under the reference is below the minimising gamma (k).",
    ),
    (
        "min_margin",
        "novikoff_reference_min_margin",
        "Smallest normalised margin y * (u . x) / |u| of the reference separator so far.",
    ),
)
"""(``/stats`` bound entry key, metric name, help) of the per-reference gauges."""

DISTRIBUTED_GAUGES = (
    (
        "total_bound",
        "novikoff_distributed_bound",
        "Mixing mode: the distributed (IPM) bound on the mistakes of all shards, P * bound.",
    ),
    (
        "bound",
        "novikoff_distributed_mixed_bound",
        "Mixing mode: the distributed bound on the mixed mistakes M~ (mean over the shards).",
    ),
    (
        "mixed_mistakes",
        "novikoff_distributed_mixed_mistakes",
        "Mixing mode: the mixed mistakes M~, the shards' mistakes summed with weights 1/P.",
    ),
    (
        "k_mixed",
        "novikoff_distributed_bound_k",
        "Mixing mode: K~, the shards' events below the minimising gamma, weights 1/P.",
    ),
)
"""(``/stats`` ``mixing.bound`` entry key, metric name, help) of the distributed bound's gauges."""


class WeightsView(Protocol):
    """The weights a snapshot's predictor exposes (``learning.Predictor``)."""

    @property
    def weights(self) -> NDArray[np.float64]: ...

    @property
    def averaged_weights(self) -> NDArray[np.float64]: ...


class Snapshot(Protocol):
    """What the collector reads: ``consumers.reports.EngineSnapshot`` or an equivalent."""

    @property
    def stats(self) -> Mapping[str, Any]: ...

    @property
    def predictor(self) -> WeightsView: ...


class SnapshotCollector(Collector):
    """Export the learning metrics of the snapshot ``source`` returns at each scrape.

    Parameters
    ----------
    source
        Returns the current snapshot, or ``None`` while there is none (only the metric families,
        without samples, are exported then).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> import numpy as np
    >>> from prometheus_client import CollectorRegistry
    >>> weights = np.array([3.0, 4.0])
    >>> snapshot = SimpleNamespace(
    ...     stats={"seen": 3, "mistakes": 2},
    ...     predictor=SimpleNamespace(weights=weights, averaged_weights=weights / 2),
    ... )
    >>> registry = CollectorRegistry()
    >>> registry.register(SnapshotCollector(lambda: snapshot))
    >>> registry.get_sample_value("novikoff_events_learned_total")
    3.0
    >>> registry.get_sample_value("novikoff_weight_norm", {"predictor": "averaged"})
    2.5
    """

    def __init__(self, source: Callable[[], Snapshot | None]) -> None:
        self._source = source

    def describe(self) -> Iterable[Metric]:
        """The metric families, without samples (checked for name clashes at registration)."""
        return list(_Families().all())

    def collect(self) -> Iterable[Metric]:
        """The metric families with the current snapshot's values."""
        families = _Families()
        snapshot = self._source()
        if snapshot is not None:
            families.fill(snapshot)
        return list(families.all())


class _Families:
    """One scrape's metric families."""

    def __init__(self) -> None:
        self.events_learned = CounterMetricFamily(
            "novikoff_events_learned",
            "Valid events applied to the model (predicted, then learned).",
        )
        self.invalid = CounterMetricFamily(
            "novikoff_invalid_events",
            "Events rejected to the dead-letter topic, by reason code.",
            labels=["reason"],
        )
        self.mistakes = CounterMetricFamily(
            "novikoff_mistakes", "Perceptron mistakes, i.e. updates: events with y * (w . x) <= 0."
        )
        self.prequential = CounterMetricFamily(
            "novikoff_prequential_mistakes",
            "Events each predictor got wrong before learning them (test-then-train).",
            labels=["predictor"],
        )
        self.references = {
            key: GaugeMetricFamily(name, documentation, labels=["reference"])
            for key, name, documentation in REFERENCE_GAUGES
        }
        self.violated = GaugeMetricFamily(
            "novikoff_bound_violated",
            "1 when the mistakes exceed the reference's bound (a bug or a wrong radius), else 0.",
            labels=["reference"],
        )
        self.radius = GaugeMetricFamily(
            "novikoff_radius", "R: the largest norm of an augmented feature vector seen so far."
        )
        self.margin_estimate = GaugeMetricFamily(
            "novikoff_margin_estimate",
            "Diagnostic margin estimate over a recent window (not a certificate).",
        )
        self.model_version = GaugeMetricFamily(
            "novikoff_model_version", "Model version: the number of updates applied to the weights."
        )
        self.weight_norm = GaugeMetricFamily(
            "novikoff_weight_norm",
            "Euclidean norm of the weights of each predictor (multiclass: of the whole matrix).",
            labels=["predictor"],
        )
        self.lag = GaugeMetricFamily(
            "novikoff_consumer_lag",
            "Records in a partition not yet applied: highwater minus next offset.",
            labels=["topic", "partition"],
        )
        self.mixing_round = GaugeMetricFamily(
            "novikoff_mixing_round", "Mixing mode: the round of the mixed model served."
        )
        self.distributed = {
            key: GaugeMetricFamily(name, documentation, labels=["reference"])
            for key, name, documentation in DISTRIBUTED_GAUGES
        }
        self.distributed_violated = GaugeMetricFamily(
            "novikoff_distributed_bound_violated",
            "Mixing mode: 1 when the mixed mistakes exceed the distributed bound, else 0.",
            labels=["reference"],
        )

    def all(self) -> Iterator[Metric]:
        yield self.events_learned
        yield self.invalid
        yield self.mistakes
        yield self.prequential
        yield from self.references.values()
        yield self.violated
        yield self.radius
        yield self.margin_estimate
        yield self.model_version
        yield self.weight_norm
        yield self.lag
        yield self.mixing_round
        yield from self.distributed.values()
        yield self.distributed_violated

    def fill(self, snapshot: Snapshot) -> None:
        stats = snapshot.stats
        _count(self.events_learned, [], stats.get("seen"))
        _count(self.mistakes, [], stats.get("mistakes"))
        for predictor, count in dict(stats.get("prequential_mistakes") or {}).items():
            _count(self.prequential, [str(predictor)], count)
        for reason, count in dict(stats.get("invalid") or {}).items():
            _count(self.invalid, [str(reason)], count)
        for entry in stats.get("bounds") or ():
            name = str(entry.get("name"))
            for key, family in self.references.items():
                family.add_metric([name], _gauge_value(entry.get(key)))
            self.violated.add_metric([name], 1.0 if entry.get("violated") else 0.0)
        self.radius.add_metric([], _gauge_value(stats.get("radius")))
        margin = stats.get("margin_estimate")
        if isinstance(margin, Mapping):
            self.margin_estimate.add_metric([], _gauge_value(margin.get("value")))
        self.model_version.add_metric([], _gauge_value(stats.get("model_version")))
        predictor = snapshot.predictor
        self.weight_norm.add_metric(["last"], _norm(predictor.weights))
        self.weight_norm.add_metric(["averaged"], _norm(predictor.averaged_weights))
        for row in stats.get("partitions") or ():
            labels = [str(row.get("topic")), str(row.get("partition"))]
            self.lag.add_metric(labels, _gauge_value(row.get("lag")))
        mixing = stats.get("mixing")
        if isinstance(mixing, Mapping):
            self.mixing_round.add_metric([], _gauge_value(mixing.get("round")))
            for entry in mixing.get("bound") or ():
                name = str(entry.get("name"))
                for key, family in self.distributed.items():
                    family.add_metric([name], _gauge_value(entry.get(key)))
                self.distributed_violated.add_metric([name], 1.0 if entry.get("violated") else 0.0)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _count(family: CounterMetricFamily, labels: list[str], value: object) -> None:
    if _is_number(value):
        family.add_metric(labels, float(value))  # type: ignore[arg-type]


def _gauge_value(value: object) -> float:
    """A gauge's value; ``None`` or anything not a number is NaN, the Prometheus idiom."""
    return float(value) if _is_number(value) else math.nan  # type: ignore[arg-type]


def _norm(weights: NDArray[np.float64]) -> float:
    flat = np.ravel(weights)
    return math.sqrt(float(np.dot(flat, flat)))
