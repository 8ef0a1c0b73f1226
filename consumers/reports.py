"""What the engine publishes: its snapshot, per-partition progress, the reports of a
batch, a checkpoint and a restore, and the observer protocol that hears them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import numpy as np

from consumers.state.checkpoint import SkippedCheckpoint
from learning import PREDICTORS, BoundStatus, MarginEstimate, Predictor

logger = logging.getLogger(__name__)


PartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    """What has been applied from one partition.

    ``applied`` lists half-open offset ranges ``[start, stop)`` of records applied (learned or
    dead-lettered); a single range means no gap. ``highwater`` and ``lag`` come from the consumer
    (``None`` until it has fetched from the partition).
    """

    topic: str
    partition: int
    next_offset: int
    applied: tuple[tuple[int, int], ...]
    learned: int
    rejected: int
    highwater: int | None = None

    @property
    def lag(self) -> int | None:
        """Records in the partition not applied yet."""
        if self.highwater is None:
            return None
        return max(0, self.highwater - self.next_offset)

    def as_dict(self) -> dict[str, Any]:
        """The ``/stats`` form."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "next_offset": self.next_offset,
            "highwater": self.highwater,
            "lag": self.lag,
            "learned": self.learned,
            "rejected": self.rejected,
            "applied": [list(pair) for pair in self.applied],
        }


@dataclass(frozen=True)
class EngineSnapshot:
    """Everything readers need, frozen at the end of one batch.

    Attributes
    ----------
    predictor
        The learner's immutable prediction snapshot.
    seen, mistakes
        Events learned and perceptron updates.
    prequential
        Prequential mistakes of each tracked predictor.
    bounds
        The bound of each reference separator.
    radius
        R: the largest norm of an augmented vector so far.
    margin_estimate
        Diagnostic margin over a recent window (not a certificate).
    invalid
        Rejected records by reason code.
    partitions
        Progress per partition, sorted by (topic, partition).
    events_per_second
        Learning rate over the last few seconds.
    taken_at
        ``time.time()`` when the snapshot was taken.
    """

    predictor: Predictor
    seen: int
    mistakes: int
    prequential: Mapping[str, int]
    bounds: tuple[BoundStatus, ...]
    radius: float
    margin_estimate: MarginEstimate
    invalid: Mapping[str, int]
    partitions: tuple[PartitionProgress, ...]
    events_per_second: float
    taken_at: float
    description: Mapping[str, Any] = field(repr=False)
    voted: Mapping[str, int] = field(default_factory=dict)
    mixing: Mapping[str, Any] | None = None
    """Mixing mode only (:mod:`consumers.mixing`): the ``/stats`` ``mixing`` section."""
    mixed_round: int | None = None
    """Mixing mode only: the round of the mixed model served."""

    @property
    def model_version(self) -> int:
        """Increments with every update of the weights (in mixing mode: the mixed round)."""
        return self.predictor.version if self.mixed_round is None else self.mixed_round

    @property
    def lag(self) -> int:
        """Total lag over partitions with a known highwater."""
        return sum(p.lag or 0 for p in self.partitions)

    @cached_property
    def stats(self) -> dict[str, Any]:
        """The ``/stats`` document (docs/DESIGN.md) without ``ready``, which the service adds."""
        prequential = {name: self.prequential.get(name) for name in PREDICTORS}
        return {
            "seen": self.seen,
            "mistakes": self.mistakes,
            "prequential_mistakes": prequential,
            "radius": self.radius,
            "bounds": [_bound_dict(status) for status in self.bounds],
            "margin_estimate": self.margin_estimate.as_dict(),
            "invalid": dict(self.invalid),
            "partitions": [p.as_dict() for p in self.partitions],
            "lag": self.lag,
            "model_version": self.model_version,
            "events_per_second": self.events_per_second,
            **({} if self.mixing is None else {"mixing": dict(self.mixing)}),
        }

    @cached_property
    def model(self) -> dict[str, Any]:
        """The ``/model`` document: description, counters and weights of each predictor."""
        predictor = self.predictor
        return {
            **self.description,
            "model_version": self.model_version,
            "counters": {
                "seen": self.seen,
                "mistakes": self.mistakes,
                "prequential_mistakes": dict(self.prequential),
            },
            "weights": {
                "last": np.asarray(predictor.weights).tolist(),
                "averaged": np.asarray(predictor.averaged_weights).tolist(),
            },
            "voted": dict(self.voted),
        }


def _bound_dict(status: BoundStatus) -> dict[str, Any]:
    return {
        "name": status.name,
        "gamma": status.gamma,
        "k": status.k,
        "bound": status.bound,
        "novikoff": status.novikoff,
        "min_margin": status.min_margin,
        "violated": status.violated,
        "mistakes": status.mistakes,
        "radius": status.radius,
    }


@dataclass(frozen=True, slots=True)
class BatchReport:
    """What one :meth:`Engine.apply` did (handed to the observer)."""

    records: int
    learned: int
    rejected: int
    mistakes: int
    seconds: float
    rejected_by_reason: Mapping[str, int]
    snapshot: EngineSnapshot


@dataclass(frozen=True, slots=True)
class CheckpointReport:
    """The outcome of one checkpoint attempt (handed to the observer)."""

    ok: bool
    seconds: float
    size_bytes: int
    sequence: int | None
    offsets: Mapping[PartitionKey, int] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RestoreReport:
    """What :meth:`Engine.restore` loaded, and what it skipped."""

    restored: bool
    path: str | None
    sequence: int | None
    skipped: tuple[SkippedCheckpoint, ...]
    seen: int
    partitions: int


class EngineObserver(Protocol):
    """Receives the engine's events; ``service.observability.metrics`` implements it.

    Every method is called on the consumer thread, once per batch or checkpoint (never per
    event), and must return quickly and never raise.
    """

    def on_batch(self, report: BatchReport) -> None:
        """A batch was applied; ``report.snapshot`` is the new snapshot."""

    def on_rejected(self, reason: str, count: int) -> None:
        """``count`` records of the last batch were dead-lettered for ``reason``."""

    def on_checkpoint(self, report: CheckpointReport) -> None:
        """A checkpoint was attempted."""

    def on_lag(self, partitions: Sequence[PartitionProgress]) -> None:
        """Highwater marks (and so lag) changed."""


class NullObserver:
    """An observer that ignores everything."""

    def on_batch(self, report: BatchReport) -> None:
        """Ignore."""

    def on_rejected(self, reason: str, count: int) -> None:
        """Ignore."""

    def on_checkpoint(self, report: CheckpointReport) -> None:
        """Ignore."""

    def on_lag(self, partitions: Sequence[PartitionProgress]) -> None:
        """Ignore."""


def call_observer(method: Callable[..., None], *args: Any) -> None:
    """Call an observer method; an observer bug must never stop the consumer."""
    try:
        method(*args)
    except Exception:
        logging.getLogger("consumers.engine").exception(
            "engine observer %s failed", getattr(method, "__qualname__", method)
        )
