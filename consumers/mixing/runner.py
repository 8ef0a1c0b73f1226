"""Mixing mode: the partitions of the events topic are the shards of one perceptron (IPM).

One thread per instance. The group's ordinary assignor spreads the partitions over the
instances; for each partition p it owns, the instance runs :class:`~consumers.mixing.shard.
PartitionRound` after :class:`~consumers.mixing.shard.PartitionRound`:

1. **Activate** p (on assignment, and after any failure): register p's transactional producer,
   which fences p's previous owner and aborts a round it left open; read the contributions topic
   up to its end; p resumes after its newest contribution (round r, offsets up to ``end_offset``)
   or, with none, at round 1 from the partition's beginning.
2. **Wait** (p paused) until round r's mix exists, then learn round r + 1 from the mixed weights.
3. **Commit** the round when it has R valid events (or, with ``round_seconds = T > 0``, T seconds
   after it started): its dead letters, contribution and the group offset of p at the round's end
   in one transaction (:class:`~consumers.mixing.producer.ShardProducer`); pause p.

A round's end is no seek: the records a poll returned past it are kept (the *carry*) and the
partition is only paused, so the consumer's buffered fetch survives and the next round starts
from the carry and that buffer (a seek would drop the buffer, fetch it again and decode again
every record of its first batch before the round's first offset). Whenever the consumer's
position might not follow the carry (a failed commit, a revocation, a reconnection), the carry
is dropped and the round starts with a seek, as every replay does.

Offsets are committed only at round ends, and a round in progress is never saved, so a SIGKILL,
a rebalance or a failed transaction replays the round from its start in the next owner, with
the same weights: the same contribution, nothing lost, nothing repeated. A time cut becomes
history only when its contribution commits, and a committed round is never learned again.

Every instance follows the contributions topic ``read_committed`` and feeds the
:class:`~consumers.mixing.ledger.MixLedger`, which mixes each complete round; the engine then
serves the newest mixed model (``model_version`` = its round) and ``/stats`` gets a ``mixing``
section.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kafka import ConsumerRebalanceListener, TopicPartition

from consumers.dlq import default_dead_letter_topic
from consumers.engine import Engine
from consumers.faults import (
    ConsumerFault,
    FaultKind,
    FaultObserver,
    NullFaultObserver,
    WorkerHealth,
    classify,
)
from consumers.kafka_clients import RunnerSettings
from consumers.kafka_compat import restore_parked_records
from consumers.mixing._kafka import kafka_consumer
from consumers.mixing.following import (
    CONTRIBUTIONS_PARTITION,
    WAITING_POLL_MS,
    BoundFactory,
    NullRefusalObserver,
    Refusal,
    RefusalObserver,
    logger,
)
from consumers.mixing.ledger import MixLedger
from consumers.mixing.options import MixingOptions
from consumers.mixing.producer import ShardProducer
from consumers.mixing.rounds import Carry, ShardRounds
from consumers.mixing.shard import LearnerFactory, PartitionRound
from consumers.state.topic import READ_COMMITTED
from consumers.transactional_producer import (
    ProducerBuilder,
    kafka_transactional_producer,
)

IDLE_EVENTS_POLL_MS = 5
"""How long one turn polls the events while every owned shard waits for a mix (never 0:
kafka-python's group upkeep, heartbeats and the poll interval, needs time inside poll()). A
member that owns nothing polls for the full ``poll_timeout_ms`` instead: kafka-python 3.0.12
finishes a join round only inside a poll() still running when the round's answers arrive, and a
poll shorter than the round starts a new round every turn (the group never settles)."""
FOLLOW_POLL_MS = 1
"""How long a turn with shards learning waits for contributions (fetches run in the
background)."""
FOLLOW_INTERVAL_S = 0.1
"""While every owned shard is learning, the contributions topic is read at most this often."""
PROGRESS_INTERVAL_S = 0.1
"""The ``/stats`` ``mixing`` section is refreshed at most this often (and at every mix)."""
FOLLOW_FETCH_WAIT_MS = 10
"""The broker answers the follower's fetches within this: a round's contributions become
visible only when their transactions commit, and every shard waits for them."""
CLOSE_TIMEOUT_MS = 1_000

ConsumerBuilder = Callable[[Mapping[str, Any]], Any]


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, runner: MixingRunner) -> None:
        self._runner = runner

    def on_partitions_revoked(self, revoked: Any) -> None:
        self._runner._on_revoked(revoked)

    def on_partitions_lost(self, lost: Any) -> None:
        self._runner._on_revoked(lost)

    def on_partitions_assigned(self, assigned: Any) -> None:
        self._runner._on_assigned(assigned)


class MixingRunner(WorkerHealth, ShardRounds):
    """Runs mixing mode on a background thread (the service's worker in mixing mode).

    Parameters
    ----------
    engine
        Serves the mixed model; its decoder and tracker are the shards' templates.
    settings
        Topic, consumer and producer settings (the consumer runner's).
    options
        R, T and the contributions topic.
    learner_factory
        Makes a fresh learner with the service's hyperparameters.
    bound_factory
        Makes the distributed bound for P partitions.
    ensure_topics
        Creates the contributions topic when it is missing.
    consumer_builder, producer_builder
        kafka-python clients (tests may pass their own).
    fault_observer
        Told of every Kafka client error (the service's ``novikoff_consumer_errors_total``).
    refusal_observer
        Told of every contributions record refused (the service's
        ``novikoff_mixing_contributions_refused_total``).
    learns
        ``False`` for a read replica: no events consumer, no group, no shard; it only follows the
        contributions topic and serves the mixed models (:attr:`caught_up_at` says how fresh).
    """

    _log = logger
    _worker = "mixing"

    def __init__(
        self,
        engine: Engine,
        settings: RunnerSettings,
        options: MixingOptions,
        learner_factory: LearnerFactory,
        bound_factory: BoundFactory,
        *,
        ensure_topics: Callable[[], object] | None = None,
        consumer_builder: ConsumerBuilder = kafka_consumer,
        producer_builder: ProducerBuilder = kafka_transactional_producer,
        learns: bool = True,
        fault_observer: FaultObserver | None = None,
        refusal_observer: RefusalObserver | None = None,
    ) -> None:
        self._engine = engine
        self._learns = learns
        self._fault_observer = fault_observer or NullFaultObserver()
        self._refusal_observer = refusal_observer or NullRefusalObserver()
        self._refusal: Refusal | None = None
        self._fault: ConsumerFault | None = None
        self._reported: set[tuple[FaultKind, str]] = set()
        self._caught_up_at: float | None = None
        self._end_checked_at = 0.0
        self._settings = settings
        self._options = options
        self._learner_factory = learner_factory
        self._bound_factory = bound_factory
        self._ensure_topics = ensure_topics
        self._build_consumer = consumer_builder
        self._build_producer = producer_builder
        self._dlq_topic = settings.dlq_topic or default_dead_letter_topic(settings.topic)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._consumer: Any = None
        self._follower: Any = None
        self._watermarks: Any = None
        self._ledger: MixLedger | None = None
        self._producers: dict[int, ShardProducer] = {}
        self._owned: set[int] = set()
        self._to_activate: set[int] = set()
        self._positions: dict[int, tuple[int, int]] = {}
        """Per active partition: its newest committed round and that round's end offset."""
        self._shards: dict[int, PartitionRound] = {}
        self._carry: dict[int, Carry] = {}
        self._connected = False
        self._reason: str | None = "the consumer has not started"
        self._published_round = -1
        self._followed_at = 0.0
        self._progress_at = 0.0

    # -- the worker protocol --------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def holds_model(self) -> bool:
        """Whether a mixed model is served (after the first catch-up with the contributions)."""
        return self._ledger is not None

    @property
    def caught_up_at(self) -> float | None:
        """When this instance last knew it held every committed contribution (monotonic)."""
        return self._caught_up_at

    @property
    def connected(self) -> bool:
        """Whether the runner reaches Kafka and the mix is not blocked by refused contributions
        (what ``/readyz`` reports: a blocked mix serves a model that cannot get newer)."""
        return self._connected and self.mix_blocked is None

    @property
    def not_ready_reason(self) -> str | None:
        """Why the runner is not ready (``None`` when it is): Kafka, or a blocked mix."""
        if not self._connected:
            return self._reason
        return self.mix_blocked

    @property
    def problem(self) -> str | None:
        """Why Kafka cannot be read right now (``None`` while it can)."""
        return self.not_ready_reason

    @property
    def ledger(self) -> MixLedger | None:
        """The mixing ledger (``None`` until the partition count is known)."""
        return self._ledger

    def start(self) -> None:
        """Start the thread (once)."""
        if self._thread is not None:
            raise RuntimeError("the runner was already started")
        self._thread = threading.Thread(target=self.run, name="novikoff-mixing", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> bool:
        """Ask the loop to stop (a round in progress is dropped: its next owner replays it)."""
        self._stop.set()
        return not self.running if timeout is None else self.join(timeout)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; whether it has."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def run(self) -> None:
        """The loop (blocking)."""
        delay = self._settings.backoff_seconds
        try:
            while not self._stop.is_set():
                try:
                    if self._follower is None:
                        self._open()
                    self._turn()
                    delay = self._settings.backoff_seconds
                    self._fault = None
                    self._reported.clear()
                except Exception as exc:
                    self._connected = False
                    self._on_error(exc)
                    self._close()
                    if self._fault is not None:
                        delay = self._settings.backoff_max_seconds
                    self._stop.wait(delay)
                    delay = min(self._settings.backoff_max_seconds, delay * 2)
        finally:
            self._close()
            self._connected = False
            self._reason = "the consumer has stopped"

    def _on_error(self, exc: Exception) -> None:
        """Count every error; one ERROR line per distinct cause retrying cannot fix."""
        fault = classify(exc, topic=self._settings.topic, group=self._settings.group)
        self._count(fault)
        if fault.retriable:
            logger.warning("mixing runner error: %r; reconnecting", exc)
            self._reason = f"mixing: {exc!r}"
            return
        self._fault = fault
        self._reason = fault.reason
        self._log_once(fault)

    # -- connection -----------------------------------------------------------------------------

    def _open(self) -> None:
        if self._ensure_topics is not None:
            self._ensure_topics()
        connection = self._settings.connection_config()
        follower = self._build_consumer(
            {
                **connection,
                "enable_auto_commit": False,
                "isolation_level": READ_COMMITTED,
                "fetch_max_wait_ms": FOLLOW_FETCH_WAIT_MS,
            }
        )
        contributions = TopicPartition(self._options.contributions_topic, CONTRIBUTIONS_PARTITION)
        follower.assign([contributions])
        follower.seek_to_beginning(contributions)
        self._follower = follower
        self._ledger = None  # rebuilt from the start of the contributions topic
        self._refusal = None
        self._published_round = -1
        if not self._learns:
            return
        # Every round is a transaction, so events are read as exactly-once mode reads them.
        consumer = self._build_consumer(self._settings.kafka_consumer_config(transactional=True))
        consumer.partitions_for_topic(self._settings.topic)
        consumer.subscribe([self._settings.topic], listener=_Listener(self))
        self._consumer = consumer
        # Kafka's default isolation: its end offsets are high watermarks (see _catch_up).
        self._watermarks = self._build_consumer({**connection, "enable_auto_commit": False})

    def _close(self) -> None:
        with self._lock:
            self._shards.clear()
            self._carry.clear()
            self._owned.clear()
            self._to_activate.clear()
            self._positions.clear()
        for producer in self._producers.values():
            producer.abort()
        self._producers.clear()
        for client in (self._consumer, self._follower, self._watermarks):
            if client is not None:
                try:
                    client.close(autocommit=False, timeout_ms=CLOSE_TIMEOUT_MS)
                except Exception as exc:
                    logger.warning("mixing consumer did not close cleanly: %r", exc)
        self._consumer = self._follower = self._watermarks = None

    # -- rebalances (kafka-python calls these while poll() runs) ------------------------------

    def _on_revoked(self, partitions: Any) -> None:
        mine = [tp.partition for tp in partitions if tp.topic == self._settings.topic]
        with self._lock:
            for p in mine:
                self._owned.discard(p)
                self._to_activate.discard(p)
                self._positions.pop(p, None)
                self._carry.pop(p, None)
                if self._shards.pop(p, None) is not None:
                    logger.info("partition %d revoked mid-round; its next owner replays it", p)
        for p in mine:
            producer = self._producers.pop(p, None)
            if producer is not None:
                producer.abort()

    def _on_assigned(self, partitions: Any) -> None:
        mine = [tp for tp in partitions if tp.topic == self._settings.topic]
        if self._consumer is not None and mine:
            # Nothing is learned before the partition is activated and positioned.
            self._consumer.pause(*mine)
        with self._lock:
            for tp in mine:
                self._owned.add(tp.partition)
                self._to_activate.add(tp.partition)

    # -- one turn -------------------------------------------------------------------------------

    def _turn(self) -> None:
        if not self._learns:
            self._follow_only()
            return
        consumer = self._consumer
        ledger = self._ensure_ledger()
        if ledger is None:
            consumer.poll(timeout_ms=WAITING_POLL_MS)
            return
        now = time.monotonic()
        waiting = len(self._shards) < len(self._positions) or not self._shards
        if waiting or now - self._followed_at >= FOLLOW_INTERVAL_S:
            self._followed_at = now
            self._follow(FOLLOW_POLL_MS if self._shards else WAITING_POLL_MS)
        for p in sorted(self._to_activate & self._owned):
            self._activate(p, ledger)
        self._start_rounds(ledger)
        restore_parked_records(consumer)
        polled = consumer.poll(
            timeout_ms=self._events_poll_ms(),
            max_records=self._settings.max_poll_records,
        )
        self._connected = True
        self._reason = None
        for tp, records in sorted(polled.items(), key=lambda item: item[0].partition):
            self._learn(tp, records)
        if self._options.round_seconds > 0:
            now = time.monotonic()
            for p, shard in sorted(self._shards.items()):
                if now - shard.started_at >= self._options.round_seconds:
                    self._finish(p, time_cut=True)
        if time.monotonic() - self._progress_at >= PROGRESS_INTERVAL_S:
            self._publish_progress()

    def _events_poll_ms(self) -> int:
        """The events poll's timeout: short only while owned shards all wait for a mix."""
        if self._shards or not self._owned:
            return self._settings.poll_timeout_ms
        return IDLE_EVENTS_POLL_MS
