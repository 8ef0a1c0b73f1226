"""A mixing instance's view of the contributions topic: follow it, mix its rounds, serve them.

:class:`ContributionsFollowing` is the part of :class:`~consumers.mixing.runner.MixingRunner`
that reads the contributions topic ``read_committed`` into the
:class:`~consumers.mixing.ledger.MixLedger` (which mixes each complete round), catches up with
its end, and hands each newly mixed model and the ``/stats`` ``mixing`` section to the engine.
It is a base class of the runner and shares its state (the attributes declared below).

A record the follower refuses (:class:`~consumers.mixing.contribution.ContributionError`) is
logged with its fix and counted by reason; the newest refused record of this group is kept until
the mix next advances, and while the mix is awaited :attr:`~ContributionsFollowing.mix_blocked`
says why it cannot advance (the runner is then not ready).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kafka import TopicPartition

from consumers.engine import Engine
from consumers.kafka_clients import RunnerSettings
from consumers.mixing.contribution import Contribution, ContributionError
from consumers.mixing.ledger import MixLedger
from consumers.mixing.options import MixingOptions
from consumers.mixing.serving import mixed_learner, mixing_section
from consumers.mixing.shard import LearnerFactory, PartitionRound
from learning.mixing import DistributedBound
from learning.seeding import learner_weights

logger = logging.getLogger("consumers.mixing.runner")
"""The runner's logger: its lines keep one name, whichever module of the runner writes them."""

CONTRIBUTIONS_PARTITION = 0
CATCH_UP_TIMEOUT_S = 30.0
WAITING_POLL_MS = 50
"""How long one turn waits for contributions while no owned shard is learning."""
END_CHECK_INTERVAL_S = 0.5
"""How often a replica checks that it has read the contributions topic to its end."""

BoundFactory = Callable[[int], DistributedBound]


class RefusalObserver(Protocol):
    """Told of every contributions record the follower refuses (the service's
    ``novikoff_mixing_contributions_refused_total``)."""

    def on_contribution_refused(self, reason: str) -> None:
        """One refused record; ``reason`` is one of ``REFUSAL_REASONS``."""


class NullRefusalObserver:
    """Counts nothing."""

    def on_contribution_refused(self, reason: str) -> None:
        """Ignore the refusal."""


@dataclass(frozen=True)
class Refusal:
    """The newest refused contributions record of this group (or of no readable group)."""

    offset: int
    reason: str
    detail: str
    fix: str


def _group_of(key: bytes | None) -> str | None:
    """The group a record key ``group:partition:round`` names (``None``: no such key).

    >>> _group_of(b"novikoff:3:12"), _group_of(b"junk"), _group_of(None)
    ('novikoff', None, None)
    """
    parts = (key or b"").decode(errors="replace").rsplit(":", 2)
    return parts[0] if len(parts) == 3 else None


