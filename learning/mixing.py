"""Iterative parameter mixing (IPM): the mixed model of P shards and its live mistake bound.

Shards are the P partitions of a stream. In round r every shard starts from the mixed weights
w⁽ʳ⁻¹⁾ (w⁽⁰⁾ = 0) and runs the ordinary perceptron over its round's events, giving w_p⁽ʳ⁾; the next
mixed model is the uniform mix w⁽ʳ⁾ = (1/P)·Σ_p w_p⁽ʳ⁾ (McDonald, Hall & Mann 2010).
:func:`mix_uniform` computes it in one fixed order, so every process mixing the same shards gets
the same bits.

The bound (derived step by step in ``docs/DISTRIBUTED_BOUND.md``). Fix a unit reference u and a
gamma > 0; let R be the largest ‖x̃‖ over every shard so far, a = R/gamma, M_{p,r} the mistakes of
shard p in round r and k_{p,r} its events whose margin y·u·x̃ is below gamma. With μ_p = 1/P,
M̃ = Σ_r Σ_p μ_p M_{p,r} and K̃ = Σ_r Σ_p μ_p k_{p,r}:

* u·w⁽ʳ⁾ ≥ gamma·M̃ - (gamma + R)·K̃, because a mistake moves u·w by at least gamma on a good event
  and by at least -R on a bad one, and u·w mixes linearly;
* ‖w⁽ʳ⁾‖² ≤ R²·M̃, because a mistake grows ‖w‖² by at most R² and ‖·‖² is convex;

so, by Cauchy-Schwarz, M̃ ≤ a·√M̃ + K̃·(1 + a), that is

    M̃ ≤ (a + √(a² + 4·K̃·(1 + a)))² / 4,

at every round and for every gamma; the tracker takes the minimum over the gamma grid of
:mod:`learning.bounds` (and, while every margin so far is positive, the separable bound a² at the
smallest margin). The mistakes of all shards together are P·M̃. Multiclass streams use the Kesler
construction with R' = √2·R in place of R, as the single-learner tracker does.

A shard hands over its round as a :class:`ShardRound`, read from a fresh
:class:`~learning.bounds.BoundTracker` that observed exactly that round's events.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from learning.bounds import (
    KESLER_FACTOR,
    VIOLATION_TOLERANCE,
    BoundTracker,
    check_state_arrays,
    checked_gamma_grid,
)

NO_VIOLATION = -1
"""The violation round of a reference whose bound has always held."""


def mix_uniform(shards: Sequence[NDArray[np.float64]]) -> NDArray[np.float64]:
    """(1/P)·Σ_p w_p, summed in the given order (callers pass shards by ascending partition).

    Multiclass weight matrices with fewer class rows than the widest shard are padded with
    zero rows (a class a shard never met has zero weights there).

    Examples
    --------
    >>> import numpy as np
    >>> mix_uniform([np.array([1.0, 2.0]), np.array([3.0, -2.0])]).tolist()
    [2.0, 0.0]
    >>> mix_uniform([np.ones((1, 2)), np.ones((2, 2))]).tolist()
    [[1.0, 1.0], [0.5, 0.5]]
    """
    if not shards:
        raise ValueError("mixing needs at least one shard")
    arrays = [np.asarray(shard, dtype=np.float64) for shard in shards]
    ndim = arrays[0].ndim
    if ndim not in (1, 2) or any(a.ndim != ndim for a in arrays):
        raise ValueError("shards must all be vectors or all be class matrices")
    if ndim == 1 and len({a.shape for a in arrays}) != 1:
        raise ValueError(f"shard vectors differ in length: {sorted({a.size for a in arrays})}")
    if ndim == 2 and len({a.shape[1] for a in arrays}) != 1:
        raise ValueError("shard matrices differ in width")
    shape = (max(a.shape[0] for a in arrays), *arrays[0].shape[1:])
    total = np.zeros(shape)
    for array in arrays:
        total[: array.shape[0]] += array
    total /= len(arrays)
    return total


def ipm_bound(radius: float, gamma: float, k_mixed: float) -> float:
    """(a + √(a² + 4·K̃·(1 + a)))² / 4 with a = radius/gamma: the bound on M̃.

    Examples
    --------
    >>> ipm_bound(2.0, 1.0, 0.0)  # K̃ = 0: Novikoff's (R/gamma)²
    4.0
    >>> round(ipm_bound(2.0, 1.0, 0.5), 4)  # above a² + K̃(1 + 2a) = 6.5: K̃ < 1
    6.6623
    """
    a = radius / gamma
    return (a + math.sqrt(a * a + 4.0 * k_mixed * (1.0 + a))) ** 2 / 4.0


@dataclass(frozen=True)
class ShardRound:
    """What one shard's round adds to the distributed bound.

    ``histograms`` holds, per reference, the margins of the round's events binned over the gamma
    grid (a :class:`~learning.bounds.BoundTracker`'s histograms); ``min_margins`` the smallest
    margin per reference (``inf`` for a round without events).
    """

    partition: int
    round: int
    seen: int
    mistakes: int
    radius_sq: float
    histograms: NDArray[np.int64]
    min_margins: NDArray[np.float64]

    @classmethod
    def from_tracker(cls, partition: int, round: int, tracker: BoundTracker) -> ShardRound:
        """The round a fresh tracker observed (it saw exactly that round's events)."""
        _, arrays = tracker.to_state()
        return cls(
            partition=partition,
            round=round,
            seen=tracker.seen,
            mistakes=tracker.mistakes,
            radius_sq=float(arrays["radius_sq"][0]),
            histograms=arrays["histograms"].copy(),
            min_margins=arrays["min_margins"].copy(),
        )


@dataclass(frozen=True)
class DistributedBoundStatus:
    """The distributed bound of one reference after the rounds mixed so far.

    ``mixed_mistakes`` is M̃ and ``bound`` its bound; ``total_mistakes`` (P·M̃, every shard's
    mistakes) and ``total_bound`` (P·bound) count all shards together. ``radius`` is R (multiclass
    bounds use √2·R); ``k_mixed`` is K̃ at the ``gamma`` attaining the bound; ``novikoff`` is the
    separable bound a² at the smallest margin while every margin so far is positive.
    """

    name: str
    partitions: int
    rounds: int
    seen: int
    radius: float
    mixed_mistakes: float
    total_mistakes: int
    gamma: float
    k_mixed: float
    bound: float
    total_bound: float
    novikoff: float | None
    min_margin: float | None
    violated: bool
    violation_round: int | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return dict(self.__dict__)


class DistributedBound:
    """The live IPM mistake bound of every reference, updated once per mixed round.

    Parameters
    ----------
    names
        The references' names, in the order of the shards' histogram rows.
    partitions
        P, the number of shards mixed uniformly each round.
    gamma_grid
        The grid the shards' trackers bin margins over; ``None`` for the default grid.
    multiclass
        Whether the shards learn class matrices (Kesler: R' = √2·R).

    Examples
    --------
    >>> import numpy as np
    >>> from learning.bounds import BoundTracker, Reference
    >>> shards = []
    >>> for p, (x, y) in enumerate([([1.0, 2.0], 1.0), ([1.0, -2.0], -1.0)]):
    ...     tracker = BoundTracker([Reference("u", [0.0, 1.0])])
    ...     tracker.observe_batch(np.array([x]), np.array([y]), np.array([True]))
    ...     shards.append(ShardRound.from_tracker(p, 1, tracker))
    >>> bound = DistributedBound(["u"], partitions=2)
    >>> bound.add_round(shards)
    >>> status = bound.status()[0]
    >>> status.mixed_mistakes, status.total_mistakes, round(status.total_bound, 3)
    (1.0, 2, 2.0)
    """

    def __init__(
        self,
        names: Sequence[str],
        partitions: int,
        gamma_grid: ArrayLike | None = None,
        multiclass: bool = False,
    ) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be at least 1, got {partitions}")
        if len(set(names)) != len(names):
            raise ValueError(f"reference names must be unique, got {list(names)}")
        grid = checked_gamma_grid(gamma_grid)
        self.names = tuple(names)
        self.partitions = partitions
        self.gamma_grid = grid
        self.multiclass = multiclass
        n_refs = len(self.names)
        self._histograms = np.zeros((n_refs, grid.size + 1), dtype=np.int64)
        self._min_margins = np.full(n_refs, math.inf)
        self._radius_sq = 0.0
        self._rounds = 0
        self._seen = 0
        self._mistakes = 0
        self._violation_round = np.full(n_refs, NO_VIOLATION, dtype=np.int64)

    def add_round(self, shards: Sequence[ShardRound]) -> None:
        """Account for one mixed round: exactly one :class:`ShardRound` per partition."""
        if sorted(shard.partition for shard in shards) != list(range(self.partitions)):
            raise ValueError(
                f"a round mixes partitions 0..{self.partitions - 1} once each, got "
                f"{sorted(shard.partition for shard in shards)}"
            )
        for shard in shards:
            self.check_fits(shard)
        for shard in shards:
            self._histograms += shard.histograms
            np.minimum(self._min_margins, shard.min_margins, out=self._min_margins)
            self._radius_sq = max(self._radius_sq, shard.radius_sq)
            self._seen += shard.seen
            self._mistakes += shard.mistakes
        self._rounds += 1
        for r, status in enumerate(self.status()):
            if self._violation_round[r] == NO_VIOLATION and status.mixed_mistakes > (
                status.bound * (1.0 + VIOLATION_TOLERANCE) + VIOLATION_TOLERANCE
            ):
                self._violation_round[r] = self._rounds

    def check_fits(self, shard: ShardRound) -> None:
        """Raise ``ValueError`` unless ``shard`` has a histogram row and a smallest margin per
        reference, binned over this bound's gamma grid."""
        expected = self._histograms.shape
        if shard.histograms.shape != expected or shard.min_margins.shape != expected[:1]:
            raise ValueError(
                f"partition {shard.partition}'s histograms have shape "
                f"{shard.histograms.shape}, expected {expected} ({len(self.names)} reference(s), "
                f"{self.gamma_grid.size} gammas)"
            )

    # ------------------------------------------------------------------ reading

    @property
    def rounds(self) -> int:
        """Rounds mixed so far."""
        return self._rounds

    @property
    def mistakes(self) -> int:
        """Every shard's mistakes so far (P·M̃)."""
        return self._mistakes

    @property
    def radius(self) -> float:
        """R = max ‖x̃‖ over every shard so far."""
        return math.sqrt(self._radius_sq)

    @property
    def violated(self) -> bool:
        """Whether any reference's bound has been violated."""
        return bool((self._violation_round != NO_VIOLATION).any())

    def status(self) -> list[DistributedBoundStatus]:
        """The bound of every reference now."""
        return [self._status(r) for r in range(len(self.names))]

    def _status(self, r: int) -> DistributedBoundStatus:
        radius = self.radius
        effective = radius * (KESLER_FACTOR if self.multiclass else 1.0)
        mixed = self._mistakes / self.partitions
        k_mixed = np.cumsum(self._histograms[r][:-1]) / self.partitions
        a = effective / self.gamma_grid
        with np.errstate(over="ignore", invalid="ignore"):
            bounds = (a + np.sqrt(a * a + 4.0 * k_mixed * (1.0 + a))) ** 2 / 4.0
        bounds = np.where(np.isnan(bounds), math.inf, bounds)
        index = int(np.argmin(bounds))
        bound = float(bounds[index])
        min_margin = float(self._min_margins[r])
        novikoff = None
        if self._seen and min_margin > 0.0:
            ratio = effective / min_margin
            novikoff = ratio * ratio
            bound = min(bound, novikoff)
        violation_round = int(self._violation_round[r])
        return DistributedBoundStatus(
            name=self.names[r],
            partitions=self.partitions,
            rounds=self._rounds,
            seen=self._seen,
            radius=radius,
            mixed_mistakes=mixed,
            total_mistakes=self._mistakes,
            gamma=float(self.gamma_grid[index]),
            k_mixed=float(k_mixed[index]),
            bound=bound,
            total_bound=bound * self.partitions,
            novikoff=novikoff,
            min_margin=min_margin if self._seen else None,
            violated=violation_round != NO_VIOLATION,
            violation_round=None if violation_round == NO_VIOLATION else violation_round,
        )

    # ------------------------------------------------------------------ persistence

    def to_state(self) -> tuple[dict[str, Any], dict[str, NDArray[Any]]]:
        """(JSON-able metadata, arrays), as :meth:`BoundTracker.to_state`."""
        meta = {
            "names": list(self.names),
            "partitions": self.partitions,
            "multiclass": self.multiclass,
            "rounds": self._rounds,
            "seen": self._seen,
            "mistakes": self._mistakes,
            "radius_sq": self._radius_sq,
        }
        arrays: dict[str, NDArray[Any]] = {
            "gamma_grid": self.gamma_grid,
            "histograms": self._histograms,
            "min_margins": self._min_margins,
            "violation_round": self._violation_round,
        }
        return meta, arrays

    @classmethod
    def from_state(
        cls, meta: Mapping[str, Any], arrays: Mapping[str, NDArray[Any]]
    ) -> DistributedBound:
        """Inverse of :meth:`to_state`; :class:`StateError` when the pieces do not fit."""
        bound = cls(
            list(meta["names"]),
            int(meta["partitions"]),
            gamma_grid=arrays["gamma_grid"],
            multiclass=bool(meta["multiclass"]),
        )
        n_refs = len(bound.names)
        expected = {
            "histograms": ((n_refs, bound.gamma_grid.size + 1), np.int64),
            "min_margins": ((n_refs,), np.float64),
            "violation_round": ((n_refs,), np.int64),
        }
        check_state_arrays("distributed bound", arrays, expected)
        bound._histograms = arrays["histograms"].copy()
        bound._min_margins = arrays["min_margins"].copy()
        bound._violation_round = arrays["violation_round"].copy()
        bound._rounds = int(meta["rounds"])
        bound._seen = int(meta["seen"])
        bound._mistakes = int(meta["mistakes"])
        bound._radius_sq = float(meta["radius_sq"])
        return bound


__all__ = [
    "NO_VIOLATION",
    "DistributedBound",
    "DistributedBoundStatus",
    "ShardRound",
    "ipm_bound",
    "mix_uniform",
]
