"""The consumer runner's checkpoints, commits, transactions and rebalances.

:class:`RunnerCommits` is the part of :class:`~consumers.runner.ConsumerRunner` that saves what
the loop applied: a local checkpoint then a monitoring-only group commit, or (with
``RunnerSettings.transactions``) one transaction holding dead letters, state record and offsets,
then the local cache; a periodic checkpoint's transaction is committed on a thread of its own
(:mod:`consumers.background_commit`) while the loop goes on, and settled before any other
transactional step. It also answers the group's rebalances (:class:`RebalanceListener`, on
kafka-python's IO thread) and, with transactions, fences, restores and seeks after an assignment
(:meth:`~RunnerCommits._transactional_turn`). The ordering rules are in :mod:`consumers.runner`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from kafka import ConsumerRebalanceListener, OffsetAndMetadata, TopicPartition

from consumers.background_commit import BackgroundCommit
from consumers.engine import Engine
from consumers.engine_state import IncompatibleCheckpointError
from consumers.kafka_clients import Consumer
from consumers.partitions import offsets_text
from consumers.reports import PartitionKey
from consumers.runner_health import Backoff, RunnerHealth
from consumers.state.checkpoint import CheckpointStore
from consumers.transactions import Owner

logger = logging.getLogger("consumers.runner")
"""The runner's logger (see :mod:`consumers.runner_health`)."""

MIN_COMMIT_TIMEOUT_MS = 100


class RebalanceListener(ConsumerRebalanceListener):  # type: ignore[misc]
    """kafka-python rebalance listener that forwards to the runner."""

    def __init__(self, runner: RunnerCommits) -> None:
        self._runner = runner

    def on_partitions_revoked(self, revoked: Any) -> None:
        self._runner._on_revoked(revoked, lost=False)

    def on_partitions_lost(self, lost: Any) -> None:
        self._runner._on_revoked(lost, lost=True)

    def on_partitions_assigned(self, assigned: Any) -> None:
        self._runner._on_assigned(assigned)


