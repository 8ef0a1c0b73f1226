"""Exactly-once learning with Kafka transactions: one owner, one transaction per checkpoint.

Ownership
    The model is one state (one record per group and model in the state topic), so one member of
    the consumer group owns *every* partition of the events topic and the others stand by:
    :class:`~consumers.ownership.SingleOwnerAssignor` gives all partitions to the current owner
    (the member whose newest assignment has the highest generation) and, when there is none, to
    the first member.

Transactions
    The owner's producer has a stable ``transactional.id`` (:attr:`TransactionSettings.
    transactional_id`, derived from the group and the model, which is the whole assignment). Its
    dead letters, then the checkpoint's state record and the group's offsets
    (``send_offsets_to_transaction`` with the consumer's group metadata) go in one transaction,
    committed at each checkpoint (every N events or T seconds). A new owner's
    ``init_transactions`` aborts whatever transaction its predecessor left open and bumps the
    producer epoch, so a predecessor that is only paused (a zombie) is fenced: its next send or
    commit fails and nothing of it becomes visible to ``read_committed`` readers. The group
    generation in the offsets (KIP-447) fences it as well.

Restoring
    On every assignment the owner restores the newest committed state: the state topic's newest
    record that verifies and loads, the local checkpoint cache only when it has applied at least
    as many records (:func:`restore_newest`). Work applied but not committed is discarded with it.

Warm standby
    Every member follows its state record (:class:`~consumers.state.follower.StateFollower`,
    ``read_committed``) while it stands by, so a takeover has the newest state in memory. The
    owner pauses its follower once it has taken over (it commits the state itself and need not
    read it back) and resumes it as soon as it may have lost the partitions (a void or revoked
    transaction, an empty assignment) and at the start of every takeover. It is
    used only once the follower has confirmed, by an end-of-log check begun after the new owner
    fenced its predecessors, that no newer record is committed; otherwise (or when it does not
    load) the state topic is read as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafka import KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.errors import MessageSizeTooLargeError
from kafka.record.default_records import DefaultRecordBatchBuilder

from consumers.dlq import ProducerFuture
from consumers.engine import Engine, IncompatibleCheckpointError
from consumers.ownership import SingleOwnerAssignor
from consumers.partitions import LoadedState
from consumers.reports import RestoreReport
from consumers.state.checkpoint import CheckpointStore
from consumers.state.chunks import DEFAULT_MAX_RECORD_BYTES, split_state_value
from consumers.state.follower import MS_PER_S, FollowerConsumer, StateFollower
from consumers.state.topic import (
    STATE_RECORD_MAX_BYTES,
    encode_state_record,
    read_state_records,
    state_key,
)
from consumers.transactional_client import KAFKA_PYTHON_MAX_BLOCK_MS, BoundedTransactions
from learning import StateError

logger = logging.getLogger(__name__)

TRANSACTIONAL_ID_PREFIX = "novikoff"
DEFAULT_STATE_READ_TIMEOUT_SECONDS = 30.0
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
BROKER_MAX_TRANSACTION_TIMEOUT_MS = 900_000
"""Apache Kafka's default ``transaction.max.timeout.ms``: a longer timeout is refused."""
TRANSACTION_RETRY_BACKOFF_MS = 20
"""The transactional producer's retry backoff. The coordinator answers the first
AddPartitionsToTxn of a transaction with CONCURRENT_TRANSACTIONS while the previous one's markers
are still being written; the Java producer retries that after 20 ms, kafka-python after its
``retry_backoff_ms`` (100 ms by default, which would hold each checkpoint ~100 ms)."""
TIMEOUT_INTERVALS = 2
"""A transaction may stay open this many checkpoint intervals before the broker aborts it."""
ABORT_TIMEOUT_S = 5.0
DEAD_LETTER_MAX_BYTES = 1_048_576
"""kafka-python's default ``max_request_size``: dead letters are bounded as a default producer
bounds them (client side, before anything joins the transaction), while state records may be up
to :data:`consumers.state.topic.STATE_RECORD_MAX_BYTES`."""
WARM_POLL_TIMEOUT_MS = 50
"""The warm follower's poll wait: a requested end-of-log check starts at most this late."""
WARM_FETCH_MAX_WAIT_MS = 50
"""The warm follower's fetch wait: a fetch held longer by the broker holds up its end-of-log
check (kafka-python sends it after the fetch in flight), hence a takeover's confirmation."""
WARM_CONFIRM_TIMEOUT_S = 2.0
"""How long a takeover waits for that confirmation before reading the state topic instead."""
WARM_CONFIRM_STEP_S = 0.01
WARM_ORIGIN_SUFFIX = " (warm)"
"""Marks a state restored from the follower's memory in the restore log line."""
STATE_TOPIC_REMEDY = (
    "a new model needs another [kafka] group_id or state_topic; the model settings must match "
    "the ones the state topic was written with"
)


