"""A mixing learner's shard rounds: activate a partition, learn its rounds, commit them.

:class:`ShardRounds` is the part of :class:`~consumers.mixing.runner.MixingRunner` that runs
partition p's :class:`~consumers.mixing.shard.PartitionRound` one after the other: activation
(register p's transactional producer, which fences its previous owner; catch up with the
contributions; resume after p's newest contribution), a round started from the newest mixed
model, fed from the polls, and committed in one transaction (dead letters, contribution, group
offset). It is a base class of the runner and shares its state (the attributes declared below).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafka import TopicPartition

from consumers.mixing.following import ContributionsFollowing, logger
from consumers.mixing.ledger import MixLedger
from consumers.mixing.producer import ShardProducer, shard_transactional_id
from consumers.mixing.shard import PartitionRound
from consumers.transactional_producer import ProducerBuilder, TransactionError


@dataclass(frozen=True)
class Carry:
    """What partition p's consumer holds after its last committed round ends at ``offset``:
    ``records`` (from ``offset`` on, in order) were returned by a poll after the round's last
    event, and the consumer's position is right after them (``offset`` when there are none)."""

    offset: int
    records: list[Any]


class ShardRounds(ContributionsFollowing):
    """Runs the rounds of the partitions this instance owns (a base of the runner)."""

    _build_producer: ProducerBuilder
    _dlq_topic: str
    _lock: threading.Lock
    _owned: set[int]
    _to_activate: set[int]
    _producers: dict[int, ShardProducer]
    _carry: dict[int, Carry]

    def _activate(self, p: int, ledger: MixLedger) -> None:
        producer = self._producers.get(p)
        if producer is None:
            transactional_id = shard_transactional_id(self._settings.group, self._settings.topic, p)
            producer = ShardProducer(
                self._settings.connection_config(), transactional_id, self._shard_producer
            )
            self._producers[p] = producer
        producer.activate()
        self._catch_up()
        newest = ledger.newest(p)
        tp = TopicPartition(self._settings.topic, p)
        if newest is not None:
            position = (newest.round, newest.end_offset)
        else:
            position = (0, self._consumer.beginning_offsets([tp])[tp])
        with self._lock:
            if p not in self._owned:
                return
            self._to_activate.discard(p)
            self._positions[p] = position
            self._carry.pop(p, None)
        logger.info(
            "partition %d active: round %d next, from offset %d", p, position[0] + 1, position[1]
        )

    def _shard_producer(self, config: Mapping[str, Any]) -> Any:
        """A shard's producer that already knows the contributions topic's partitions: the
        metadata request a first send would make happens on activation, not in a round's
        commit, where every shard of the next round waits for it."""
        producer = self._build_producer(config)
        try:
            producer.partitions_for(self._options.contributions_topic)
        except BaseException:
            producer.close(timeout=0)
            raise
        return producer

    def _start_rounds(self, ledger: MixLedger) -> None:
        mixed = ledger.current
        for p, (committed, offset) in sorted(self._positions.items()):
            if p in self._shards or committed > mixed.round:
                continue
            self._shards[p] = PartitionRound(
                self._settings.group,
                p,
                committed + 1,
                offset,
                mixed.weights,
                round_events=self._options.round_events,
                learner_factory=self._learner_factory,
                tracker_template=self._engine.tracker,
                decoder=self._engine.decoder,
            )
            tp = TopicPartition(self._settings.topic, p)
            carry = self._carry.pop(p, None)
            if carry is None or carry.offset != offset:
                self._consumer.seek(tp, offset)
            self._consumer.resume(tp)
            if carry is not None and carry.offset == offset and carry.records:
                self._learn(tp, carry.records)

    def _learn(self, tp: Any, records: list[Any]) -> None:
        shard = self._shards.get(tp.partition)
        if shard is None or not records:
            return
        if records[0].offset != shard.next_offset:
            # Records fetched before a seek: read again from where the round is.
            fresh = [r for r in records if r.offset >= shard.next_offset]
            if not fresh or fresh[0].offset != shard.next_offset:
                self._consumer.seek(tp, shard.next_offset)
                return
            records = fresh
        taken = shard.feed(records)
        if shard.full:
            self._finish(tp.partition, time_cut=False, rest=records[taken:])
        elif taken < len(records):
            self._consumer.seek(tp, shard.next_offset)

    def _finish(self, p: int, *, time_cut: bool, rest: list[Any] | None = None) -> None:
        """Commit partition p's round; ``rest``: the records of the last poll past its end."""
        shard = self._shards.pop(p)
        tp = TopicPartition(self._settings.topic, p)
        self._consumer.pause(tp)
        contribution = shard.contribution(time_cut=time_cut)
        try:
            self._producers[p].commit_round(
                contribution,
                shard.rejections,
                contributions_topic=self._options.contributions_topic,
                dlq_topic=self._dlq_topic,
                offsets={(self._settings.topic, p): contribution.end_offset},
                group_metadata=self._consumer.group_metadata(),
            )
        except (TransactionError, KeyError) as exc:
            logger.error(
                "round %d of partition %d not committed (%s); replaying it", shard.round, p, exc
            )
            with self._lock:
                self._positions.pop(p, None)
                if p in self._owned:
                    self._to_activate.add(p)
            return
        with self._lock:
            if p in self._positions:
                self._positions[p] = (contribution.round, contribution.end_offset)
                self._carry[p] = Carry(contribution.end_offset, rest or [])
        logger.debug(
            "round %d of partition %d committed: offsets [%d, %d), %d learned",
            contribution.round,
            p,
            contribution.start_offset,
            contribution.end_offset,
            contribution.learned,
        )