class RunnerCommits(RunnerHealth):
    """Checkpoints, commits and rebalances (a base of :class:`~consumers.runner.ConsumerRunner`)."""

    _engine: Engine
    _store: CheckpointStore
    _owner: Owner | None
    _consumer: Consumer | None
    _stop: threading.Event
    _backoff: Backoff
    _applied_since_checkpoint: int
    _last_checkpoint: float
    _commits: BackgroundCommit

    def _due_by_events(self) -> bool:
        return self._applied_since_checkpoint >= self._settings.checkpoint_every_events

    def _maybe_checkpoint(self) -> None:
        if self._applied_since_checkpoint and (
            self._due_by_events()
            or time.monotonic() - self._last_checkpoint >= self._settings.checkpoint_every_seconds
        ):
            self._checkpoint("interval", blocking_commit=False)

    def _checkpoint(self, why: str, *, commit: bool = True, blocking_commit: bool = True) -> bool:
        """Save a checkpoint, then commit its offsets for monitoring; whether the save worked."""
        if self._owner is not None:
            return self._commit_transaction(why, wait=blocking_commit) if commit else False
        try:
            report = self._engine.checkpoint(self._store)
        except Exception as exc:
            logger.error("checkpoint (%s) failed: %r; the previous one stays in place", why, exc)
            return False
        self._applied_since_checkpoint = 0
        self._last_checkpoint = time.monotonic()
        logger.info(
            "checkpoint %s written (%s) in %.3fs",
            report.sequence,
            why,
            report.seconds,
            extra={
                "checkpoint": report.sequence,
                "trigger": why,
                "bytes": report.size_bytes,
                "next_offsets": {f"{t}/{p}": o for (t, p), o in sorted(report.offsets.items())},
            },
        )
        if commit:
            self._commit(report.offsets, blocking=blocking_commit)
        return True

    def _commit_transaction(self, why: str, *, wait: bool = True) -> bool:
        """Commit dead letters, state record and offsets in one transaction, then the cache.

        The local checkpoint is written only after the commit, so the cache never holds work
        Kafka does not. A failed commit voids everything since the previous one. Without
        ``wait`` the commit runs on the commit thread (:meth:`_settle_commit` takes its outcome)
        and the loop goes on; what it applies meanwhile joins the next transaction. Returns
        whether the commit succeeded (without ``wait``: whether it was started).
        """
        owner, consumer = self._owner, self._consumer
        assert owner is not None
        if not self._settle_commit(block=True):
            return False
        if consumer is None or owner.activation_needed or owner.dirty:
            return False
        assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        if not assigned:
            return False
        prepared = self._engine.checkpoint_bytes()
        metadata = _group_metadata(consumer)
        applied, self._applied_since_checkpoint = self._applied_since_checkpoint, 0
        self._last_checkpoint = time.monotonic()
        self._commits.submit(
            lambda: self._commit_and_cache(owner, prepared, assigned, metadata, why),
            why=why,
            applied=applied,
        )
        return self._settle_commit(block=True) if wait else True

    def _commit_and_cache(
        self,
        owner: Owner,
        prepared: tuple[bytes, dict[PartitionKey, int]],
        assigned: set[PartitionKey],
        metadata: Any,
        why: str,
    ) -> int:
        """The commit of one checkpoint, then its local cache (on the commit thread)."""
        sequence = owner.commit(prepared, assigned, metadata)
        logger.info(
            "state record %d committed (%s) with offsets %s",
            sequence,
            why,
            offsets_text(prepared[1].items()),
        )
        try:
            self._engine.checkpoint(self._store, prepared)
        except Exception as exc:
            logger.warning("local checkpoint cache not written (%r); Kafka holds the state", exc)
        return sequence

    def _settle_commit(self, *, block: bool) -> bool:
        """Take the outcome of the commit under way once it has ended (waiting with ``block``).

        A failed commit voids everything since the previous commit, including what the loop
        applied while it was under way. Returns ``False`` only then.
        """
        settled = self._commits.settle(block=block)
        if settled is None or settled.error is None:
            return True
        logger.error(
            "checkpoint (%s) not committed, %d applied record(s) void: %s",
            settled.why,
            settled.applied + self._applied_since_checkpoint,
            settled.error,
        )
        self._void_transaction()
        return False

    def _void_transaction(self) -> None:
        """After a failed transaction: abort it, give up ownership and rejoin the group.

        The producer is registered again only on a fresh assignment from the group: a member
        that was replaced while paused (a zombie) must never fence its successor.
        """
        owner = self._owner
        assert owner is not None
        self._commits.settle(block=True)  # whatever its outcome, all since it is void
        owner.discard()
        owner.assignor.disown()
        self._engine.set_owned(())
        owner.activation_needed = False
        self._applied_since_checkpoint = 0
        self._resubscribe = True

    def _warm_start(self, owner: Owner) -> bool:
        """Start from the state topic when it is newer; ``False`` when it holds another model."""
        try:
            owner.warm_start()
        except IncompatibleCheckpointError as exc:
            logger.error("cannot start: %s", exc)
            self._set_disconnected(str(exc))
            return False
        except Exception as exc:
            logger.warning("state topic not read at start (%r); it is read on assignment", exc)
        return True

    def _transactional_turn(
        self, consumer: Consumer, polled: Mapping[Any, list[Any]]
    ) -> Mapping[Any, list[Any]] | None:
        """Fence, restore and seek after an assignment, or drop void work.

        Returns the polled records the round may go on with (``None``: none, end the round).
        The assigned partitions were paused on assignment (:meth:`_on_assigned`), so nothing of
        theirs was fetched before the restore; after the activation they are sought to the
        restored offsets and resumed. A partition's polled records are kept only when they start
        at the restored next offset (:func:`_resuming`); any other polled records are dropped.
        """
        owner = self._owner
        assert owner is not None
        if not (owner.activation_needed or owner.dirty):
            return polled
        self._settle_commit(block=True)
        kept: dict[Any, list[Any]] = {}
        if owner.dirty:
            owner.discard()
        try:
            if owner.activation_needed and consumer.assignment():
                # Cleared first: an assignment arriving meanwhile (the group's IO thread does not
                # wait for this one) asks for another activation.
                owner.activation_needed = False
                try:
                    owner.activate()
                except BaseException:
                    owner.activation_needed = True
                    raise
                assigned = consumer.assignment()
                kept = _resuming(self._engine, polled, assigned)
                self._seek_to_engine(consumer, [tp for tp in assigned if tp not in kept])
                self._engine.set_owned((tp.topic, tp.partition) for tp in assigned)
                consumer.resume(*assigned)
                logger.info(
                    "owner of %s; resuming from the restored state", _partition_names(assigned)
                )
            else:
                owner.activation_needed = False
                owner.restore()
        except IncompatibleCheckpointError as exc:
            logger.error("consumer cannot learn: %s; stopping", exc)
            self._set_disconnected(str(exc))
            self._stop.set()
            return None
        except Exception as exc:
            logger.warning("cannot take over the partitions yet (%r); retrying", exc)
            self._set_disconnected(f"restoring the state from Kafka: {exc!r}")
            self._stop.wait(self._backoff.next())
            return None
        self._applied_since_checkpoint = 0
        self._last_checkpoint = time.monotonic()
        return kept or None

    def _commit(self, offsets: Mapping[PartitionKey, int], *, blocking: bool) -> None:
        consumer = self._consumer
        if consumer is None or not offsets:
            return
        try:
            assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
            to_commit = {
                topic_partition(*key): _offset_and_metadata(offset)
                for key, offset in offsets.items()
                if key in assigned
            }
            if not to_commit:
                return
            if blocking:
                consumer.commit(to_commit, timeout_ms=self._commit_timeout_ms())
            else:
                consumer.commit_async(to_commit, callback=_log_failed_commit)
        except Exception as exc:
            # Committed offsets only serve monitoring: the checkpoint is the source of truth.
            logger.warning("offset commit failed (monitoring only): %r", exc)

    def _commit_timeout_ms(self) -> int:
        return max(MIN_COMMIT_TIMEOUT_MS, int(self._settings.poll_timeout_ms * 10))

    # -- rebalances (called on kafka-python's IO thread, while poll()/close() blocks) -----------

    def _on_revoked(self, partitions: Any, *, lost: bool) -> None:
        if not partitions:
            # A first join "revokes" the empty assignment: nothing was applied, nothing to say.
            return
        names = _partition_names(partitions)
        logger.info("partitions %s %s; checkpointing", names, "lost" if lost else "revoked")
        if self._owner is not None:
            # No blocking call on the group's IO thread: the open transaction is void, and the
            # consumer thread aborts it and restores the last commit (_transactional_turn).
            self._owner.dirty = True
            if lost:
                # Another member may own them already.
                self._owner.assignor.disown()
                self._engine.set_owned(())
            self._applied_since_checkpoint = 0
            return
        if self._applied_since_checkpoint:
            # Blocking consumer calls are not allowed on the IO thread: commit asynchronously.
            self._checkpoint("revoke", commit=not lost, blocking_commit=False)

    def _on_assigned(self, partitions: Any) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        if self._owner is not None:
            # Seeking waits for the restore on the consumer thread (_transactional_turn); until
            # then the partitions stay paused, so no record is fetched from a position the
            # restored state may not confirm (Kafka Streams restores paused tasks the same way).
            if partitions:
                consumer.pause(*partitions)
            self._owner.activation_needed = bool(partitions)
            if not partitions:
                self._owner.close(timeout=0)
                self._engine.set_owned(())
            return
        self._seek_to_engine(consumer, partitions)

    def _seek_to_engine(self, consumer: Consumer, partitions: Any) -> None:
        """Position ``partitions`` at the engine's next offsets (``auto_offset_reset`` if new)."""
        fresh = []
        for tp in partitions:
            offset = self._engine.next_offset(tp.topic, tp.partition)
            if offset is None:
                fresh.append(tp)
            else:
                consumer.seek(tp, offset)
        if fresh:
            if self._settings.auto_offset_reset == "latest":
                consumer.seek_to_end(*fresh)
            else:
                consumer.seek_to_beginning(*fresh)
        if not partitions:
            # An empty assignment (a topic not created yet) resumes nothing.
            return
        logger.info(
            "assigned %s; resuming from the checkpointed offsets%s",
            _partition_names(partitions),
            f" ({_partition_names(fresh)} from {self._settings.auto_offset_reset})"
            if fresh
            else "",
        )


