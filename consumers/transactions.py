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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from consumers.engine import Engine
from consumers.engine_state import IncompatibleCheckpointError
from consumers.ownership import SingleOwnerAssignor
from consumers.partitions import LoadedState
from consumers.reports import RestoreReport
from consumers.restoring import (
    STATE_TOPIC_REMEDY,
    Candidate,
    cache_candidate,
    foreign_model,
    restore_newest,
    state_topic_candidate,
)
from consumers.state.checkpoint import CheckpointStore
from consumers.state.chunks import DEFAULT_MAX_RECORD_BYTES
from consumers.state.follower import FollowerConsumer, StateFollower
from consumers.state.topic import (
    STATE_RECORD_MAX_BYTES,
    state_key,
)
from consumers.transactional_producer import (
    ProducerBuilder,
    TransactionalProducer,
    TransactionError,
    kafka_transactional_producer,
)
from learning import StateError

# With the producer's names the transactional writers outside this module (mixing) import here.
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
            raise foreign_model(self._settings, self._group, exc) from None
        except (StateError, ValueError) as exc:
            logger.error("%s cannot be loaded (%s); reading the state topic", origin, exc)
            return False, None
        return True, Candidate(origin + WARM_ORIGIN_SUFFIX, state, followed.sequence)

    def _baseline_state(self) -> LoadedState:
        return self._engine.load_payload(self._baseline)


def _hold(payload: bytes) -> None:
    """The warm follower's ``accept``: the record is only held; it is loaded on takeover."""
