"""The mixing ledger: contributions in, mixed models out, the same on every instance.

Every instance feeds the ledger the contributions topic in its (``read_committed``) order. When
all P partitions have contributed round r, the ledger mixes them, in ascending partition order,
into w⁽ʳ⁾ = (1/P)·Σ_p w_p⁽ʳ⁾ (:func:`learning.mixing.mix_uniform`). The mix depends only on the
contributions, never on their arrival order or on who wrote them, so every instance, and every
restart, holds bit-identical mixed models.

Predictors served under mixing
    ``last`` is w⁽ʳ⁾. ``averaged`` mixes the averages too: each shard's mean post-event weights
    over its round are mixed like the weights, and the served average is the mean of those mixed
    round averages over rounds 1..r (summed in round order). ``voted`` keeps no voters across
    mixes: it votes with w⁽ʳ⁾ alone, so it predicts as ``last``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from consumers.mixing.contribution import Contribution, ContributionError
from learning.mixing import DistributedBound, mix_uniform

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Mixed:
    """The mixed model after round ``round`` (round 0: the zero weights nothing has mixed)."""

    round: int
    weights: NDArray[np.float64]
    averaged: NDArray[np.float64]
    learned: int
    mistakes: int
    dead_lettered: Mapping[str, int]
    prequential: Mapping[str, int]


@dataclass(frozen=True)
class MixedProgress:
    """What the mixed rounds took from one partition: offsets ``[start, end)`` and counts."""

    start: int
    end: int
    learned: int
    rejected: int


class MixLedger:
    """Collects contributions and mixes each complete round, in round order.

    Parameters
    ----------
    partitions
        P, the number of shards (partitions of the events topic).
    zero
        w⁽⁰⁾: a zero matrix of the weights' shape.
    bound
        The distributed bound each mixed round is added to.

    Examples
    --------
    >>> import numpy as np
    >>> from learning.mixing import DistributedBound, ShardRound
    >>> def part(p, w):
    ...     bound = ShardRound(p, 1, 3, 0, 0.0, np.zeros((0, 2), dtype=np.int64), np.zeros(0))
    ...     return Contribution("g", p, 1, 0, 3, 3, 0, {}, np.array([w]), np.array([w]), bound)
    >>> ledger = MixLedger(2, np.zeros((1, 2)), DistributedBound([], 2, gamma_grid=[1.0]))
    >>> ledger.add(part(1, [1.0, 2.0])), ledger.current.round
    (False, 0)
    >>> ledger.add(part(0, [0.0, 1.0])), ledger.current.weights.tolist(), ledger.current.learned
    (True, [[0.5, 1.5]], 6)
    """

    def __init__(self, partitions: int, zero: NDArray[np.float64], bound: DistributedBound) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be at least 1, got {partitions}")
        self.partitions = partitions
        self.bound = bound
        self._pending: dict[int, dict[int, Contribution]] = {}
        self._newest: dict[int, Contribution] = {}
        self._averaged_sum = np.zeros_like(zero)
        self._progress: dict[int, MixedProgress] = {}
        self._bound_status = bound.status()
        self._current = Mixed(0, zero.copy(), zero.copy(), 0, 0, {}, {})

    @property
    def current(self) -> Mixed:
        """The newest mixed model."""
        return self._current

    def newest(self, partition: int) -> Contribution | None:
        """``partition``'s newest contribution (mixed or not), if any."""
        return self._newest.get(partition)

    @property
    def bound_status(self) -> list[Any]:
        """The distributed bound's status after the newest mixed round (one per reference)."""
        return list(self._bound_status)

    def progress(self) -> dict[int, MixedProgress]:
        """Per partition, what the mixed rounds covered (partitions in no mixed round absent)."""
        return dict(self._progress)

    def contributed(self) -> dict[int, int]:
        """The newest round each partition has contributed (0: none yet)."""
        return {p: (c.round if (c := self._newest.get(p)) else 0) for p in range(self.partitions)}

    def add(self, contribution: Contribution) -> bool:
        """Take one contribution; whether a new mixed model resulted.

        A second contribution of the same (partition, round) is ignored (it can only be the same
        round replayed; with ``round_seconds = 0`` it is identical).

        Raises
        ------
        ContributionError
            When the contribution cannot be mixed here: its partition is not one of the topic's
            (``partition``), or its matrices do not fit this model and bound (``shape``).
        """
        p, r = contribution.partition, contribution.round
        if not 0 <= p < self.partitions:
            raise ContributionError(
                f"contribution of partition {p}, but the events topic has {self.partitions}",
                "partition",
            )
        width = self._current.weights.shape[1]
        for name, matrix in (
            ("weights", contribution.weights),
            ("averaged", contribution.averaged),
        ):
            if matrix.ndim != 2 or matrix.shape[1] != width:
                raise ContributionError(
                    f"partition {p}'s {name} have shape {matrix.shape}; the model has {width} "
                    "coordinates",
                    "shape",
                )
        try:
            self.bound.check_fits(contribution.bound)
        except ValueError as exc:
            raise ContributionError(str(exc), "shape") from None
        if r <= self._current.round or p in self._pending.get(r, {}):
            logger.warning("duplicate contribution of partition %d, round %d ignored", p, r)
            return False
        self._pending.setdefault(r, {})[p] = contribution
        newest = self._newest.get(p)
        if newest is None or r > newest.round:
            self._newest[p] = contribution
        mixed = False
        while len(self._pending.get(self._current.round + 1, {})) == self.partitions:
            self._mix(self._pending.pop(self._current.round + 1))
            mixed = True
        return mixed

    def _mix(self, by_partition: Mapping[int, Contribution]) -> None:
        shards: Sequence[Contribution] = [by_partition[p] for p in sorted(by_partition)]
        previous = self._current
        round_ = previous.round + 1
        weights = mix_uniform([c.weights for c in shards])
        self._averaged_sum = self._averaged_sum + mix_uniform([c.averaged for c in shards])
        prequential: Counter[str] = Counter(previous.prequential)
        dead_lettered: Counter[str] = Counter(previous.dead_lettered)
        for c in shards:
            prequential.update(c.prequential)
            dead_lettered.update(c.dead_lettered)
        self.bound.add_round([c.bound for c in shards])
        self._bound_status = self.bound.status()
        for c in shards:
            before = self._progress.get(c.partition)
            self._progress[c.partition] = MixedProgress(
                start=c.start_offset if before is None else before.start,
                end=c.end_offset,
                learned=c.learned + (0 if before is None else before.learned),
                rejected=sum(c.dead_lettered.values()) + (0 if before is None else before.rejected),
            )
        self._current = Mixed(
            round=round_,
            weights=weights,
            averaged=self._averaged_sum / round_,
            learned=previous.learned + sum(c.learned for c in shards),
            mistakes=previous.mistakes + sum(c.mistakes for c in shards),
            dead_lettered=dict(dead_lettered),
            prequential=dict(prequential),
        )
