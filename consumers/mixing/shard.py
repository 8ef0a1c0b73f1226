"""One shard's round: the ordinary perceptron over a partition's next R valid events.

A :class:`PartitionRound` starts from the mixed weights w⁽ʳ⁻¹⁾ with a fresh learner and a fresh
bound tracker, learns its partition's records in offset order and stops right after the R-th valid
event (records the decoder refuses do not count; they are kept to be dead-lettered with the
round). It never takes a record past that event, so where a round ends depends on the
partition's contents and R alone.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from consumers.decoding.events import EventDecoder, Rejection, SourceRecord
from consumers.mixing.contribution import Contribution
from learning import BoundTracker, LinearLearner
from learning.mixing import ShardRound as ShardBoundInputs
from learning.seeding import learner_averaged, learner_weights, seed_learner

LearnerFactory = Callable[[], LinearLearner]


def fresh_tracker(template: BoundTracker) -> BoundTracker:
    """A tracker with ``template``'s references and grid that has seen nothing."""
    return BoundTracker(
        template.references,
        gamma_grid=template.gamma_grid,
        multiclass=template.multiclass,
        margin_window=template.margin_window,
    )


class PartitionRound:
    """Partition ``partition``'s round ``round``, from ``start_offset`` and weights ``start``.

    Parameters
    ----------
    group
        The consumer group (the model's name in the contributions topic).
    partition, round
        The shard and the round (1 for the first).
    start_offset
        The partition's first offset of the round.
    start
        w⁽ʳ⁻¹⁾, (rows, dimension).
    round_events
        R: the valid events that complete the round.
    learner_factory
        Makes a fresh learner with the service's hyperparameters.
    tracker_template
        The service's tracker (references and grid of the round's tracker).
    decoder
        Decodes and validates records (the engine's).
    clock
        Monotonic clock for time cuts.
    """

    def __init__(
        self,
        group: str,
        partition: int,
        round: int,
        start_offset: int,
        start: NDArray[np.float64],
        *,
        round_events: int,
        learner_factory: LearnerFactory,
        tracker_template: BoundTracker,
        decoder: EventDecoder,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.group = group
        self.partition = partition
        self.round = round
        self.start_offset = start_offset
        self.next_offset = start_offset
        self.started_at = clock()
        self._start = start
        self._round_events = round_events
        self._learner = seed_learner(learner_factory(), start)
        self._tracker = fresh_tracker(tracker_template)
        self._decoder = decoder
        self.learned = 0
        self.rejections: list[Rejection] = []

    @property
    def full(self) -> bool:
        """Whether the round has its R valid events."""
        return self.learned >= self._round_events

    def feed(self, records: Sequence[SourceRecord]) -> int:
        """Learn ``records`` (this partition's, from :attr:`next_offset`) until the round is full.

        Returns how many records were taken; the rest belong to the next round.
        """
        taken = 0
        limit = self._decoder.max_batch_rows
        while taken < len(records) and not self.full:
            # At most the events still missing: the R-th valid event ends a chunk.
            size = min(self._round_events - self.learned, limit, len(records) - taken)
            chunk = records[taken : taken + size]
            batch = self._decoder.decode_batch(chunk)
            if batch.valid:
                result = self._learner.learn_batch(batch.X, batch.y)
                self._tracker.observe_batch(batch.X, batch.y, result)
            self.learned += batch.valid
            self.rejections.extend(batch.rejections)
            taken += size
            self.next_offset = chunk[-1].offset + 1
        return taken

    def contribution(self, *, time_cut: bool = False) -> Contribution:
        """The round's contribution (its offsets end at :attr:`next_offset`)."""
        weights = learner_weights(self._learner)
        averaged = learner_averaged(self._learner) if self.learned else self._start.copy()
        return Contribution(
            group=self.group,
            partition=self.partition,
            round=self.round,
            start_offset=self.start_offset,
            end_offset=self.next_offset,
            learned=self.learned,
            mistakes=self._learner.n_updates,
            dead_lettered=dict(Counter(r.reason for r in self.rejections)),
            weights=weights,
            averaged=averaged,
            bound=ShardBoundInputs.from_tracker(self.partition, self.round, self._tracker),
            prequential=dict(self._learner.prequential_mistakes),
            time_cut=time_cut,
        )
