"""The learning engine: learner, bound tracker, counters and partition offsets, applied once.

The engine is the single owner of the model. The consumer thread calls :meth:`Engine.apply` with
decoded batches; each batch is applied in record order (predict → mistake → learn → bound, in one
compiled pass per batch), the partition offsets advance, and a new immutable
:class:`EngineSnapshot` replaces the previous one with a single reference assignment. Readers
(HTTP requests, metrics) only ever see a whole snapshot, never a half-applied batch.

Exactly once
------------
Every partition keeps its *next offset* and the ranges of offsets applied so far (learned or
dead-lettered). :meth:`Engine.apply` refuses a batch that would re-apply an offset below the next
offset (:class:`OffsetError`), so a record can never be learned twice; :meth:`Engine.unapplied`
drops such records before decoding. Offsets, ranges and counters are saved *with* the model by
:meth:`Engine.checkpoint_bytes` (``learning.dump_state``'s ``extra``), so after a crash the
restored model and the restored offsets always agree.

Observers
---------
Metrics live in the service; the engine only calls an :class:`EngineObserver` once per batch (not
per event) and on checkpoints and lag updates. ``service.observability.metrics`` implements the
protocol.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np

from consumers.decoding.events import DecodedBatch, EventDecoder, LabelLookup, SourceRecord
from consumers.engine_state import EnginePersistence, classes_of
from consumers.partitions import (
    _Partition,
)
from consumers.reports import (
    BatchReport,
    EngineObserver,
    EngineSnapshot,
    NullObserver,
    PartitionKey,
    PartitionProgress,
    RestoreReport,
    call_observer,
)
from learning import (
    BoundTracker,
    Encoder,
    LinearLearner,
    MulticlassPerceptron,
    Perceptron,
)

logger = logging.getLogger(__name__)

RATE_WINDOW_SECONDS = 10.0
MAX_RATE_POINTS = 256
MAX_LISTED_COORDINATES = 10_000
"""``/model`` lists coordinate names up to this dimension (hashing models give the dimension)."""


_Record = TypeVar("_Record", bound=SourceRecord)


class OffsetError(RuntimeError):
    """A batch would apply an offset that was already applied (or is out of order)."""


def _labels_of(learner: LinearLearner, lock: threading.RLock | None = None) -> LabelLookup:
    """The decoder's labels of ``learner``. A multiclass model whose classes are not declared
    adds each new label as a class (under ``lock``, the engine's, when given)."""
    if isinstance(learner, MulticlassPerceptron):
        if learner.classes is not None:
            return LabelLookup.multiclass(learner.class_labels)

        def grow(label: Hashable) -> int:
            with lock or nullcontext():
                return int(learner.encode_labels([label], grow=True)[0])

        return LabelLookup.multiclass(learner.class_labels, grow=grow)
    if isinstance(learner, Perceptron):
        return LabelLookup.binary(learner.label_map)
    raise TypeError(f"unsupported learner {type(learner).__name__}")


def _describe(learner: LinearLearner) -> dict[str, Any]:
    """The static part of ``/model`` (it changes only when a vocabulary or the classes grow)."""
    encoder = learner.encoder
    dimension = int(learner.dimension)
    names = list(encoder.coordinate_names) if dimension <= MAX_LISTED_COORDINATES else None
    return {
        "variant": "multiclass" if isinstance(learner, MulticlassPerceptron) else "binary",
        "learner": type(learner).__name__,
        "classes": classes_of(learner),
        "bias": bool(encoder.bias),
        "dimension": dimension,
        "feature_names": names,
        "predictor": learner.predictor,
    }


class Engine(EnginePersistence):
    """Applies decoded batches to one learner exactly once and publishes snapshots.

    Parameters
    ----------
    learner
        A :class:`~learning.Perceptron` (or subclass) or :class:`~learning.MulticlassPerceptron`,
        with its encoder; its ``predictor`` is the one predictions use by default.
    tracker
        The bound tracker observing the same events.
    observer
        Receives one call per batch / checkpoint / lag update (see :class:`EngineObserver`).
    clock
        Wall-clock source for rates and timestamps (tests pass a fake).

    Examples
    --------
    >>> from learning import BoundTracker, DenseEncoder, LabelMap, Perceptron
    >>> from consumers.decoding.events import Record
    >>> engine = Engine(Perceptron(LabelMap({"1": 1, "-1": -1}), encoder=DenseEncoder(1)),
    ...                 BoundTracker())
    >>> batch = engine.decoder.decode_batch([
    ...     Record("events", 0, 0, b'{"features": [2], "label": -1}'),
    ...     Record("events", 0, 1, b'{"features": [-0.25], "label": 1}'),
    ... ])
    >>> report = engine.apply(batch)
    >>> engine.snapshot.predictor.weights.tolist(), engine.snapshot.mistakes
    ([0.0, -2.25], 2)
    """

    def __init__(
        self,
        learner: LinearLearner,
        tracker: BoundTracker,
        observer: EngineObserver | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._lock = threading.RLock()
        self._observer: EngineObserver = observer or NullObserver()
        self._clock = clock
        self._partitions: dict[PartitionKey, _Partition] = {}
        self._invalid: Counter[str] = Counter()
        self._rate_points: deque[tuple[float, int]] = deque(maxlen=MAX_RATE_POINTS)
        self._snapshot: EngineSnapshot
        self._restore_report: RestoreReport | None = None
        self._owned: frozenset[PartitionKey] | None = None
        self._mixing: Mapping[str, Any] | None = None
        self._mixed_round: int | None = None
        self._install(learner, tracker)

    # -- read side ------------------------------------------------------------------------------

    @property
    def snapshot(self) -> EngineSnapshot:
        """The latest published snapshot (a plain attribute read: atomic)."""
        return self._snapshot

    @property
    def encoder(self) -> Encoder:
        """The learner's feature encoder (what HTTP predictions validate with)."""
        return self._learner.encoder

    @property
    def restore_report(self) -> RestoreReport | None:
        """What :meth:`restore` found (``None`` until it ran)."""
        return self._restore_report

    @property
    def decoder(self) -> EventDecoder:
        """The decoder for this learner's encoder and labels."""
        return self._decoder

    @property
    def learner(self) -> LinearLearner:
        """The live learner (consumer thread only; readers use :attr:`snapshot`)."""
        return self._learner

    @property
    def tracker(self) -> BoundTracker:
        """The live bound tracker (consumer thread only)."""
        return self._tracker

    def next_offset(self, topic: str, partition: int) -> int | None:
        """The first offset not applied yet, or ``None`` for a partition never seen."""
        state = self._partitions.get((topic, partition))
        return None if state is None else state.next_offset

    def next_offsets(self) -> dict[PartitionKey, int]:
        """Next offset of every partition seen."""
        with self._lock:
            return {key: state.next_offset for key, state in self._partitions.items()}

    def unapplied(
        self, topic: str, partition: int, records: Sequence[_Record]
    ) -> Sequence[_Record]:
        """``records`` (of one partition, in offset order) minus those already applied."""
        next_offset = self.next_offset(topic, partition)
        if next_offset is None or not records or records[0].offset >= next_offset:
            return records
        fresh = [record for record in records if record.offset >= next_offset]
        logger.warning(
            "skipping %d already-applied record(s) of %s/%d (offsets below %d)",
            len(records) - len(fresh),
            topic,
            partition,
            next_offset,
        )
        return fresh

    # -- write side -----------------------------------------------------------------------------

    def apply(self, batch: DecodedBatch) -> BatchReport:
        """Apply a decoded batch: learn its valid events in order, advance offsets, publish.

        Raises
        ------
        OffsetError
            When a span starts below its partition's next offset (nothing is applied then).
        """
        started = time.perf_counter()
        with self._lock:
            self._check_offsets(batch)
            mistakes = 0
            if batch.valid:
                # batch.X is CSR for object-valued encoders, dense otherwise: both take it.
                result = self._learner.learn_batch(batch.X, batch.y)
                self._tracker.observe_batch(batch.X, batch.y, result)
                mistakes = int(np.count_nonzero(result.mistakes))
            for span in batch.spans:
                self._partition(span.topic, span.partition, span.first_offset).record(
                    span.first_offset,
                    span.last_offset,
                    span.row_stop - span.row_start,
                    span.rejected,
                )
            by_reason = Counter(rejection.reason for rejection in batch.rejections)
            self._invalid.update(by_reason)
            snapshot = self._publish()
        report = BatchReport(
            records=batch.records,
            learned=batch.valid,
            rejected=len(batch.rejections),
            mistakes=mistakes,
            seconds=time.perf_counter() - started,
            rejected_by_reason=dict(by_reason),
            snapshot=snapshot,
        )
        self._notify_batch(report)
        return report

    def set_highwaters(self, highwaters: Mapping[PartitionKey, int | None]) -> None:
        """Record the brokers' highwater marks (for lag) and republish if any changed."""
        with self._lock:
            changed = False
            for key, highwater in highwaters.items():
                state = self._partitions.get(key)
                if state is not None and highwater is not None and state.highwater != highwater:
                    state.highwater = highwater
                    changed = True
            if not changed:
                return
            partitions = self._frozen_partitions()
            self._snapshot = replace(self._snapshot, partitions=partitions)
        call_observer(self._observer.on_lag, partitions)

    def set_owned(self, owned: Iterable[PartitionKey] | None) -> None:
        """Publish only these partitions in snapshots (``None``: every partition the state has).

        A standby holds the offsets of partitions it does not own; ``/stats`` lists only the
        ones this instance owns. The offsets themselves are kept either way.
        """
        with self._lock:
            self._owned = None if owned is None else frozenset(owned)
            self._snapshot = replace(self._snapshot, partitions=self._frozen_partitions())

    def track_partition(self, topic: str, partition: int, next_offset: int) -> None:
        """Start tracking a partition first read at ``next_offset`` (no checkpoint had it)."""
        with self._lock:
            if (topic, partition) not in self._partitions:
                self._partitions[(topic, partition)] = _Partition(next_offset)
                self._snapshot = replace(self._snapshot, partitions=self._frozen_partitions())

    # -- mixing mode (consumers.mixing) ---------------------------------------------------------

    def publish_mixed(
        self,
        learner: LinearLearner,
        invalid: Mapping[str, int],
        mixed_round: int,
        progress: Mapping[PartitionKey, tuple[int, int, int, int]],
    ) -> None:
        """Serve ``learner``, the mixed model of round ``mixed_round`` (same encoder and labels).

        ``progress`` gives, per partition, what the mixed rounds covered: offsets
        ``[start, end)``, events learned and records rejected.
        """
        with self._lock:
            for key, (start, end, learned, rejected) in progress.items():
                state = self._partitions.get(key) or _Partition(start)
                state.applied = [[start, end]] if end > start else []
                state.next_offset, state.learned, state.rejected = end, learned, rejected
                self._partitions[key] = state
            self._learner = learner
            self._invalid = Counter(invalid)
            self._mixed_round = mixed_round
            self._publish()
        if self._restore_report is None:
            # The first mixed model: the service is ready.
            self._restore_report = RestoreReport(
                restored=mixed_round > 0,
                path=None,
                sequence=mixed_round,
                skipped=(),
                seen=learner.n_seen,
                partitions=len(progress),
            )

    def set_mixing(self, section: Mapping[str, Any]) -> None:
        """Replace the ``/stats`` ``mixing`` section."""
        with self._lock:
            self._mixing = section
            self._snapshot = replace(self._snapshot, mixing=section)

    # -- internals ------------------------------------------------------------------------------

    def _install(self, learner: LinearLearner, tracker: BoundTracker) -> None:
        self._learner = learner
        self._tracker = tracker
        self._decoder = EventDecoder(
            learner.encoder, _labels_of(learner, self._lock), grow=learner.encoder.growable
        )
        self._described: tuple[tuple[int, int], Mapping[str, Any]] | None = None
        self._rate_points.clear()
        self._publish()

    def _check_offsets(self, batch: DecodedBatch) -> None:
        seen_in_batch: dict[PartitionKey, int] = {}
        for span in batch.spans:
            key = (span.topic, span.partition)
            floor = seen_in_batch.get(key)
            if floor is None:
                state = self._partitions.get(key)
                floor = None if state is None else state.next_offset
            if floor is not None and span.first_offset < floor:
                raise OffsetError(
                    f"{span.topic}/{span.partition}: offset {span.first_offset} is below the next "
                    f"offset {floor}; it was already applied"
                )
            if span.last_offset < span.first_offset:
                raise OffsetError(f"{span.topic}/{span.partition}: offsets out of order")
            seen_in_batch[key] = span.last_offset + 1

    def _partition(self, topic: str, partition: int, first_offset: int) -> _Partition:
        key = (topic, partition)
        state = self._partitions.get(key)
        if state is None:
            state = self._partitions[key] = _Partition(first_offset)
        return state

    def _frozen_partitions(self) -> tuple[PartitionProgress, ...]:
        owned = self._owned
        return tuple(
            state.frozen(key)
            for key, state in sorted(self._partitions.items())
            if owned is None or key in owned
        )

    def _publish(self) -> EngineSnapshot:
        learner = self._learner
        now = self._clock()
        seen = learner.n_seen
        self._rate_points.append((now, seen))
        while len(self._rate_points) > 1 and now - self._rate_points[0][0] > RATE_WINDOW_SECONDS:
            self._rate_points.popleft()
        first_time, first_seen = self._rate_points[0]
        rate = (seen - first_seen) / (now - first_time) if now > first_time else 0.0
        snapshot = EngineSnapshot(
            predictor=learner.snapshot(),
            seen=seen,
            mistakes=learner.n_updates,
            prequential=dict(learner.prequential_mistakes),
            bounds=tuple(self._tracker.status()),
            radius=float(self._tracker.radius),
            margin_estimate=self._tracker.margin_estimate(),
            invalid=dict(self._invalid),
            partitions=self._frozen_partitions(),
            events_per_second=rate,
            taken_at=now,
            description=self._description(),
            voted={"voters": learner.n_voters, "dropped_voters": learner.dropped_voters},
            mixing=self._mixing,
            mixed_round=self._mixed_round,
        )
        self._snapshot = snapshot
        return snapshot

    def _description(self) -> Mapping[str, Any]:
        shape = (self._learner.dimension, len(classes_of(self._learner)))
        if self._described is None or self._described[0] != shape:
            self._described = (shape, _describe(self._learner))
        return self._described[1]

    def _notify_batch(self, report: BatchReport) -> None:
        call_observer(self._observer.on_batch, report)
        for reason, count in report.rejected_by_reason.items():
            call_observer(self._observer.on_rejected, reason, count)
