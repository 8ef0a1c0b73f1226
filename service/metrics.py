"""Every Prometheus metric of novikoff, built on a registry passed in (never the global one).

The consumer updates them once per applied batch, from the same ``/stats`` dictionary the HTTP API
serves, so ``/metrics`` and ``/stats`` always show the same numbers. Labels carry only a few
values each: a reference name, a predictor, a reason code, a partition, a route. No label ever
carries an event id, a record key or an offset.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import NDArray
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

from consumers.engine import BatchReport, CheckpointReport, PartitionProgress
from consumers.faults import FAULT_KINDS, ConsumerFault
from learning import Predictor

logger = logging.getLogger(__name__)

PREDICTORS = ("last", "averaged", "voted")
SCRAPED_NORMS = ("last", "averaged")
"""The predictors whose weight norm follows the engine's snapshot (computed when scraped)."""

BATCH_SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
CHECKPOINT_SECONDS_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
REQUEST_SECONDS_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
)

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
"""(``/stats`` bound entry key, metric name, help) of the per-reference gauges set from it."""

UNMATCHED_ROUTE = "unmatched"
"""The ``route`` label of requests no route matched, so unknown paths add no series."""

AUTH_FAILURE_OUTCOMES = ("missing", "invalid", "forbidden", "locked_out")
"""Why a request to a protected route was refused (see ``service.auth.guard``)."""

KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER_METHOD = "other"


