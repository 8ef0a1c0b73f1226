"""The Kafka consumer loop: a thin kafka-python wrapper around the engine (quix-streams style).

One background thread owns the consumer. Each round it polls a batch, drops records the engine
has already applied, decodes, dead-letters the rejections (waiting for the broker's
acknowledgement), applies the batch, updates lag, and checkpoints every N events or T seconds.

Ordering of effects, which is what makes every event count exactly once:

1. dead-letter records are acknowledged *before* their source offsets are applied; a failed
   dead-letter write cuts the batch at the first unwritten record and seeks back there;
2. the model, counters and offsets are saved together, atomically
   (:mod:`consumers.state.checkpoint`);
3. group offsets are committed only *after* the checkpoint is durable, and only for monitoring
   (asynchronously after periodic checkpoints, so the loop never waits for the coordinator;
   the final commit at shutdown waits):
   on every assignment the consumer seeks to the checkpointed offsets (or, for a partition no
   checkpoint knows, to ``auto_offset_reset``), never to the committed ones.

With ``RunnerSettings.transactions`` (exactly once, :mod:`consumers.transactions`) the order
is: dead letters join the owner's open transaction; at each checkpoint the state record and the
group's offsets join it and it commits; only then is the local checkpoint (a cache) written. On
assignment the owner fences its predecessors, restores the newest committed state and seeks to
it; a failed transaction voids everything since the last commit.

Rebalances: partitions being revoked (or lost) are checkpointed first; newly assigned ones are
positioned at the engine's next offsets. The listener runs on kafka-python's IO thread while the
consumer thread is blocked inside ``poll()``/``close()``, and only touches the engine under its
lock. A join kafka-python 3.0.12 would leave unfinished (one its IO thread completed while the
consumer thread was away from ``poll()``) is asked for again before each poll
(:func:`consumers.kafka_compat.resume_stranded_join`).

Failures: the consumer is built lazily and rebuilt after errors, with exponential backoff; when
the broker is away, ``poll()`` waits instead of spinning and :attr:`ConsumerRunner.connected`
turns false with a :attr:`~ConsumerRunner.not_ready_reason`. Errors retrying cannot fix (see
:mod:`consumers.faults`: an undecodable codec, an authorization failure, a subscribed topic absent
from the metadata for longer than ``missing_topic_grace_seconds``) are retried at the longest
backoff, logged once per distinct cause at ERROR with their fix, and exposed as
:attr:`~ConsumerRunner.fault`; every error reaches the ``FaultObserver`` (the service's metric).

:meth:`ConsumerRunner.stop` (for SIGTERM) finishes the current batch, writes a final checkpoint
and commits, within ``shutdown_deadline_seconds``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition

from consumers.decoding.events import DecodedBatch, Rejection, SourceRecord
from consumers.dlq import DeadLetterError, DeadLetterWriter, Producer
from consumers.engine import Engine, IncompatibleCheckpointError
from consumers.faults import (
    ConsumerFault,
    FaultKind,
    FaultObserver,
    NullFaultObserver,
    classify,
    unknown_topic,
)
from consumers.kafka_clients import (
    Consumer,
    ConsumerFactory,
    ProducerFactory,
    RunnerSettings,
    kafka_consumer,
    kafka_producer,
)
from consumers.kafka_compat import resume_stranded_join
from consumers.partitions import offsets_text
from consumers.reports import PartitionKey
from consumers.state.checkpoint import CheckpointStore
from consumers.transactions import Owner, TransactionError

logger = logging.getLogger(__name__)

BACKOFF_FACTOR = 2.0
MIN_COMMIT_TIMEOUT_MS = 100
QUICK_POLL_SHARE = 0.5
"""An empty poll that returns faster than this share of its timeout while disconnected is
followed by a backoff wait, so a misbehaving client can never spin the CPU."""
SHUTDOWN_COMMIT_SHARE = 0.5
"""The share of ``shutdown_deadline_seconds`` the final transaction may wait for the broker."""
LEAVE_GROUP_TIMEOUT_MS = 1_000
"""How long closing a consumer on a reachable broker waits to leave its group cleanly."""

COORDINATOR_UNREACHABLE = "the group coordinator is unreachable (broker down or restarting?)"
REBALANCING = "joining the consumer group (rebalance in progress)"


class _Backoff:
    """Exponential backoff between reconnection attempts."""

    def __init__(self, first: float, maximum: float) -> None:
        self._first = first
        self._maximum = maximum
        self._next = first

    def next(self) -> float:
        delay = self._next
        self._next = min(self._maximum, self._next * BACKOFF_FACTOR)
        return delay

    def reset(self) -> None:
        self._next = self._first


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """kafka-python rebalance listener that forwards to the runner."""

    def __init__(self, runner: ConsumerRunner) -> None:
        self._runner = runner

    def on_partitions_revoked(self, revoked: Any) -> None:
        self._runner._on_revoked(revoked, lost=False)

    def on_partitions_lost(self, lost: Any) -> None:
        self._runner._on_revoked(lost, lost=True)

    def on_partitions_assigned(self, assigned: Any) -> None:
        self._runner._on_assigned(assigned)


class ConsumerRunner:
    """Runs the consumer loop on a background thread.

    Parameters
    ----------
    engine
        Applies batches and holds the offsets (restore it from ``store`` before starting).
    store
        Where checkpoints go.
    settings
        Kafka and checkpoint settings.
    consumer_factory, producer_factory
        Build the Kafka clients (kafka-python by default; tests may pass their own).
    dead_letters
        The dead-letter writer (default: one on ``settings.dlq_topic`` with ``producer_factory``).
    fault_observer
        Told of every consumer error (the service counts them by kind).
    ensure_state_topic
        With ``settings.transactions``: creates the state topic when it is missing.
    """

    def __init__(
        self,
        engine: Engine,
        store: CheckpointStore,
        settings: RunnerSettings,
        *,
        consumer_factory: ConsumerFactory = kafka_consumer,
        producer_factory: ProducerFactory = kafka_producer,
        dead_letters: DeadLetterWriter | None = None,
        fault_observer: FaultObserver | None = None,
        ensure_state_topic: Callable[[], object] | None = None,
    ) -> None:
        self._engine = engine
        self._store = store
        self._settings = settings
        self._consumer_factory = consumer_factory
        self._owner: Owner | None = None
        self._client_settings = settings
        if settings.transactions is not None:
            owner = self._owner = Owner(
                engine,
                store,
                settings.transactions,
                settings.group,
                settings.connection_config(),
                ensure_state_topic=ensure_state_topic,
                follower_consumer=KafkaConsumer,
            )
            self._client_settings = replace(
                settings,
                consumer_config={
                    **settings.consumer_config,
                    "partition_assignment_strategy": [owner.assignor],
                },
            )
            producer_factory = _shared(owner.producer)
            engine.set_owned(())  # nothing is owned until the group assigns it
        self._dead_letters = dead_letters or DeadLetterWriter(
            lambda: producer_factory(settings),
            settings.dlq_topic,
            flush_timeout_seconds=settings.dlq_timeout_seconds,
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Consumer | None = None
        self._backoff = _Backoff(settings.backoff_seconds, settings.backoff_max_seconds)
        self._connected = False
        self._reason: str | None = "the consumer has not started"
        self._applied_since_checkpoint = 0
        self._last_checkpoint = time.monotonic()
        self._final_checkpoint_ok: bool | None = None
        self._fault_observer = fault_observer or NullFaultObserver()
        self._fault: ConsumerFault | None = None
        self._reported: set[tuple[FaultKind, str]] = set()
        self._topic_missing_since: float | None = None
        self._resubscribe = False

    # -- state ----------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Whether the consumer currently reaches the broker and its group coordinator."""
        return self._connected

    @property
    def not_ready_reason(self) -> str | None:
        """Why the consumer is not connected (``None`` when it is)."""
        return None if self._connected else self._reason

    @property
    def fault(self) -> ConsumerFault | None:
        """The error retrying cannot fix that keeps the consumer from learning, if any."""
        return None if self._connected else self._fault

    @property
    def running(self) -> bool:
        """Whether the consumer thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def final_checkpoint_ok(self) -> bool | None:
        """After the loop ended: whether its final checkpoint (if one was due) was written."""
        return self._final_checkpoint_ok

    @property
    def settings(self) -> RunnerSettings:
        """The runner's settings."""
        return self._settings

    @property
    def dead_letters(self) -> DeadLetterWriter:
        """The dead-letter writer."""
        return self._dead_letters

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the consumer thread (once)."""
        if self._thread is not None:
            raise RuntimeError("the runner was already started")
        self._thread = threading.Thread(target=self.run, name="novikoff-consumer", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> bool:
        """Ask the loop to stop; with ``timeout``, wait that long and say whether it stopped.

        The loop finishes its current batch, writes a final checkpoint, commits and closes the
        consumer, all within ``settings.shutdown_deadline_seconds``.
        """
        self._stop.set()
        self._limit_transaction_waits()
        if timeout is None:
            return not self.running
        return self.join(timeout)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; whether it has."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def run(self) -> None:
        """The loop (blocking); :meth:`start` runs it on a thread."""
        self._set_disconnected("connecting to Kafka")
        try:
            if self._engine.restore_report is None:
                self._engine.restore(self._store)
            if self._owner is not None:
                if not self._warm_start(self._owner):
                    return
                self._owner.start_following()
            while not self._stop.is_set():
                if self._consumer is None and not self._open():
                    self._stop.wait(self._retry_delay())
                    continue
                try:
                    self._round()
                except Exception as exc:
                    self._on_failure(exc)
                self._maybe_checkpoint()
        finally:
            self._shutdown()

    # -- one round ------------------------------------------------------------------------------

    def _round(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        started = time.monotonic()
        resume_stranded_join(consumer)
        polled = consumer.poll(
            timeout_ms=self._settings.poll_timeout_ms, max_records=self._settings.max_poll_records
        )
        if self._owner is not None:
            turned = self._transactional_turn(consumer, polled)
            if turned is None:
                return
            polled = turned
        records = self._fresh_records(polled)
        if polled:
            self._set_connected()
        else:
            self._check_connection(consumer)
        if self._resubscribe:
            # A group formed while the topic was missing may never assign it (seen on Tansu):
            # a fresh consumer joins with the topic in its metadata.
            self._resubscribe = False
            self._close_consumer(timeout_ms=LEAVE_GROUP_TIMEOUT_MS)
            return
        if records:
            self._process(consumer, records)
        self._update_lag(consumer)
        if not polled and not self._connected:
            quick = (time.monotonic() - started) * 1000 < (
                self._settings.poll_timeout_ms * QUICK_POLL_SHARE
            )
            if quick:
                self._stop.wait(self._backoff.next())

    def _fresh_records(self, polled: Mapping[Any, list[Any]]) -> list[SourceRecord]:
        """Polled records of every partition, in partition order, minus already-applied ones."""
        records: list[SourceRecord] = []
        for tp in sorted(polled, key=lambda tp: (tp.topic, tp.partition)):
            records.extend(self._engine.unapplied(tp.topic, tp.partition, polled[tp]))
        return records

    def _process(self, consumer: Consumer, records: list[SourceRecord]) -> None:
        size = self._engine.decoder.max_batch_rows
        for start in range(0, len(records), size):
            chunk = records[start : start + size]
            batch = self._engine.decoder.decode_batch(chunk)
            cut = self._dead_letter(batch)
            if cut and self._owner is not None:
                # Dead letters are part of the open transaction: void all of it, resume from
                # the last commit.
                self._void_transaction()
                self._set_disconnected("the dead-letter topic cannot be written; retrying")
                self._stop.wait(self._backoff.next())
                return
            if cut:
                kept = [
                    r for r in chunk if r.offset < cut.get((r.topic, r.partition), r.offset + 1)
                ]
                if kept:
                    self._engine.apply(self._engine.decoder.decode_batch(kept))
                    self._applied_since_checkpoint += len(kept)
                for (topic, partition), offset in cut.items():
                    consumer.seek(_topic_partition(topic, partition), offset)
                self._set_disconnected("the dead-letter topic cannot be written; retrying")
                self._stop.wait(self._backoff.next())
                return
            self._engine.apply(batch)
            self._applied_since_checkpoint += len(chunk)
            if self._due_by_events():
                self._checkpoint("every_events", blocking_commit=False)

    def _dead_letter(self, batch: DecodedBatch) -> dict[PartitionKey, int]:
        """Write the batch's rejections; the first unwritten offset per partition on failure."""
        if not batch.rejections:
            return {}
        try:
            self._dead_letters.write(batch.rejections)
        except DeadLetterError as exc:
            cut: dict[PartitionKey, int] = {}
            for rejection in exc.failed:
                key = (rejection.topic, rejection.partition)
                cut[key] = min(cut.get(key, rejection.offset), rejection.offset)
            logger.error(
                "dead-letter write failed (%s); not moving past %s",
                exc.cause,
                ", ".join(f"{t}/{p}@{o}" for (t, p), o in sorted(cut.items())),
            )
            self._dead_letters.reset()
            return cut
        for rejection in batch.rejections:
            _log_dead_letter(rejection)
        return {}

    # -- checkpoints and commits ----------------------------------------------------------------

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
            return self._commit_transaction(why) if commit else False
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

    def _commit_transaction(self, why: str) -> bool:
        """Commit dead letters, state record and offsets in one transaction, then the cache.

        The local checkpoint is written only after the commit, so the cache never holds work
        Kafka does not. A failed commit voids everything since the previous one.
        """
        owner, consumer = self._owner, self._consumer
        assert owner is not None
        if consumer is None or owner.activation_needed or owner.dirty:
            return False
        assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        if not assigned:
            return False
        prepared = self._engine.checkpoint_bytes()
        try:
            sequence = owner.commit(prepared, assigned, _group_metadata(consumer))
        except TransactionError as exc:
            logger.error(
                "checkpoint (%s) not committed, %d applied record(s) void: %s",
                why,
                self._applied_since_checkpoint,
                exc,
            )
            self._void_transaction()
            return False
        self._applied_since_checkpoint = 0
        self._last_checkpoint = time.monotonic()
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
        return True

    def _void_transaction(self) -> None:
        """After a failed transaction: abort it, give up ownership and rejoin the group.

        The producer is registered again only on a fresh assignment from the group: a member
        that was replaced while paused (a zombie) must never fence its successor.
        """
        owner = self._owner
        assert owner is not None
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
        After an activation, a partition's records are kept when they start at the restored next
        offset (:func:`_resuming`); the others are dropped and their partitions sought to the
        restored offsets.
        """
        owner = self._owner
        assert owner is not None
        if not (owner.activation_needed or owner.dirty):
            return polled
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
                _topic_partition(*key): _offset_and_metadata(offset)
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
            # Seeking waits for the restore on the consumer thread (_transactional_turn).
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

    # -- connection handling --------------------------------------------------------------------

    def _open(self) -> bool:
        try:
            consumer = self._consumer_factory(self._client_settings)
            consumer.subscribe([self._settings.topic], listener=_Listener(self))
            # The topic's metadata after subscribing and before the first join (in poll()): a
            # group leader that has none assigns the topic no partitions (and kafka-python may
            # not refresh it for minutes), and one fetched before subscribing leaves kafka-python's
            # metadata snapshot without the topic, so the leader's first assignment looks stale
            # as soon as the next metadata arrives and the group rebalances once more.
            consumer.partitions_for_topic(self._settings.topic)
        except Exception as exc:
            fault = self._classify(exc)
            if fault.retriable:
                self._count(fault)
                self._set_disconnected(f"cannot reach Kafka at {self._bootstrap()}: {exc}")
                logger.warning("cannot create the Kafka consumer: %r; retrying", exc)
            else:
                self._on_fault(fault)
            return False
        self._consumer = consumer
        self._set_disconnected("joining the consumer group")
        logger.info("consumer created for topic %s", self._settings.topic)
        return True

    def _check_connection(self, consumer: Consumer) -> None:
        reason = _disconnection_reason(consumer)
        if reason is None or reason == REBALANCING:
            # The broker answers: its metadata can be trusted to tell a missing topic.
            reason = self._missing_topic(consumer) or reason
        if reason is None:
            self._set_connected()
        else:
            self._set_disconnected(reason)

    def _missing_topic(self, consumer: Consumer) -> str | None:
        """Why the subscribed topic holds the consumer back, if it is absent from the metadata.

        Absent for less than the grace period, the topic may be on its way (just created, or the
        first metadata not in yet): the consumer waits. Past it, that is an ``unknown_topic``
        fault, reported once; it clears as soon as the topic shows up.
        """
        topic = self._settings.topic
        if consumer.assignment() or _topic_in_metadata(consumer, topic) is not False:
            self._topic_missing_since = None
            if self._fault is not None and self._fault.kind is FaultKind.UNKNOWN_TOPIC:
                logger.info("topic %s exists now; subscribing to it again", topic)
                self._fault = None
                self._resubscribe = True
                return f"topic {topic!r} exists now; subscribing to it again"
            return None
        now = time.monotonic()
        if self._topic_missing_since is None:
            self._topic_missing_since = now
        grace = self._settings.missing_topic_grace_seconds
        if now - self._topic_missing_since < grace:
            return f"waiting for topic {topic!r} to appear in the cluster's metadata"
        if self._fault is None or self._fault.kind is not FaultKind.UNKNOWN_TOPIC:
            self._on_fault(unknown_topic(topic, self._bootstrap(), grace))
        return self._fault.reason if self._fault is not None else None

    def _set_connected(self) -> None:
        if not self._connected:
            logger.info("consumer connected to Kafka")
        self._connected = True
        self._reason = None
        self._fault = None
        self._reported.clear()
        self._backoff.reset()

    def _set_disconnected(self, reason: str) -> None:
        """Not connected, for ``reason``; a standing fault stays the reason until it clears."""
        if self._fault is not None:
            reason = self._fault.reason
        if self._connected:
            logger.warning("consumer lost Kafka: %s", reason)
        self._connected = False
        self._reason = reason

    def _on_failure(self, exc: Exception) -> None:
        fault = self._classify(exc)
        if fault.retriable:
            self._count(fault)
            logger.warning("consumer error: %r; reconnecting", exc)
            self._set_disconnected(fault.reason)
        else:
            self._on_fault(fault)
        if self._owner is not None:
            if self._applied_since_checkpoint:
                logger.warning(
                    "%d applied record(s) void: the open transaction is discarded",
                    self._applied_since_checkpoint,
                )
            self._owner.discard()
            self._applied_since_checkpoint = 0
        elif self._applied_since_checkpoint:
            self._checkpoint("error", commit=False)
        # The broker answered with a refusal: there is time to leave the group cleanly.
        self._close_consumer(timeout_ms=0 if fault.retriable else LEAVE_GROUP_TIMEOUT_MS)
        self._stop.wait(self._retry_delay())

    # -- errors retrying cannot fix ---------------------------------------------------------------

    def _classify(self, exc: BaseException) -> ConsumerFault:
        return classify(exc, topic=self._settings.topic, group=self._settings.group)

    def _count(self, fault: ConsumerFault) -> None:
        try:
            self._fault_observer.on_consumer_error(fault)
        except Exception as exc:
            logger.warning("fault observer failed: %r", exc)

    def _on_fault(self, fault: ConsumerFault) -> None:
        """Record a fault retrying cannot fix: counted always, logged once per distinct cause."""
        self._count(fault)
        self._fault = fault
        self._set_disconnected(fault.reason)
        key = (fault.kind, fault.cause)
        if key not in self._reported:
            self._reported.add(key)
            logger.error(
                "consumer cannot learn: %s; fix: %s",
                fault.cause,
                fault.fix,
                extra={"fault": fault.kind.value},
            )

    def _retry_delay(self) -> float:
        """The wait before the next attempt: the longest backoff while a fault needs a person."""
        if self._fault is not None and not self._fault.retriable:
            return self._settings.backoff_max_seconds
        return self._backoff.next()

    def _update_lag(self, consumer: Consumer) -> None:
        try:
            highwaters = {
                (tp.topic, tp.partition): consumer.highwater(tp) for tp in consumer.assignment()
            }
        except Exception as exc:
            logger.debug("highwater unavailable: %r", exc)
            return
        self._engine.set_highwaters(highwaters)

    def _bootstrap(self) -> str:
        servers = self._settings.consumer_config.get("bootstrap_servers")
        return ",".join(servers) if isinstance(servers, list | tuple) else str(servers)

    # -- shutdown -------------------------------------------------------------------------------

    def _shutdown(self) -> None:
        deadline = time.monotonic() + self._settings.shutdown_deadline_seconds
        saved = True
        self._limit_transaction_waits()
        due = self._applied_since_checkpoint > 0
        if due:
            saved = self._checkpoint("shutdown")
        remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
        self._close_consumer(timeout_ms=remaining_ms)
        self._dead_letters.close(timeout=max(0.0, deadline - time.monotonic()))
        if self._owner is not None:
            self._owner.close(timeout=max(0.0, deadline - time.monotonic()))
            self._owner.stop_following(timeout=max(0.0, deadline - time.monotonic()))
        self._set_disconnected("the consumer has stopped")
        self._final_checkpoint_ok = saved
        outcome = "FAILED" if not saved else "written" if due else "not due"
        logger.info("consumer stopped (final checkpoint %s)", outcome)

    def _limit_transaction_waits(self) -> None:
        """From the stop on, the transactional waits end within a share of the deadline.

        Called by :meth:`stop` on the caller's thread as well: a transaction waiting for a broker
        that is away when the stop comes (a periodic checkpoint's) ends by the same deadline, so
        the consumer thread reaches :meth:`_shutdown` in time. The rest of the deadline is for
        closing the clients.
        """
        if self._owner is not None:
            share_ms = self._settings.shutdown_deadline_seconds * 1000 * SHUTDOWN_COMMIT_SHARE
            self._owner.producer.limit_waits(int(share_ms))

    def _close_consumer(self, timeout_ms: int) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is None:
            return
        # close() revokes the partitions: the listener finds nothing left to checkpoint.
        try:
            consumer.close(autocommit=False, timeout_ms=timeout_ms)
        except Exception as exc:
            logger.warning("consumer did not close cleanly: %r", exc)


def _log_failed_commit(offsets: Any, response: Any) -> None:
    """The callback of an asynchronous commit: a failure is logged (monitoring only)."""
    if isinstance(response, BaseException):
        logger.warning("offset commit failed (monitoring only): %r", response)


def _log_dead_letter(rejection: Rejection) -> None:
    """One structured line per dead-lettered event: its reason and original coordinates."""
    logger.warning(
        "event dead-lettered (%s) from %s/%d@%d: %s",
        rejection.reason,
        rejection.topic,
        rejection.partition,
        rejection.offset,
        rejection.message,
        extra={
            "reason": rejection.reason,
            "source_topic": rejection.topic,
            "source_partition": rejection.partition,
            "source_offset": rejection.offset,
        },
    )


def _disconnection_reason(consumer: Consumer) -> str | None:
    """Why a kafka-python consumer is not connected, from its client state (``None``: it is)."""
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None:
        return None
    try:
        if coordinator.coordinator_unknown():
            return COORDINATOR_UNREACHABLE
        # Until the member is stable in a generation it owns no partitions and learns nothing.
        if coordinator.generation_if_stable() is None:
            return REBALANCING
    except Exception as exc:
        return f"cannot tell the connection state: {exc!r}"
    return None


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


def _topic_in_metadata(consumer: Consumer, topic: str) -> bool | None:
    """Whether the client's last metadata lists ``topic`` (``None``: this client cannot tell)."""
    cluster = getattr(consumer, "_cluster", None)
    if cluster is None:
        return None
    try:
        return cluster.partitions_for_topic(topic) is not None
    except Exception:
        return None


def _shared(producer: Producer) -> ProducerFactory:
    """A producer factory handing out one producer the runner owns."""
    return lambda settings: producer


def _group_metadata(consumer: Consumer) -> Any:
    """The consumer's group metadata for ``send_offsets_to_transaction`` (KIP-447 fencing)."""
    metadata = getattr(consumer, "group_metadata", None)
    return metadata() if callable(metadata) else None


def _topic_partition(topic: str, partition: int) -> Any:
    return TopicPartition(topic, partition)


def _offset_and_metadata(offset: int) -> Any:
    return OffsetAndMetadata(offset, "", -1)


def _partition_names(partitions: Any) -> str:
    names = sorted(f"{tp.topic}/{tp.partition}" for tp in partitions)
    return "[" + ", ".join(names) + "]"
