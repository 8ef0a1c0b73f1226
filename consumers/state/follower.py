"""Following the state topic: the newest valid state record of one key, on its own thread.

A :class:`StateFollower` reads the compacted state topic from the beginning with a
``read_committed`` consumer that belongs to no group (it is *assigned* every partition of the
topic, so following never takes partitions from the learners), and hands the payload of each
newer record of its key to ``accept``. Readers of the model (read replicas, warm standbys) build
on it.

Invariants
----------
* Records of one key arrive in offset order (one key lives in one partition), so the newest
  record is the one with the highest offset; within one poll only the newest usable record is
  handed over, older ones of the same poll are never loaded.
* A state split into chunks (:mod:`consumers.state.chunks`, a record above the broker's message
  limit) is put back together before it is verified; its chunks precede its manifest.
* A record that fails verification (:func:`consumers.state.topic.decode_state_record`) or that
  ``accept`` refuses (raises) is skipped with an ERROR, and the previously accepted state stays:
  a damaged record never replaces a good model.
* :attr:`caught_up_at` is the monotonic time at which the follower last began an end-of-log check
  that then found its position at the end of the committed log (the last stable offset) with
  every record before it handled: its state was the newest committed one at that moment (a
  record committed before it is held). While the broker is unreachable it stops advancing.
* :meth:`pause` stops the reading (no poll, no end-of-log check, so :attr:`caught_up_at` stops
  advancing too) until :meth:`resume`, which goes on from the position reached: a learner that
  owns the model commits the state itself and need not read it back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kafka.errors import KafkaError
from kafka.structs import TopicPartition

from consumers.state.checkpoint import CheckpointError
from consumers.state.chunks import StateAssembler
from consumers.state.topic import READ_COMMITTED, decode_state_record, state_record_sequence

logger = logging.getLogger(__name__)

DEFAULT_POLL_TIMEOUT_MS = 200
DEFAULT_END_CHECK_INTERVAL_S = 0.5
DEFAULT_BACKOFF_S = 0.5
DEFAULT_BACKOFF_MAX_S = 5.0
END_OFFSETS_TIMEOUT_MS = 5_000
CLOSE_TIMEOUT_MS = 1_000
MS_PER_S = 1_000
BOOTSTRAP_TIMEOUT_MS = 5_000
"""How long creating the consumer may wait for a broker: it bounds how long a stop can wait."""
FOLLOWER_DEFAULTS = {"bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS}
"""Defaults of the follower's consumer that ``consumer_config`` may override."""
FOLLOWER_CONFIG = {
    "isolation_level": READ_COMMITTED,
    "enable_auto_commit": False,
    "group_id": None,
    "auto_offset_reset": "earliest",
}
"""Forced on the follower's consumer: committed records only, no group, from the beginning."""


class StateRecordLike(Protocol):
    """What the follower reads of a consumer record (kafka-python's ``ConsumerRecord``)."""

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def offset(self) -> int: ...


class FollowerConsumer(Protocol):
    """The part of ``KafkaConsumer`` the follower uses."""

    def partitions_for_topic(self, topic: str) -> set[int] | None: ...

    def assign(self, partitions: list[TopicPartition]) -> None: ...

    def seek_to_beginning(self, *partitions: TopicPartition) -> None: ...

    def poll(self, timeout_ms: int = ...) -> dict[TopicPartition, Sequence[Any]]: ...

    def position(self, partition: TopicPartition) -> int: ...

    def end_offsets(
        self, partitions: list[TopicPartition], timeout_ms: int | None = ...
    ) -> dict[TopicPartition, int]: ...

    def close(self, timeout_ms: int | None = ...) -> None: ...


@dataclass(frozen=True, slots=True)
class FollowedState:
    """The state record the follower holds now."""

    payload: bytes
    partition: int
    offset: int
    received_at: float
    """``time.monotonic()`` when it was accepted."""
    sequence: int = 0
    """The record's sequence number (its header, :func:`~consumers.state.topic.
    state_record_sequence`)."""