@dataclass(frozen=True)
class TransactionSettings:
    """Where the state goes and how the owner's transactions are named.

    Parameters
    ----------
    state_topic
        The compacted state topic.
    model_id
        The model's id in the state key (the service uses the events topic).
    state_read_timeout_seconds
        Bound on reading the state topic on assignment.
    transaction_timeout_ms
        The broker aborts a transaction left open this long (above the checkpoint interval).
    max_record_bytes
        A state record above this is split into chunks (:mod:`consumers.state.chunks`).
    warm_standby
        Follow the state record while standing by, so a takeover restores from memory.
    """

    state_topic: str
    model_id: str
    state_read_timeout_seconds: float = DEFAULT_STATE_READ_TIMEOUT_SECONDS
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    warm_standby: bool = True

    def key(self, group: str) -> bytes:
        """The state record key of ``group``'s model."""
        return state_key(group, self.model_id)

    def transactional_id(self, group: str) -> str:
        """The owner's ``transactional.id``: the same for every owner of ``group``'s model."""
        return f"{TRANSACTIONAL_ID_PREFIX}-{group}-{self.model_id}"


def transaction_timeout_ms(checkpoint_every_seconds: float) -> int:
    """The transaction timeout for a checkpoint interval: two intervals, within the broker's bounds.

    >>> transaction_timeout_ms(5.0), transaction_timeout_ms(120.0), transaction_timeout_ms(600.0)
    (60000, 240000, 900000)
    """
    wanted = int(checkpoint_every_seconds * 1000 * TIMEOUT_INTERVALS)
    return min(BROKER_MAX_TRANSACTION_TIMEOUT_MS, max(DEFAULT_TRANSACTION_TIMEOUT_MS, wanted))


# -- restoring -------------------------------------------------------------------------------------


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
            raise _foreign_model(settings, group, exc) from None
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


