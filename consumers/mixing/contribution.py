"""A shard's contribution to one mixing round, and its record in the contributions topic.

A contribution is everything the mix of round r needs from partition p, plus what makes the
round replayable and auditable: the offsets it covered ``[start_offset, end_offset)``, its
counters and its bound inputs (:class:`learning.mixing.ShardRound`). It is written in the same
Kafka transaction as the round's dead letters and the group offset of p at ``end_offset``, so a
contribution exists exactly when its round's effects do.

The value is JSON (orjson): floats are written as their shortest round-trip form, so weights read
back are bit-identical to the ones written. Every matrix is written with its shape (``shapes``):
nested JSON lists lose the width of a matrix without rows, and the bound's per-reference
matrices have no rows when no reference is configured (the default). A record without
``shapes`` is read from its nested lists, which then must form non-empty matrices.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from numpy.typing import NDArray

from learning.mixing import ShardRound

CONTRIBUTION_FORMAT = 1
CONTRIBUTIONS_SUFFIX = ".mixing"
CONTRIBUTION_TOPIC_CONFIGS = {
    "cleanup.policy": "delete",
    "retention.ms": "-1",
    "retention.bytes": "-1",
    "max.message.bytes": str(16 * 1024 * 1024),
}
"""Contributions are kept for ever: a (re)started instance rebuilds every mixed model, the
averaged predictor and the distributed bound by reading them from the start (one partition, so
one total order)."""


REFUSAL_FIXES = {
    "malformed": (
        "only novikoff instances of this group may write to the contributions topic; if only "
        "they do, the record is a defect of novikoff: report it with its offset"
    ),
    "format": "run the same novikoff version on every instance of the group",
    "partition": (
        "mixing needs the events topic's partition count fixed; to change it, start over with a "
        "new kafka.group_id or mixing.contributions_topic"
    ),
    "shape": (
        "give every instance of the group the same [model] and [bound] settings; to change "
        "them, start over with a new kafka.group_id or mixing.contributions_topic"
    ),
}
"""Why a follower refuses a contributions record (the ``reason`` label of
``novikoff_mixing_contributions_refused_total``), and what an operator does about it: the record
is not a contribution (``malformed``), has a format this version does not read (``format``), names
a partition the events topic lacks (``partition``), or holds matrices that do not fit this
instance's model or bound references (``shape``)."""
REFUSAL_REASONS = tuple(REFUSAL_FIXES)


class ContributionError(ValueError):
    """A contributions-topic record that is not a contribution this code can mix.

    ``reason`` is one of :data:`REFUSAL_REASONS`.
    """

    def __init__(self, message: str, reason: str = "malformed") -> None:
        super().__init__(message)
        if reason not in REFUSAL_FIXES:
            raise ValueError(f"unknown refusal reason {reason!r}")
        self.reason = reason

    @property
    def fix(self) -> str:
        """What an operator does about it."""
        return REFUSAL_FIXES[self.reason]


def default_contributions_topic(topic: str) -> str:
    """``<topic>.mixing``.

    >>> default_contributions_topic("events")
    'events.mixing'
    """
    return topic + CONTRIBUTIONS_SUFFIX


