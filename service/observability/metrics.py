"""Every Prometheus metric of novikoff, built on a registry passed in (never the global one).

The learning metrics (events, mistakes, bounds, lag, weight norms) are read from the current model
snapshot at scrape time by :class:`~service.observability.snapshot_collector.SnapshotCollector`, so
``/metrics`` and ``/stats`` show the same numbers by construction. The ones this process observes
itself (batch and request timings, checkpoints, consumer errors, refused tokens, readiness) are
instrumented here. Labels carry only a few values each: a reference name, a predictor, a reason
code, a partition, a route. No label ever carries an event id, a record key or an offset.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Sequence
from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from consumers.faults import FAULT_KINDS, ConsumerFault
from consumers.mixing.contribution import REFUSAL_REASONS
from consumers.reports import BatchReport, CheckpointReport, PartitionProgress
from service.observability.snapshot_collector import Snapshot, SnapshotCollector

logger = logging.getLogger(__name__)


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

MODEL_AGE_METRIC = "novikoff_model_age_seconds"
MODEL_AGE_HELP = (
    "Replicas: seconds since the replica last confirmed that its model is the newest in the "
    "state topic (NaN before it has a model)."
)

UNMATCHED_ROUTE = "unmatched"
"""The ``route`` label of requests no route matched, so unknown paths add no series."""

AUTH_FAILURE_OUTCOMES = ("missing", "invalid", "forbidden", "locked_out")
"""Why a request to a protected route was refused (see ``service.http.auth.guard``)."""

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
    >>> metrics.observe_batch(0.002, 500)
    >>> registry.get_sample_value("novikoff_batch_events_total")
    500.0
    >>> registry.get_sample_value("novikoff_events_learned_total") is None  # no snapshot yet
    True
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        counter = partial(Counter, registry=registry)
        gauge = partial(Gauge, registry=registry)
        histogram = partial(Histogram, registry=registry)
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
        self._contributions_refused = counter(
            "novikoff_mixing_contributions_refused",
            "Mixing: contributions records the follower refused, by reason: malformed, format "
            "(another version's), partition (not one of the events topic's), shape (another "
            "model or bound); while they keep the mix from advancing, /readyz says why.",
            ["reason"],
        )
        for reason in REFUSAL_REASONS:
            self._contributions_refused.labels(reason=reason)
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
        self._snapshot_source: Callable[[], Snapshot | None] = _no_snapshot
        registry.register(SnapshotCollector(self._current_snapshot))
        # labels() costs more than observe(); the few (route, method, status) children are cached.
        self._request_children: dict[tuple[str, str, int], Histogram] = {}

    # -- the engine's observer ----------------------------------------------------------------

    def follow(self, source: Callable[[], Snapshot | None]) -> None:
        """Export the learning metrics of the snapshot ``source`` returns at each scrape."""
        self._snapshot_source = source

    def _current_snapshot(self) -> Snapshot | None:
        return self._snapshot_source()

    def on_batch(self, report: BatchReport) -> None:
        """A batch was applied: time it (its counts are read from the snapshot at scrape time)."""
        self.observe_batch(report.seconds, report.records)

    def on_rejected(self, reason: str, count: int) -> None:
        """Rejections are counted from the snapshot's ``invalid`` at scrape time."""

    def on_checkpoint(self, report: CheckpointReport) -> None:
        """Count a checkpoint attempt; time and size the successful ones."""
        self._checkpoints.labels(outcome="ok" if report.ok else "failed").inc()
        if report.ok:
            self._checkpoint_seconds.observe(report.seconds)
            self._checkpoint_bytes.set(report.size_bytes)
            self._last_checkpoint.set_to_current_time()

    def on_lag(self, partitions: Sequence[PartitionProgress]) -> None:
        """Lag is read from the snapshot's partitions at scrape time."""

    # -- the consumer runner's fault observer ---------------------------------------------------

    def on_consumer_error(self, fault: ConsumerFault) -> None:
        """Count one consumer error by its kind."""
        self._consumer_errors.labels(kind=fault.kind.value).inc()

    def on_contribution_refused(self, reason: str) -> None:
        """Count one refused contributions record by its reason (the mixing runner's observer)."""
        self._contributions_refused.labels(reason=reason).inc()

    def watch_model_age(self, age: Callable[[], float | None]) -> None:
        """Export ``novikoff_model_age_seconds``, read from ``age`` at every scrape."""
        self.registry.register(ModelAgeCollector(age))

    def observe_batch(self, seconds: float, records: int) -> None:
        """Time one applied batch of ``records`` records."""
        self._batch_seconds.observe(seconds)
        self._batch_events.inc(records)

    def set_ready(self, ready: bool) -> None:
        """Mirror the readiness ``/readyz`` reports."""
        self._ready.set(1.0 if ready else 0.0)

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


def _no_snapshot() -> None:
    return None


class ModelAgeCollector(Collector):
    """``novikoff_model_age_seconds``: how stale a replica's model is, read when scraped.

    The value is owned by the replica (:class:`service.replica.Replica`); the collector only
    reads it, so the exposition is never older than the scrape. NaN until there is a model.

    Examples
    --------
    >>> registry = CollectorRegistry()
    >>> registry.register(ModelAgeCollector(lambda: 2.5))
    >>> registry.get_sample_value(MODEL_AGE_METRIC)
    2.5
    """

    def __init__(self, age: Callable[[], float | None]) -> None:
        self._age = age

    def describe(self) -> list[Metric]:
        """The family without reading the value (registration must not call the replica)."""
        return [GaugeMetricFamily(MODEL_AGE_METRIC, MODEL_AGE_HELP)]

    def collect(self) -> Iterator[Metric]:
        """The family with the current age."""
        age = self._age()
        yield GaugeMetricFamily(
            MODEL_AGE_METRIC, MODEL_AGE_HELP, value=math.nan if age is None else age
        )
