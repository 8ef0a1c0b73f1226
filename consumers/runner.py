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
group's offsets join it and it commits; only then is the local checkpoint (a cache) written. A
periodic checkpoint commits on the commit thread (:mod:`consumers.background_commit`) while the
loop goes on learning; that commit is settled before any other transactional step (the next
checkpoint, a dead letter, an abort, a restore, the shutdown), so the next transaction begins
only after it ended. On assignment the owner fences its predecessors, restores the newest
committed state and seeks to it, its partitions paused until then (nothing is fetched from a
position the restored state does not confirm); a failed transaction voids everything since the
last commit, including what was learned while it was under way.

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

This module holds the loop (lifecycle, poll and apply, dead letters, reconnection, shutdown);
the runner's other concerns are its bases: :class:`~consumers.runner_commits.RunnerCommits`
(checkpoints, commits, transactions, rebalances) and :class:`~consumers.runner_health.RunnerHealth`
(connection state, faults, backoff).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from kafka import KafkaConsumer

from consumers.background_commit import BackgroundCommit
from consumers.decoding.events import DecodedBatch, Rejection, SourceRecord
from consumers.dlq import DeadLetterError, DeadLetterWriter, Producer
from consumers.engine import Engine
from consumers.faults import (
    ConsumerFault,
    FaultKind,
    FaultObserver,
    NullFaultObserver,
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
from consumers.reports import PartitionKey
from consumers.runner_commits import RebalanceListener, RunnerCommits, topic_partition
from consumers.runner_health import Backoff
from consumers.state.checkpoint import CheckpointStore
from consumers.transactions import Owner

logger = logging.getLogger("consumers.runner")
"""The runner's logger (see :mod:`consumers.runner_health`)."""

QUICK_POLL_SHARE = 0.5
"""An empty poll that returns faster than this share of its timeout while disconnected is
followed by a backoff wait, so a misbehaving client can never spin the CPU."""
SHUTDOWN_COMMIT_SHARE = 0.5
"""The share of ``shutdown_deadline_seconds`` the final transaction may wait for the broker."""
LEAVE_GROUP_TIMEOUT_MS = 1_000
"""How long closing a consumer on a reachable broker waits to leave its group cleanly."""


class ConsumerRunner(RunnerCommits):
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
        self._backoff = Backoff(settings.backoff_seconds, settings.backoff_max_seconds)
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
        self._commits = BackgroundCommit()

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

    def _round(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        started = time.monotonic()
        if not self._settle_commit(block=False):
            return
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
            if self._owner is not None and not self._settle_commit(block=bool(batch.rejections)):
                # The commit under way failed: all since the previous one is void. Dead letters
                # join the next transaction, which begins only once that commit has ended.
                return
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
                    consumer.seek(topic_partition(topic, partition), offset)
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

    def _open(self) -> bool:
        try:
            consumer = self._consumer_factory(self._client_settings)
            consumer.subscribe([self._settings.topic], listener=RebalanceListener(self))
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

    def _on_failure(self, exc: Exception) -> None:
        fault = self._classify(exc)
        if fault.retriable:
            self._count(fault)
            logger.warning("consumer error: %r; reconnecting", exc)
            self._set_disconnected(fault.reason)
        else:
            self._on_fault(fault)
        if self._owner is not None:
            self._settle_commit(block=True)
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

    def _update_lag(self, consumer: Consumer) -> None:
        try:
            highwaters = {
                (tp.topic, tp.partition): consumer.highwater(tp) for tp in consumer.assignment()
            }
        except Exception as exc:
            logger.debug("highwater unavailable: %r", exc)
            return
        self._engine.set_highwaters(highwaters)

    def _shutdown(self) -> None:
        deadline = time.monotonic() + self._settings.shutdown_deadline_seconds
        self._limit_transaction_waits()
        saved = self._settle_commit(block=True)
        due = self._applied_since_checkpoint > 0
        if due:
            saved = self._checkpoint("shutdown")
        remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
        self._commits.close()
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


def _shared(producer: Producer) -> ProducerFactory:
    """A producer factory handing out one producer the runner owns."""
    return lambda settings: producer
