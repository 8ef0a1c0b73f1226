"""The engine's persistence: its model, counters and offsets as one state, saved and restored.

:class:`EnginePersistence` is the part of :class:`~consumers.engine.Engine` that serialises the
state (:meth:`~EnginePersistence.checkpoint_bytes`, the versioned ``learning.dump_state`` with
the offsets and counters as its ``extra``), saves it to a checkpoint store, and loads one back,
refusing a state of another model (:class:`IncompatibleCheckpointError`). It is a base class of
the engine and shares its state (the attributes declared below); the model and its offsets are
replaced together, under the engine's lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from consumers.partitions import (
    STATE_FORMAT,
    LoadedState,
    _Partition,
    _partitions_from,
    offsets_text,
)
from consumers.reports import (
    CheckpointReport,
    EngineObserver,
    PartitionKey,
    RestoreReport,
    call_observer,
)
from consumers.state.checkpoint import CheckpointStore, SkippedCheckpoint
from learning import (
    BoundTracker,
    LinearLearner,
    MulticlassPerceptron,
    Perceptron,
    StateError,
    dump_state,
    load_state,
)

logger = logging.getLogger("consumers.engine")
"""The engine's logger: its lines keep one name, whichever module of the engine writes them."""

CHECKPOINT_REMEDY = "move the checkpoint directory away to start a new model"


class IncompatibleCheckpointError(RuntimeError):
    """A checkpoint holds a model of another shape or kind than the configured one."""


def _same_labels(one: LinearLearner, other: LinearLearner) -> bool:
    """Whether two learners predict the same labels: both multiclass models that discover their
    classes as they appear (a later state holds more of them, an earlier fewer), or neither, with
    equal lists."""
    discovering = [
        isinstance(learner, MulticlassPerceptron) and learner.classes is None
        for learner in (one, other)
    ]
    if any(discovering):
        return all(discovering)
    return classes_of(one) == classes_of(other)


def classes_of(learner: LinearLearner) -> list[Any]:
    """The labels (binary) or classes (multiclass) a learner predicts, in its order."""
    if isinstance(learner, MulticlassPerceptron):
        return list(learner.class_labels)
    if isinstance(learner, Perceptron):
        return list(learner.label_map.labels)
    raise TypeError(f"unsupported learner {type(learner).__name__}")