def _foreign_model(
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


# -- the owner's producer --------------------------------------------------------------------------


class TransactionError(RuntimeError):
    """A transaction could not be committed; everything since the last commit is discarded."""


ProducerBuilder = Callable[[Mapping[str, Any]], Any]


def kafka_transactional_producer(config: Mapping[str, Any]) -> Any:
    """A kafka-python producer with the given (transactional) configuration, its transactional
    waits bounded by ``max_block_ms`` (see :mod:`consumers.transactional_client`)."""
    wait_ms = int(config.get("max_block_ms", KAFKA_PYTHON_MAX_BLOCK_MS))
    return BoundedTransactions(KafkaProducer(**config), wait_ms)


class TransactionalProducer:
    """The owner's transactional producer: dead letters and state records, one transaction.

    It is the dead-letter writer's producer too (``send``/``flush``; ``close`` is left to
    the runner, which owns it): the first send after a commit begins the next transaction.

    Parameters
    ----------
    config
        ``KafkaProducer`` keyword arguments (connection, ``transactional_id``, timeouts).
    build
        Makes the producer (kafka-python by default; tests may pass their own).
    """

    def __init__(
        self, config: Mapping[str, Any], build: ProducerBuilder = kafka_transactional_producer
    ) -> None:
        self._config = dict(config)
        self._build = build
        self._producer: Any = None
        self._open = False
        self._deadline: float | None = None

    @property
    def transactional_id(self) -> str:
        return str(self._config["transactional_id"])

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open (something was sent since the last commit)."""
        return self._open

    def activate(self) -> None:
        """A new producer, registered with ``init_transactions``: fences every predecessor.

        The broker aborts any transaction a previous producer of this ``transactional_id`` left
        open, so its records never become visible.
        """
        self.close()
        producer = self._build(self._config)
        self._limit(producer)
        try:
            producer.init_transactions()
        except BaseException:
            producer.close(timeout=0)
            raise
        self._producer = producer
        logger.info("transactional producer %s registered", self.transactional_id)

    def begin(self) -> None:
        """Begin a transaction unless one is open."""
        if self._producer is None:
            raise TransactionError("the transactional producer is not active")
        if not self._open:
            self._producer.begin_transaction()
            self._open = True

    # Producer protocol (consumers.dlq): dead letters join the open transaction.
    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> ProducerFuture:
        size = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, headers or [])
        if size > DEAD_LETTER_MAX_BYTES:
            # Refused here, as a default producer refuses it, so the open transaction is not
            # failed by the broker; the dead-letter writer then sends a truncated copy.
            raise MessageSizeTooLargeError(
                f"The message is {size} bytes when serialized which is larger than the "
                f"{DEAD_LETTER_MAX_BYTES} bytes a dead letter may have"
            )
        self.begin()
        future: ProducerFuture = self._producer.send(topic, value=value, key=key, headers=headers)
        return future

    def flush(self, timeout: float | None = None) -> None:
        if self._producer is not None:
            self._producer.flush(timeout=timeout)

    def limit_waits(self, wait_ms: int) -> None:
        """End every wait of this producer, and of any it registers later, within ``wait_ms``
        (a shutdown's share; callable from any thread)."""
        deadline = time.monotonic() + wait_ms / MS_PER_S
        if self._deadline is None or deadline < self._deadline:
            self._deadline = deadline
        self._limit(self._producer)

    def _limit(self, producer: Any) -> None:
        """Hand the :meth:`limit_waits` deadline, if any, to ``producer``."""
        limit = getattr(producer, "limit_waits", None)
        if self._deadline is not None and limit is not None:
            limit(max(0, int((self._deadline - time.monotonic()) * MS_PER_S)))

    def commit(
        self,
        state_topic: str,
        *,
        key: bytes,
        payload: bytes,
        sequence: int,
        offsets: Mapping[tuple[str, int], int],
        group_metadata: Any,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    ) -> None:
        """Send the state record and the offsets, then commit the open transaction.

        Raises
        ------
        TransactionError
            When anything fails (fenced by a newer owner, broker away...): the transaction is
            aborted when that is still possible, and the producer must be activated again.
        """
        try:
            self.begin()
            value = encode_state_record(payload, sequence)
            for record_key, record in split_state_value(key, value, max_record_bytes):
                self._producer.send(state_topic, value=record, key=record_key)
            if offsets:
                self._producer.send_offsets_to_transaction(
                    {
                        TopicPartition(topic, partition): OffsetAndMetadata(offset, "", -1)
                        for (topic, partition), offset in offsets.items()
                    },
                    group_metadata,
                )
            self._producer.commit_transaction()
        except Exception as exc:
            self.abort()
            raise TransactionError(f"transaction not committed: {exc!r}") from exc
        self._open = False

    def abort(self) -> None:
        """Abort the open transaction if the producer still can, then drop the producer."""
        producer, self._producer = self._producer, None
        was_open, self._open = self._open, False
        if producer is None:
            return
        abort_and_close(producer, was_open)

    def close(self, timeout: float | None = None) -> None:
        """Close the producer (an open transaction is aborted by the broker or a successor)."""
        producer, self._producer = self._producer, None
        self._open = False
        if producer is not None:
            close_quietly(producer, timeout if timeout is not None else ABORT_TIMEOUT_S)


def abort_and_close(producer: Any, in_transaction: bool = True) -> None:
    """Abort ``producer``'s open transaction when it still can, then close it at once.

    A fenced producer cannot abort; its successor's ``init_transactions`` already did, and a
    producer that cannot reach the broker leaves the transaction to time out there.
    """
    if in_transaction:
        try:
            producer.abort_transaction()
        except Exception as exc:
            logger.warning("transaction not aborted by this producer: %r", exc)
    close_quietly(producer, 0)


def close_quietly(producer: Any, timeout: float | None) -> None:
    """Close a transactional producer, logging (not raising) a failure to close cleanly."""
    try:
        producer.close(timeout=timeout)
    except Exception as exc:
        logger.warning("transactional producer did not close cleanly: %r", exc)


# -- the owner -------------------------------------------------------------------------------------


class Owner:
    """The transactional side of one runner: assignor, producer, restore, commit.

    Parameters
    ----------
    engine, store
        The engine and its local checkpoint cache.
    settings
        State topic and transaction naming.
    group
        The consumer group.
    connection
        Connection and security options shared by the producer and the state reader.
    ensure_state_topic
        Creates the state topic when it is missing (the service's topics helper).
    build_producer
        Makes the kafka-python producer (tests may pass their own).
    follower_consumer
        Builds the warm standby's state-topic consumer (``KafkaConsumer``); ``None``, or
        ``settings.warm_standby`` off: no follower, every takeover reads the state topic.
    """

    def __init__(
        self,
        engine: Engine,
        store: CheckpointStore,
        settings: TransactionSettings,
        group: str,
        connection: Mapping[str, Any],
        *,
        ensure_state_topic: Callable[[], object] | None = None,
        build_producer: ProducerBuilder = kafka_transactional_producer,
        follower_consumer: Callable[..., FollowerConsumer] | None = None,
    ) -> None:
        self._engine = engine
        self._store = store
        self._settings = settings
        self._group = group
        self._connection = dict(connection)
        self._ensure_state_topic = ensure_state_topic
        self.assignor = SingleOwnerAssignor()
        self.producer = TransactionalProducer(
            {
                **self._connection,
                "acks": "all",
                "max_request_size": STATE_RECORD_MAX_BYTES,
                "transactional_id": settings.transactional_id(group),
                "transaction_timeout_ms": settings.transaction_timeout_ms,
                "retry_backoff_ms": TRANSACTION_RETRY_BACKOFF_MS,
            },
            build_producer,
        )
        self._follower: StateFollower | None = None
        if settings.warm_standby and follower_consumer is not None:
            self._follower = StateFollower(
                settings.state_topic,
                self.key,
                _hold,
                follower_consumer,
                {**self._connection, "fetch_max_wait_ms": WARM_FETCH_MAX_WAIT_MS},
                poll_timeout_ms=WARM_POLL_TIMEOUT_MS,
            )
        self._baseline = engine.checkpoint_bytes()[0]
        self._sequence = 0
        self.activation_needed = False
        """The consumer was assigned partitions: fence, restore and seek before learning."""
        self.dirty = False
        """The engine holds work that was never committed: restore before serving it again."""

    @property
    def key(self) -> bytes:
        """The state record key."""
        return self._settings.key(self._group)

    def warm_start(self) -> None:
        """Take the state topic's newest state when it is newer than the one restored at start.

        Raises
        ------
        IncompatibleCheckpointError
            When the state topic holds another model: this instance must not start.
        consumers.state.topic.StateTopicUnavailableError
            When the state topic cannot be read now (it is read again on assignment).
        """
        candidate = state_topic_candidate(
            self._engine, self._connection, self._settings, self._group
        )
        if candidate is not None and candidate.state.applied > self._engine.applied:
            self._engine.install(candidate.state, candidate.origin, sequence=candidate.sequence)

    def activate(self) -> RestoreReport | None:
        """Become the owner: register the producer (fencing predecessors), restore the newest.

        Raises
        ------
        IncompatibleCheckpointError
            When the state topic holds another model.
        Exception
            Whatever reaching Kafka raised; the activation stays pending.
        """
        self._follow(reading=True)  # the takeover restores what the follower holds, once current
        if self._ensure_state_topic is not None:
            self._ensure_state_topic()
        self.producer.activate()
        report = self.restore()
        self._follow(reading=False)
        return report

    def restore(self) -> RestoreReport | None:
        """Install the newest committed state, discarding uncommitted work (:func:`restore_newest`).

        Raises
        ------
        IncompatibleCheckpointError
            When the state topic holds another model.
        consumers.state.topic.StateTopicUnavailableError
            When the state topic cannot be read.
        """
        confirmed, from_topic = self._warm_candidate(time.monotonic())
        if not confirmed:
            from_topic = state_topic_candidate(
                self._engine, self._connection, self._settings, self._group
            )
        self._sequence = 0
        if from_topic is not None and from_topic.sequence is not None:
            self._sequence = from_topic.sequence
        baseline = Candidate("the state this process started from", self._baseline_state())
        report = restore_newest(
            self._engine, [cache_candidate(self._engine, self._store), from_topic, baseline]
        )
        self.dirty = False
        return report

    def commit(
        self,
        prepared: tuple[bytes, Mapping[tuple[str, int], int]],
        assigned: set[tuple[str, int]],
        group_metadata: Any,
    ) -> int:
        """Commit the open transaction with the state record and the assigned partitions' offsets.

        Returns the state record's sequence.

        Raises
        ------
        TransactionError
            When the commit failed; the engine is then :attr:`dirty`.
        """
        payload, offsets = prepared
        sequence = self._sequence + 1
        try:
            self.producer.commit(
                self._settings.state_topic,
                key=self.key,
                payload=payload,
                sequence=sequence,
                offsets={k: offset for k, offset in offsets.items() if k in assigned},
                group_metadata=group_metadata,
                max_record_bytes=self._settings.max_record_bytes,
            )
        except TransactionError:
            self.dirty = True
            raise
        self._sequence = sequence
        return sequence

    def discard(self) -> None:
        """Abort the open transaction: everything applied since the last commit is void."""
        self.producer.abort()
        self.dirty = True
        self._follow(reading=True)

    @property
    def following(self) -> bool:
        """Whether the follower reads the state topic now (not paused, not stopped)."""
        follower = self._follower
        return follower is not None and follower.running and not follower.paused

    @property
    def warm(self) -> bool:
        """Whether the follower has reached the end of the state topic and can read it now."""
        follower = self._follower
        return follower is not None and follower.caught_up_at is not None and not follower.problem

    def start_following(self) -> None:
        """Start following the state record (warm standby), once; nothing without a follower."""
        if self._follower is not None and not self._follower.running:
            self._follower.start()

    def stop_following(self, timeout: float | None = None) -> None:
        """Stop the follower (at shutdown); with ``timeout``, wait that long for its thread."""
        if self._follower is not None:
            self._follower.stop(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Close the producer."""
        self.producer.close(timeout)
        self._follow(reading=True)

    def _follow(self, *, reading: bool) -> None:
        """Resume (``reading``) or pause the follower, if there is one."""
        if self._follower is not None:
            if reading:
                self._follower.resume()
            else:
                self._follower.pause()

    def _warm_candidate(self, since: float) -> tuple[bool, Candidate | None]:
        """The followed state record, once confirmed the newest committed one after ``since``.

        ``since`` is taken after this owner fenced its predecessors and while it commits
        nothing, so a record committed before it is the newest there will be until this owner's
        next commit. Returns ``(confirmed, candidate)``: ``(True, None)`` when the follower
        confirmed that the topic holds no record of the key (it has never seen one, valid or
        not), and ``(False, None)`` (read the topic instead) without a follower, without
        confirmation within :data:`WARM_CONFIRM_TIMEOUT_S` (none is awaited from a follower that
        has never reached the end of the log or cannot read it now), or when the record does
        not load.

        Raises
        ------
        IncompatibleCheckpointError
            When the followed record holds another model.
        """
        follower = self._follower
        if follower is None or not self.warm:
            # Never reached the end of the log, or cannot read it now: no waiting.
            return False, None
        follower.request_end_check()
        deadline = since + WARM_CONFIRM_TIMEOUT_S
        while (follower.caught_up_at or float("-inf")) < since:
            if time.monotonic() > deadline or not follower.running:
                logger.info(
                    "warm state not confirmed the newest (%s); reading the state topic",
                    follower.problem or f"no end-of-log check within {WARM_CONFIRM_TIMEOUT_S}s",
                )
                return False, None
            time.sleep(WARM_CONFIRM_STEP_S)
        followed = follower.state
        if followed is None:
            # Confirmed empty only when no record of the key was skipped as unverifiable.
            return follower.skipped == 0, None
        origin = f"state record {self._settings.state_topic}@{followed.offset}"
        try:
            state = self._engine.load_payload(followed.payload, STATE_TOPIC_REMEDY)
        except IncompatibleCheckpointError as exc:
            raise _foreign_model(self._settings, self._group, exc) from None
        except (StateError, ValueError) as exc:
            logger.error("%s cannot be loaded (%s); reading the state topic", origin, exc)
            return False, None
        return True, Candidate(origin + WARM_ORIGIN_SUFFIX, state, followed.sequence)

    def _baseline_state(self) -> LoadedState:
        return self._engine.load_payload(self._baseline)


def _hold(payload: bytes) -> None:
    """The warm follower's ``accept``: the record is only held; it is loaded on takeover."""