@dataclass(frozen=True)
class Contribution:
    """Partition ``partition``'s round ``round``: weights, counters, offsets and bound inputs.

    ``group`` is the consumer group (one model): groups learning the same topic share the
    contributions topic and each reads only its own contributions.

    ``weights`` and ``averaged`` are (rows, dimension) matrices: the weights after the round and
    the mean of the post-event weights over the round's events (the starting weights when the
    round learned nothing). ``time_cut`` says the round was cut by ``round_seconds`` before it
    had its ``round_events`` valid events.
    """

    group: str
    partition: int
    round: int
    start_offset: int
    end_offset: int
    learned: int
    mistakes: int
    dead_lettered: Mapping[str, int]
    weights: NDArray[np.float64] = field(repr=False)
    averaged: NDArray[np.float64] = field(repr=False)
    bound: ShardRound = field(repr=False)
    prequential: Mapping[str, int] = field(default_factory=dict)
    time_cut: bool = False

    @property
    def key(self) -> bytes:
        """The record key: ``group:partition:round``."""
        return f"{self.group}:{self.partition}:{self.round}".encode()

    def encode(self) -> bytes:
        """The record value."""
        histograms = np.asarray(self.bound.histograms, dtype=np.int64)
        return orjson.dumps(
            {
                "format": CONTRIBUTION_FORMAT,
                "group": self.group,
                "partition": self.partition,
                "round": self.round,
                "start_offset": self.start_offset,
                "end_offset": self.end_offset,
                "learned": self.learned,
                "mistakes": self.mistakes,
                "dead_lettered": dict(self.dead_lettered),
                "prequential": dict(self.prequential),
                "time_cut": self.time_cut,
                "weights": self.weights,
                "averaged": self.averaged,
                "shapes": {
                    "weights": self.weights.shape,
                    "averaged": self.averaged.shape,
                    "histograms": histograms.shape,
                },
                "bound": {
                    "seen": self.bound.seen,
                    "mistakes": self.bound.mistakes,
                    "radius_sq": self.bound.radius_sq,
                    "histograms": histograms,
                    # JSON has no infinity: the smallest margin of a round without events.
                    "min_margins": [
                        None if math.isinf(m) else m for m in self.bound.min_margins.tolist()
                    ],
                },
            },
            option=orjson.OPT_SERIALIZE_NUMPY,
        )

    @classmethod
    def decode(cls, value: bytes | None) -> Contribution:
        """Read a record value written by :meth:`encode`.

        Raises
        ------
        ContributionError
            When the value is not such a record.
        """
        try:
            data: dict[str, Any] = orjson.loads(value or b"")
            if data.get("format") != CONTRIBUTION_FORMAT:
                raise ContributionError(
                    f"format {data.get('format')!r}, expected {CONTRIBUTION_FORMAT}", "format"
                )
            partition, round_ = int(data["partition"]), int(data["round"])
            bound = data["bound"]
            shapes = data.get("shapes", {})
            return cls(
                group=str(data["group"]),
                partition=partition,
                round=round_,
                start_offset=int(data["start_offset"]),
                end_offset=int(data["end_offset"]),
                learned=int(data["learned"]),
                mistakes=int(data["mistakes"]),
                dead_lettered={str(k): int(v) for k, v in data["dead_lettered"].items()},
                prequential={str(k): int(v) for k, v in data["prequential"].items()},
                time_cut=bool(data["time_cut"]),
                weights=_matrix(data["weights"], np.float64, shapes.get("weights")),
                averaged=_matrix(data["averaged"], np.float64, shapes.get("averaged")),
                bound=ShardRound(
                    partition=partition,
                    round=round_,
                    seen=int(bound["seen"]),
                    mistakes=int(bound["mistakes"]),
                    radius_sq=float(bound["radius_sq"]),
                    histograms=_matrix(bound["histograms"], np.int64, shapes.get("histograms")),
                    min_margins=np.array(
                        [math.inf if m is None else float(m) for m in bound["min_margins"]],
                        dtype=np.float64,
                    ),
                ),
            )
        except ContributionError:
            raise
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ContributionError(f"not a contribution record: {exc!r}"[:300]) from None


def _matrix(values: Any, dtype: type[np.generic], shape: Any) -> Any:
    """The matrix of nested lists ``values``, whose shape must be ``shape`` (when recorded).

    JSON writes a matrix without rows as ``[]``, whatever its width: only the recorded shape
    gives it back.
    """
    array = np.asarray(values, dtype=dtype)
    if shape is None:
        if array.ndim != 2 or array.size == 0:
            raise ContributionError(f"expected a non-empty matrix, got shape {array.shape}")
        return array
    expected = tuple(int(n) for n in shape)
    if len(expected) != 2 or min(expected) < 0:
        raise ContributionError(f"a matrix's shape has two sizes, got {list(shape)}")
    if array.shape == (0,) and expected[0] == 0:
        return array.reshape(expected)
    if array.shape != expected:
        raise ContributionError(f"expected a matrix of shape {expected}, got shape {array.shape}")
    return array