class StateFollower:
    """Follows one key of the state topic on a daemon thread.

    Parameters
    ----------
    topic
        The state topic.
    key
        The record key followed (``consumers.state.topic.state_key(group, model_id)``).
    accept
        Called on the follower's thread with the verified payload of each newer record; raising
        refuses the record (ERROR logged, the previous state kept).
    consumer_factory
        Builds the consumer from keyword arguments: :data:`FOLLOWER_DEFAULTS`, then
        ``consumer_config``, then :data:`FOLLOWER_CONFIG` (``KafkaConsumer`` in production, a
        fake in unit tests).
    consumer_config
        Connection and security options (``KafkaSettings.client_config()``).
    poll_timeout_ms, end_check_interval_s, backoff_s, backoff_max_s
        Poll wait, how often the end of the log is checked, and the retry backoff
        (doubling up to the maximum) while the topic cannot be read.
    clock
        Monotonic clock (tests pass a fake).
    """

    def __init__(
        self,
        topic: str,
        key: bytes,
        accept: Callable[[bytes], None],
        consumer_factory: Callable[..., FollowerConsumer],
        consumer_config: dict[str, Any] | None = None,
        *,
        poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS,
        end_check_interval_s: float = DEFAULT_END_CHECK_INTERVAL_S,
        backoff_s: float = DEFAULT_BACKOFF_S,
        backoff_max_s: float = DEFAULT_BACKOFF_MAX_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._topic = topic
        self._key = key
        self._accept = accept
        self._factory = consumer_factory
        self._config = {**FOLLOWER_DEFAULTS, **(consumer_config or {}), **FOLLOWER_CONFIG}
        self._poll_timeout_ms = poll_timeout_ms
        self._end_check_interval_s = end_check_interval_s
        self._backoff_s = backoff_s
        self._backoff_max_s = backoff_max_s
        self._clock = clock
        self._stop = threading.Event()
        self._check_requested = threading.Event()
        self._pause_requested = threading.Event()
        self._paused = threading.Event()
        self._thread: threading.Thread | None = None
        self._state: FollowedState | None = None
        self._caught_up_at: float | None = None
        self._problem: str | None = "not started"
        self._skipped = 0
        self._assembler = StateAssembler(key)

    # -- what readers see -----------------------------------------------------------------------

    @property
    def state(self) -> FollowedState | None:
        """The newest accepted state record, or ``None`` before the first."""
        return self._state

    @property
    def holds_model(self) -> bool:
        """Whether a state record has been accepted."""
        return self._state is not None

    @property
    def caught_up_at(self) -> float | None:
        """When the follower last knew its state was the newest committed one (monotonic)."""
        return self._caught_up_at

    @property
    def problem(self) -> str | None:
        """Why the topic cannot be read right now (``None`` while it can)."""
        return self._problem

    @property
    def skipped(self) -> int:
        """Records of the key skipped because they failed verification or were refused."""
        return self._skipped

    @property
    def running(self) -> bool:
        """Whether the follower thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def paused(self) -> bool:
        """Whether the thread has stopped reading after :meth:`pause` (until :meth:`resume`)."""
        return self._paused.is_set()

    def pause(self) -> None:
        """Stop reading the topic (within one poll) until :meth:`resume`."""
        self._pause_requested.set()

    def resume(self) -> None:
        """Go on reading from the position reached before :meth:`pause`."""
        self._pause_requested.clear()
        self._paused.clear()

    def request_end_check(self) -> None:
        """Check the end of the log after the current poll instead of at the next interval.

        :attr:`caught_up_at` then passes the moment of this call as soon as the follower holds
        every record committed before it.
        """
        self._check_requested.set()

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start following on a daemon thread."""
        if self._thread is not None:
            raise RuntimeError("the follower was already started")
        self._thread = threading.Thread(target=self._run, name="state-follower", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> bool:
        """Ask the thread to stop; with ``timeout``, wait for it and return whether it ended."""
        self._stop.set()
        return self.join(timeout) if timeout is not None else True

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; whether it did."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    # -- the thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = self._backoff_s
        while not self._stop.is_set():
            consumer = None
            try:
                consumer = self._factory(**self._config)
                partitions = self._assign(consumer)
                if partitions:
                    backoff = self._backoff_s
                    self._follow(consumer, partitions)
            except Exception as exc:  # every failure is retried: followers outlive outages
                self._set_problem(f"cannot read the state topic {self._topic}: {exc!r}")
            finally:
                if consumer is not None:
                    _close(consumer)
            if self._stop.wait(backoff):
                break
            backoff = min(backoff * 2, self._backoff_max_s)

    def _assign(self, consumer: FollowerConsumer) -> list[TopicPartition]:
        numbers = consumer.partitions_for_topic(self._topic)
        if not numbers:
            self._set_problem(f"the state topic {self._topic} does not exist (yet)")
            return []
        partitions = [TopicPartition(self._topic, number) for number in sorted(numbers)]
        consumer.assign(partitions)
        # A reconnect re-reads the compacted topic: cheap (one record per key) and it sees a
        # record written while this consumer was away.
        consumer.seek_to_beginning(*partitions)
        return partitions

    def _follow(self, consumer: FollowerConsumer, partitions: list[TopicPartition]) -> None:
        next_end_check = self._clock()
        while not self._stop.is_set():
            if self._pause_requested.is_set():
                self._paused.set()
                self._stop.wait(self._poll_timeout_ms / MS_PER_S)
                continue
            batches = consumer.poll(timeout_ms=self._poll_timeout_ms)
            for partition, records in batches.items():
                self._take_newest(partition.partition, records)
            now = self._clock()
            # Checked on a timer, not only when idle: a learner writing at every poll must not
            # make its replicas look stale.
            if now >= next_end_check or self._check_requested.is_set():
                self._check_requested.clear()
                self._check_end(consumer, partitions)
                next_end_check = now + self._end_check_interval_s

    def _take_newest(self, partition: int, records: Sequence[StateRecordLike]) -> None:
        """Accept the newest usable record of the key among ``records`` (offset order)."""
        for record in records:
            self._assembler.add_chunk(record.key, record.value)
        for record in reversed(records):
            if record.key != self._key:
                continue
            current = self._state
            if current is not None and (current.partition, current.offset) >= (
                partition,
                record.offset,
            ):
                return
            try:
                value = self._assembler.complete(record.value)
                payload = decode_state_record(value)
                assert value is not None  # decode_state_record refuses a tombstone
                self._accept(payload)
            except Exception as exc:
                reason = str(exc) if isinstance(exc, CheckpointError) else repr(exc)
                logger.error(
                    "skipping state record %s/%d@%d: %s; keeping the previous state",
                    self._topic,
                    partition,
                    record.offset,
                    reason,
                )
                self._skipped += 1  # counted once logged: a reader of skipped finds the line
                continue
            self._state = FollowedState(
                payload, partition, record.offset, self._clock(), state_record_sequence(value)
            )
            return

    def _check_end(self, consumer: FollowerConsumer, partitions: list[TopicPartition]) -> None:
        # The moment before asking: every record committed by then is below the ends read.
        started = self._clock()
        try:
            ends = consumer.end_offsets(partitions, timeout_ms=END_OFFSETS_TIMEOUT_MS)
            positions = {tp: consumer.position(tp) for tp in partitions}
        except KafkaError as exc:
            self._set_problem(f"cannot reach the state topic {self._topic}: {exc!r}")
            return
        self._problem = None
        if all(positions[tp] >= ends.get(tp, 0) for tp in partitions):
            if self._caught_up_at is None:
                held = self._state
                logger.info(
                    "caught up with the state topic %s (%s)",
                    self._topic,
                    "no record of the key yet" if held is None else f"record @{held.offset}",
                )
            self._caught_up_at = started

    def _set_problem(self, problem: str) -> None:
        if problem != self._problem:
            logger.warning("%s", problem)
        self._problem = problem


def _close(consumer: FollowerConsumer) -> None:
    try:
        consumer.close(timeout_ms=CLOSE_TIMEOUT_MS)
    except Exception:
        logger.exception("closing the state follower's consumer failed")