class EnginePersistence:
    """Checkpoints and state records of the engine (a base of :class:`~consumers.engine.Engine`)."""

    _lock: threading.RLock
    _observer: EngineObserver
    _clock: Callable[[], float]
    _partitions: dict[PartitionKey, _Partition]
    _invalid: Counter[str]
    _learner: LinearLearner
    _tracker: BoundTracker
    _restore_report: RestoreReport | None

    def checkpoint_bytes(self) -> tuple[bytes, dict[PartitionKey, int]]:
        """The model, tracker, counters and offsets as one blob, and the offsets it holds."""
        with self._lock:
            offsets = {key: state.next_offset for key, state in self._partitions.items()}
            extra = {
                "format": STATE_FORMAT,
                "partitions": [
                    state.to_state(key) for key, state in sorted(self._partitions.items())
                ],
                "invalid": dict(self._invalid),
                "saved_at": self._clock(),
            }
            return dump_state(self._learner, self._tracker, extra), offsets

    def checkpoint(
        self,
        store: CheckpointStore,
        prepared: tuple[bytes, dict[PartitionKey, int]] | None = None,
    ) -> CheckpointReport:
        """Save a checkpoint to ``store``; failures are reported, logged and raised.

        ``prepared`` is a :meth:`checkpoint_bytes` result (the state record of the same
        checkpoint), saved instead of serialising again; it may predate the latest :meth:`apply`
        (a commit that ran while the loop went on): the cache then holds what Kafka holds.
        """
        started = time.perf_counter()
        try:
            payload, offsets = prepared if prepared is not None else self.checkpoint_bytes()
            info = store.save(payload)
        except Exception as exc:
            report = CheckpointReport(
                ok=False,
                seconds=time.perf_counter() - started,
                size_bytes=0,
                sequence=None,
                error=repr(exc),
            )
            call_observer(self._observer.on_checkpoint, report)
            raise
        report = CheckpointReport(
            ok=True,
            seconds=time.perf_counter() - started,
            size_bytes=info.size_bytes,
            sequence=info.sequence,
            offsets=offsets,
        )
        call_observer(self._observer.on_checkpoint, report)
        return report

    def restore(self, store: CheckpointStore) -> RestoreReport:
        """Load the newest usable checkpoint from ``store`` (falling back to older ones).

        A checkpoint whose bytes verify but whose content ``learning.load_state`` refuses is
        skipped and moved aside like a damaged one. With none usable, the engine keeps its fresh
        model and says so (WARNING). A checkpoint of another model shape raises
        :class:`IncompatibleCheckpointError`: silently dropping a trained model would be worse.
        """
        skipped: list[SkippedCheckpoint] = []
        for loaded in store.load_valid():
            skipped.extend(loaded.skipped)
            try:
                state = self.load_payload(loaded.payload)
            except (StateError, ValueError) as exc:
                reason = f"cannot be loaded: {exc}"
                store.quarantine(loaded.path, reason)
                skipped.append(SkippedCheckpoint(path=loaded.path, reason=reason))
                continue
            return self.install(
                state, f"checkpoint {loaded.path.name}", str(loaded.path), loaded.sequence, skipped
            )
        if skipped:
            logger.error(
                "NO usable checkpoint: %d checkpoint(s) in %s were damaged or unreadable; "
                "starting from an EMPTY model",
                len(skipped),
                store.directory,
            )
        self._restore_report = RestoreReport(
            restored=False, path=None, sequence=None, skipped=tuple(skipped), seen=0, partitions=0
        )
        return self._restore_report

    @property
    def applied(self) -> int:
        """Records applied so far (learned + rejected), the measure :class:`LoadedState` shares."""
        with self._lock:
            return self._learner.n_seen + sum(self._invalid.values())

    def load_payload(self, payload: bytes, remedy: str = CHECKPOINT_REMEDY) -> LoadedState:
        """Load a ``checkpoint_bytes`` payload and check it holds this engine's model.

        ``remedy`` ends the :class:`IncompatibleCheckpointError` message: how to start anew.

        Raises
        ------
        IncompatibleCheckpointError
            When the payload holds another model (learner, encoder, labels or references).
        StateError, ValueError
            When the payload is damaged or not a state this engine wrote.
        """
        try:
            learner, tracker, extra = load_state(payload)
            self._check_compatible(learner, tracker, remedy)
            partitions, invalid = _partitions_from(extra)
        except IncompatibleCheckpointError:
            raise
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed state: {exc!r}") from exc
        assert tracker is not None
        return LoadedState(learner, tracker, partitions, invalid)

    def install(
        self,
        state: LoadedState,
        origin: str,
        path: str | None = None,
        sequence: int | None = None,
        skipped: Sequence[SkippedCheckpoint] = (),
    ) -> RestoreReport:
        """Replace the model, counters and offsets with ``state`` (from :meth:`load_payload`)."""
        with self._lock:
            self._partitions = dict(state.partitions)
            self._invalid = Counter(state.invalid)
            self._install(state.learner, state.tracker)
        logger.info(
            "restored %s: %d events learned, %d partition(s): %s",
            origin,
            state.learner.n_seen,
            len(state.partitions),
            offsets_text((key, p.next_offset) for key, p in state.partitions.items()),
        )
        self._restore_report = RestoreReport(
            restored=True,
            path=path,
            sequence=sequence,
            skipped=tuple(skipped),
            seen=state.learner.n_seen,
            partitions=len(state.partitions),
        )
        return self._restore_report

    def _check_compatible(
        self, learner: LinearLearner, tracker: BoundTracker | None, remedy: str = CHECKPOINT_REMEDY
    ) -> None:
        current = self._learner
        problems = []
        if type(learner) is not type(current):
            problems.append(f"learner {type(learner).__name__} != {type(current).__name__}")
        if learner.encoder.to_state() | {"vocabulary": None} != current.encoder.to_state() | {
            "vocabulary": None
        }:
            problems.append(f"encoder {learner.encoder!r} != {current.encoder!r}")
        if not _same_labels(learner, current):
            problems.append("labels or classes differ")
        if tracker is None:
            problems.append("no bound tracker saved")
        elif [r.name for r in tracker.references] != [r.name for r in self._tracker.references]:
            problems.append("bound references differ")
        if problems:
            raise IncompatibleCheckpointError(
                "the checkpoint holds a different model than the configuration: "
                + "; ".join(problems)
                + f" ({remedy})"
            )

    def _install(self, learner: LinearLearner, tracker: BoundTracker) -> None:
        """Make ``learner`` and ``tracker`` the engine's (the engine defines it)."""
        raise NotImplementedError