def _log_failed_commit(offsets: Any, response: Any) -> None:
    """The callback of an asynchronous commit: a failure is logged (monitoring only)."""
    if isinstance(response, BaseException):
        logger.warning("offset commit failed (monitoring only): %r", response)


def _resuming(
    engine: Engine, polled: Mapping[Any, list[Any]], assigned: set[Any]
) -> dict[Any, list[Any]]:
    """The polled records of assigned partitions that start exactly at the engine's next offset.

    A partition the restored state has no offset for is not among them: its consumer position
    may have moved past records applied before the restore and discarded by it (work of a
    previous generation never committed), so it is sought to ``auto_offset_reset`` instead.
    """
    return {
        tp: records
        for tp, records in polled.items()
        if tp in assigned
        and records
        and engine.next_offset(tp.topic, tp.partition) == records[0].offset
    }


def _group_metadata(consumer: Consumer) -> Any:
    """The consumer's group metadata for ``send_offsets_to_transaction`` (KIP-447 fencing)."""
    metadata = getattr(consumer, "group_metadata", None)
    return metadata() if callable(metadata) else None


def topic_partition(topic: str, partition: int) -> Any:
    return TopicPartition(topic, partition)


def _offset_and_metadata(offset: int) -> Any:
    return OffsetAndMetadata(offset, "", -1)


def _partition_names(partitions: Any) -> str:
    names = sorted(f"{tp.topic}/{tp.partition}" for tp in partitions)
    return "[" + ", ".join(names) + "]"
