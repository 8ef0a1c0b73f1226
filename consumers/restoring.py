"""Restoring an owner's state: the newest committed one among the state topic and the cache.

A :class:`Candidate` is a committed state the owner could resume from: the state topic's newest
record that verifies and loads (:func:`state_topic_candidate`), the local checkpoint cache
(:func:`cache_candidate`), or the state the process started from. :func:`restore_newest`
installs the one that has applied the most records (ties to the earliest listed).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from consumers.engine import Engine
from consumers.engine_state import IncompatibleCheckpointError
from consumers.partitions import LoadedState
from consumers.reports import RestoreReport
from consumers.state.checkpoint import CheckpointStore
from consumers.state.topic import read_state_records
from learning import StateError

if TYPE_CHECKING:
    from consumers.transactions import TransactionSettings

logger = logging.getLogger(__name__)

STATE_TOPIC_REMEDY = (
    "a new model needs another [kafka] group_id or state_topic; the model settings must match "
    "the ones the state topic was written with"
)


@dataclass(frozen=True)
class Candidate:
    """A committed state the owner could resume from."""

    origin: str
    state: LoadedState
    sequence: int | None = None
    path: str | None = None


def state_topic_candidate(
    engine: Engine,
    connection: Mapping[str, Any],
    settings: TransactionSettings,
    group: str,
) -> Candidate | None:
    """The newest state record of ``group``'s model that verifies and loads, if any.

    A record that fails verification or that ``learning.load_state`` refuses is skipped with an
    ERROR and the previous one is tried.

    Raises
    ------
    IncompatibleCheckpointError
        When the newest loadable record holds another model than the engine's.
    StateTopicUnavailableError
        When the state topic cannot be read.
    """
    records = read_state_records(
        connection,
        settings.state_topic,
        settings.key(group),
        timeout_s=settings.state_read_timeout_seconds,
    )
    for record in records:
        try:
            state = engine.load_payload(record.payload, STATE_TOPIC_REMEDY)
        except IncompatibleCheckpointError as exc:
            raise foreign_model(settings, group, exc) from None
        except (StateError, ValueError) as exc:
            logger.error(
                "state record %s@%d cannot be loaded (%s); the previous one is used",
                settings.state_topic,
                record.offset,
                exc,
            )
            continue
        return Candidate(
            f"state record {settings.state_topic}@{record.offset}", state, record.sequence
        )
    return None


def foreign_model(
    settings: TransactionSettings, group: str, exc: IncompatibleCheckpointError
) -> IncompatibleCheckpointError:
    """The error naming the state topic and key whose record holds another model."""
    return IncompatibleCheckpointError(
        f"state topic {settings.state_topic!r}, key {settings.key(group).decode()}: {exc}"
    )


def cache_candidate(engine: Engine, store: CheckpointStore) -> Candidate | None:
    """The newest local checkpoint (the cache) that verifies and loads, if any."""
    if not store.files():
        return None
    for loaded in store.load_valid():
        try:
            state = engine.load_payload(loaded.payload)
        except (StateError, ValueError) as exc:
            store.quarantine(loaded.path, f"cannot be loaded: {exc}")
            continue
        return Candidate(f"checkpoint {loaded.path.name}", state, loaded.sequence, str(loaded.path))
    return None


def restore_newest(engine: Engine, candidates: Sequence[Candidate | None]) -> RestoreReport | None:
    """Install the candidate that has applied the most records; ties go to the earliest listed.

    Every candidate is a committed state of the same history, so the one that has applied the
    most is the newest. ``None`` (nothing installed) when there is no candidate.
    """
    present = [c for c in candidates if c is not None]
    if not present:
        return None
    best = present[0]
    for candidate in present[1:]:
        if candidate.state.applied > best.state.applied:
            best = candidate
    return engine.install(best.state, best.origin, best.path, best.sequence)