class Metrics:
    """The novikoff metrics on one registry; the engine's observer (``EngineObserver``).

    Parameters
    ----------
    registry
        Where every metric is registered; ``/metrics`` exposes this registry only.

    Examples
    --------
    >>> from prometheus_client import CollectorRegistry
    >>> registry = CollectorRegistry()
    >>> metrics = Metrics(registry)
    >>> metrics.record_stats({"seen": 3, "mistakes": 2})
    >>> registry.get_sample_value("novikoff_events_learned_total")
    3.0
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        counter = partial(Counter, registry=registry)
        gauge = partial(Gauge, registry=registry)
        histogram = partial(Histogram, registry=registry)
        self._events_learned = counter(
            "novikoff_events_learned",
            "Valid events applied to the model (predicted, then learned).",
        )
        self._invalid_events = counter(
            "novikoff_invalid_events",
            "Events rejected to the dead-letter topic, by reason code.",
            ["reason"],
        )
        self._mistakes = counter(
            "novikoff_mistakes", "Perceptron mistakes, i.e. updates: events with y * (w . x) <= 0."
        )
        self._prequential_mistakes = counter(
            "novikoff_prequential_mistakes",
            "Events each predictor got wrong before learning them (test-then-train).",
            ["predictor"],
        )
        self._reference_gauges = {
            key: gauge(name, documentation, ["reference"])
            for key, name, documentation in REFERENCE_GAUGES
        }
        self._violated = gauge(
            "novikoff_bound_violated",
            "1 when the mistakes exceed the reference's bound (a bug or a wrong radius), else 0.",
            ["reference"],
        )
        self._radius = gauge(
            "novikoff_radius", "R: the largest norm of an augmented feature vector seen so far."
        )
        self._margin_estimate = gauge(
            "novikoff_margin_estimate",
            "Diagnostic margin estimate over a recent window (not a certificate).",
        )
        self._model_version = gauge(
            "novikoff_model_version", "Model version: the number of updates applied to the weights."
        )
        self._weight_norm = gauge(
            "novikoff_weight_norm",
            "Euclidean norm of the weights of each predictor (multiclass: of the whole matrix).",
            ["predictor"],
        )
        self._weight_norms = _ScrapedWeightNorms(self._weight_norm)
        self._lag = gauge(
            "novikoff_consumer_lag",
            "Records in a partition not yet applied: highwater minus next offset.",
            ["topic", "partition"],
        )
        self._ready = gauge(
            "novikoff_ready",
            "1 when the model is loaded and the consumer is connected (what /readyz says).",
        )
        self._batch_seconds = histogram(
            "novikoff_batch_processing_seconds",
            "Time to decode, predict, learn and track one polled batch of events.",
            buckets=BATCH_SECONDS_BUCKETS,
        )
        self._batch_events = counter(
            "novikoff_batch_events",
            "Records in the batches timed by novikoff_batch_processing_seconds.",
        )
        self._checkpoints = counter(
            "novikoff_checkpoints", "Checkpoint attempts by outcome (ok or failed).", ["outcome"]
        )
        self._checkpoint_seconds = histogram(
            "novikoff_checkpoint_duration_seconds",
            "Time to serialise and durably write one checkpoint.",
            buckets=CHECKPOINT_SECONDS_BUCKETS,
        )
        self._checkpoint_bytes = gauge(
            "novikoff_checkpoint_size_bytes", "Size of the last checkpoint written."
        )
        self._last_checkpoint = gauge(
            "novikoff_last_checkpoint_timestamp_seconds",
            "Unix time of the last successful checkpoint.",
        )
        self._request_seconds = histogram(
            "novikoff_http_request_duration_seconds",
            "Time to answer an HTTP request, by route template, method and status code.",
            ["route", "method", "status"],
            buckets=REQUEST_SECONDS_BUCKETS,
        )
        self._consumer_errors = counter(
            "novikoff_consumer_errors",
            "Errors the consumer met, by kind: codec, authorization and unknown_topic need a "
            "person (see /readyz for the fix); transient ones are retried with backoff.",
            ["kind"],
        )
        for kind in FAULT_KINDS:
            self._consumer_errors.labels(kind=kind)
        self._auth_failures = counter(
            "novikoff_http_auth_failures",
            "Requests to protected routes refused: no token (missing), a wrong token (invalid), "
            "a token without the route's scope (forbidden), a locked-out address (locked_out).",
            ["outcome"],
        )
        for outcome in AUTH_FAILURE_OUTCOMES:
            self._auth_failures.labels(outcome=outcome)
        self._auth_lockouts = counter(
            "novikoff_http_auth_lockouts",
            "Client addresses locked out after too many wrong tokens within the window.",
        )
        self._totals: dict[str, float] = {}
        # labels() costs more than observe(); the few (route, method, status) children are cached.
        self._request_children: dict[tuple[str, str, int], Histogram] = {}
        self._lag_series: set[tuple[str, str]] = set()

    # -- the engine's observer ----------------------------------------------------------------

    def on_batch(self, report: BatchReport) -> None:
        """A batch was applied: bring everything to its snapshot and time it."""
        snapshot = report.snapshot
        self.record_stats(snapshot.stats)
        self._weight_norms.follow(snapshot.predictor)
        self.observe_batch(report.seconds, report.records)

    def on_rejected(self, reason: str, count: int) -> None:
        """Rejections are counted from the snapshot's ``invalid`` (see :meth:`on_batch`)."""

    def on_checkpoint(self, report: CheckpointReport) -> None:
        """Count a checkpoint attempt; time and size the successful ones."""
        self._checkpoints.labels(outcome="ok" if report.ok else "failed").inc()
        if report.ok:
            self._checkpoint_seconds.observe(report.seconds)
            self._checkpoint_bytes.set(report.size_bytes)
            self._last_checkpoint.set_to_current_time()

    def on_lag(self, partitions: Sequence[PartitionProgress]) -> None:
        """Highwater marks changed: update the lag of every partition."""
        self._record_lag([progress.as_dict() for progress in partitions])

    # -- the consumer runner's fault observer ---------------------------------------------------

    def on_consumer_error(self, fault: ConsumerFault) -> None:
        """Count one consumer error by its kind."""
        self._consumer_errors.labels(kind=fault.kind.value).inc()

    # -- from /stats ---------------------------------------------------------------------------

    def record_stats(self, stats: Mapping[str, Any]) -> None:
        """Bring every learning metric to the values of a ``/stats`` dictionary.

        Counters advance by the difference to the last call, so after a restart from a checkpoint
        they continue from the restored totals.
        """
        self._advance(self._events_learned, "seen", stats.get("seen"))
        self._advance(self._mistakes, "mistakes", stats.get("mistakes"))
        for predictor, count in dict(stats.get("prequential_mistakes") or {}).items():
            self._advance(
                self._prequential_mistakes.labels(predictor=predictor), f"pq:{predictor}", count
            )
        for reason, count in dict(stats.get("invalid") or {}).items():
            self._advance(self._invalid_events.labels(reason=reason), f"invalid:{reason}", count)
        _set(self._radius, stats.get("radius"))
        _set(self._model_version, stats.get("model_version"))
        margin = stats.get("margin_estimate")
        if isinstance(margin, Mapping):
            _set(self._margin_estimate, margin.get("value"))
        for entry in stats.get("bounds") or ():
            self._record_bound(entry)
        if "partitions" in stats:
            self._record_lag(stats["partitions"])
        if "ready" in stats:
            self._ready.set(1.0 if stats["ready"] else 0.0)

    def record_weight_norms(self, norms: Mapping[str, float]) -> None:
        """Set the weight norm of each predictor (``last``, ``averaged``, ``voted``).

        Once the engine reported a batch (:meth:`on_batch`), ``last`` and ``averaged`` follow its
        snapshot and are computed when scraped; values set here for them are then ignored.
        """
        for predictor, norm in norms.items():
            _set(self._weight_norm.labels(predictor=predictor), norm)

    def observe_batch(self, seconds: float, records: int) -> None:
        """Time one applied batch of ``records`` records."""
        self._batch_seconds.observe(seconds)
        self._batch_events.inc(records)

    def set_ready(self, ready: bool) -> None:
        """Mirror the readiness ``/readyz`` reports."""
        self._ready.set(1.0 if ready else 0.0)

    def _advance(self, counter: Counter, key: str, total: object) -> None:
        if not _is_number(total):
            return
        value = float(total)  # type: ignore[arg-type]
        previous = self._totals.get(key, 0.0)
        if value > previous:
            counter.inc(value - previous)
            self._totals[key] = value

    def _record_bound(self, entry: Mapping[str, Any]) -> None:
        name = str(entry.get("name"))
        for key, gauge in self._reference_gauges.items():
            _set(gauge.labels(reference=name), entry.get(key))
        self._violated.labels(reference=name).set(1.0 if entry.get("violated") else 0.0)

    def _record_lag(self, partitions: Iterable[Mapping[str, Any]]) -> None:
        current: set[tuple[str, str]] = set()
        for row in partitions:
            key = (str(row.get("topic")), str(row.get("partition")))
            current.add(key)
            _set(self._lag.labels(topic=key[0], partition=key[1]), row.get("lag"))
        for gone in self._lag_series - current:
            self._lag.remove(*gone)
        self._lag_series = current

    # -- HTTP side ----------------------------------------------------------------------------

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        """Time one HTTP request; ``route`` is the route template, never the raw path."""
        known = method if method in KNOWN_METHODS else OTHER_METHOD
        key = (route, known, status)
        child = self._request_children.get(key)
        if child is None:
            child = self._request_seconds.labels(route=route, method=known, status=str(status))
            self._request_children[key] = child
        child.observe(seconds)

    def observe_auth_failure(self, outcome: str) -> None:
        """Count one refused request; ``outcome`` is one of :data:`AUTH_FAILURE_OUTCOMES`."""
        self._auth_failures.labels(outcome=outcome).inc()

    def observe_lockout(self) -> None:
        """Count one client address locked out."""
        self._auth_lockouts.inc()

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)