class ContributionsFollowing:
    """Follows the contributions topic and serves the mixed models (a base of the runner)."""

    _engine: Engine
    _settings: RunnerSettings
    _options: MixingOptions
    _learner_factory: LearnerFactory
    _bound_factory: BoundFactory
    _learns: bool
    _stop: threading.Event
    _consumer: Any
    _follower: Any
    _watermarks: Any
    _ledger: MixLedger | None
    _positions: dict[int, tuple[int, int]]
    _shards: dict[int, PartitionRound]
    _connected: bool
    _reason: str | None
    _caught_up_at: float | None
    _end_checked_at: float
    _published_round: int
    _progress_at: float
    _lock: threading.Lock
    _refusal: Refusal | None
    _refusal_observer: RefusalObserver

    def _follow_only(self) -> None:
        """A replica's turn: follow the contributions, check the end of their log now and then."""
        if self._ensure_ledger() is None:
            self._follower.poll(timeout_ms=WAITING_POLL_MS)
            return
        self._follow(WAITING_POLL_MS)
        now = time.monotonic()
        if now - self._end_checked_at >= END_CHECK_INTERVAL_S:
            self._end_checked_at = now
            contributions = TopicPartition(
                self._options.contributions_topic, CONTRIBUTIONS_PARTITION
            )
            # read_committed: the end is the last stable offset, every transaction below it ended.
            end = self._follower.end_offsets([contributions])[contributions]
            if self._follower.position(contributions) >= end:
                self._caught_up_at = now
        self._connected = True
        self._reason = None

    def _ensure_ledger(self) -> MixLedger | None:
        if self._ledger is not None:
            return self._ledger
        metadata = self._consumer if self._learns else self._follower
        partitions = metadata.partitions_for_topic(self._settings.topic)
        if not partitions:
            self._reason = f"waiting for topic {self._settings.topic!r}"
            return None
        count = len(partitions)
        zero = learner_weights(self._learner_factory()) * 0.0
        ledger = self._ledger = MixLedger(count, zero, self._bound_factory(count))
        # Ready once everything committed before the start is mixed: serve no stale model.
        self._catch_up()
        self._publish(ledger)
        return ledger

    def _follow(self, timeout_ms: int) -> None:
        """Feed the ledger what the contributions topic has committed since the last call."""
        polled = self._follower.poll(timeout_ms=timeout_ms)
        ledger = self._ledger
        assert ledger is not None
        for records in polled.values():
            for record in records:
                self._take(ledger, record.offset, record.key, record.value)
        if self._published_round >= 0 and ledger.current.round != self._published_round:
            self._publish(ledger)

    def _take(self, ledger: MixLedger, offset: int, key: bytes | None, value: bytes | None) -> None:
        """Feed the ledger one contributions record; count and remember a refused one."""
        mixed = ledger.current.round
        try:
            contribution = Contribution.decode(value)
            if contribution.group == self._settings.group:
                ledger.add(contribution)
        except ContributionError as exc:
            logger.error(
                "contributions record @%d skipped (%s): %s; fix: %s",
                offset,
                exc.reason,
                exc,
                exc.fix,
            )
            try:
                self._refusal_observer.on_contribution_refused(exc.reason)
            except Exception as observer_error:
                logger.warning("refusal observer failed: %r", observer_error)
            if _group_of(key) in (self._settings.group, None):
                self._refusal = Refusal(offset, exc.reason, str(exc), exc.fix)
            return
        if ledger.current.round != mixed:
            self._refusal = None  # the mix advanced past whatever was refused

    @property
    def mix_blocked(self) -> str | None:
        """Why the mix cannot advance, when contributions of this group were refused since it
        last did and it is awaited (a replica always awaits it; a learner, once one of its shards
        has committed a round the mix lacks); ``None`` otherwise."""
        refusal, ledger = self._refusal, self._ledger
        if refusal is None or ledger is None:
            return None
        mixed = ledger.current.round
        if self._learns:
            with self._lock:
                committed = [round_ for round_, _ in self._positions.values()]
            if not any(round_ > mixed for round_ in committed):
                return None
        return (
            f"the mix cannot advance past round {mixed}: contributions record @{refusal.offset} "
            f"of {self._options.contributions_topic} was refused ({refusal.reason}: "
            f"{refusal.detail}); fix: {refusal.fix}"
        )

    def _catch_up(self) -> None:
        """Read the contributions topic up to its end as of now (everything committed before)."""
        contributions = TopicPartition(self._options.contributions_topic, CONTRIBUTIONS_PARTITION)
        # A learner's target is the high watermark (from a read_uncommitted client), which the
        # read_committed follower passes only once every transaction below it has ended, so a
        # shard's newest contribution is read even behind another shard's open transaction (the
        # last stable offset would stop before it). A replica has only the follower: its target
        # is the last stable offset, which only delays what it serves.
        started = time.monotonic()
        ends = self._watermarks if self._learns else self._follower
        target = ends.end_offsets([contributions])[contributions]
        deadline = started + CATCH_UP_TIMEOUT_S
        while self._follower.position(contributions) < target:
            if time.monotonic() > deadline or self._stop.is_set():
                raise TimeoutError(f"contributions topic not read up to offset {target}")
            self._follow(WAITING_POLL_MS)
        self._caught_up_at = started

    def _publish(self, ledger: MixLedger) -> None:
        mixed = ledger.current
        learner = mixed_learner(self._learner_factory(), mixed)
        progress = {
            (self._settings.topic, p): (done.start, done.end, done.learned, done.rejected)
            for p, done in ledger.progress().items()
        }
        self._engine.publish_mixed(learner, mixed.dead_lettered, mixed.round, progress)
        self._published_round = mixed.round
        self._publish_progress()

    def _publish_progress(self) -> None:
        ledger = self._ledger
        if ledger is None:
            return
        learning = {p: shard.learned for p, shard in self._shards.items()}
        self._engine.set_mixing(
            mixing_section(ledger, self._options, learning, set(self._positions))
        )