class _ScrapedWeightNorms:
    """The ``last`` and ``averaged`` weight norms of the newest snapshot, computed when scraped.

    The consumer thread only swaps in the new (immutable) predictor after each batch; the
    O(dimension) norms (2^18 + 1 weights for a hashing model) are computed by whoever collects
    the registry, once per model version.
    """

    def __init__(self, gauge: Gauge) -> None:
        self._gauge = gauge
        self._predictor: Predictor | None = None
        self._norms: tuple[int, dict[str, float]] | None = None

    def follow(self, predictor: Predictor) -> None:
        """Report the norms of ``predictor`` from now on (one reference assignment)."""
        if self._predictor is None:
            for name in SCRAPED_NORMS:
                self._gauge.labels(predictor=name).set_function(partial(self._norm, name))
        self._predictor = predictor

    def _norm(self, name: str) -> float:
        predictor = self._predictor
        if predictor is None:
            return math.nan
        cached = self._norms
        if cached is None or cached[0] != id(predictor):
            cached = (
                id(predictor),
                {
                    "last": _euclidean_norm(predictor.weights),
                    "averaged": _euclidean_norm(predictor.averaged_weights),
                },
            )
            self._norms = cached
        return cached[1][name]


def _euclidean_norm(weights: NDArray[np.float64]) -> float:
    """‖weights‖ (Frobenius for a matrix) without BLAS, whose threads cost more than the sum."""
    flat = np.ravel(weights)
    return math.sqrt(float(np.einsum("i,i->", flat, flat)))


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _set(gauge: Gauge, value: object) -> None:
    """Set a gauge; ``None`` (undefined, e.g. no bound yet) becomes NaN, the Prometheus idiom."""
    if value is None:
        gauge.set(math.nan)
    elif _is_number(value):
        gauge.set(float(value))  # type: ignore[arg-type]
