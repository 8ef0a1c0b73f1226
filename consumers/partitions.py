"""The engine's ledger of each partition: applied offset ranges, counts, checkpoint form."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from consumers.decoding.events import REASON_CODES
from consumers.reports import PartitionKey, PartitionProgress
from learning import BoundTracker, LinearLearner

logger = logging.getLogger(__name__)


STATE_FORMAT = 1


@dataclass(frozen=True)
class LoadedState:
    """A verified state payload, loaded and checked against the engine's model, not installed."""

    learner: LinearLearner
    tracker: BoundTracker
    partitions: dict[PartitionKey, _Partition]
    invalid: dict[str, int]

    @property
    def applied(self) -> int:
        """Records this state has applied (learned + rejected): it only grows along a history."""
        return self.learner.n_seen + sum(self.invalid.values())


class _Partition:
    """Mutable progress of one partition (engine-internal)."""

    __slots__ = ("applied", "highwater", "learned", "next_offset", "rejected")

    def __init__(self, next_offset: int) -> None:
        self.next_offset = next_offset
        self.applied: list[list[int]] = []
        self.learned = 0
        self.rejected = 0
        self.highwater: int | None = None

    def record(self, first: int, last: int, learned: int, rejected: int) -> None:
        if self.applied and self.applied[-1][1] == first:
            self.applied[-1][1] = last + 1
        else:
            self.applied.append([first, last + 1])
        self.next_offset = last + 1
        self.learned += learned
        self.rejected += rejected

    def frozen(self, key: PartitionKey) -> PartitionProgress:
        return PartitionProgress(
            topic=key[0],
            partition=key[1],
            next_offset=self.next_offset,
            applied=tuple((start, stop) for start, stop in self.applied),
            learned=self.learned,
            rejected=self.rejected,
            highwater=self.highwater,
        )

    def to_state(self, key: PartitionKey) -> dict[str, Any]:
        return {
            "topic": key[0],
            "partition": key[1],
            "next_offset": self.next_offset,
            "applied": [list(pair) for pair in self.applied],
            "learned": self.learned,
            "rejected": self.rejected,
        }

    @classmethod
    def from_state(cls, data: Mapping[str, Any]) -> tuple[PartitionKey, _Partition]:
        partition = cls(int(data["next_offset"]))
        partition.applied = [[int(start), int(stop)] for start, stop in data["applied"]]
        partition.learned = int(data["learned"])
        partition.rejected = int(data["rejected"])
        key = (str(data["topic"]), int(data["partition"]))
        problem = partition._inconsistency(key)
        if problem:
            raise ValueError(f"partition {key[0]}/{key[1]} in the checkpoint: {problem}")
        return key, partition

    def _inconsistency(self, key: PartitionKey) -> str | None:
        """What no run of the engine can produce (a hand-made or damaged state), if anything."""
        if not key[0] or key[1] < 0 or self.next_offset < 0:
            return "negative or empty coordinates"
        if self.learned < 0 or self.rejected < 0:
            return "negative counts"
        previous_stop = 0
        for start, stop in self.applied:
            if not previous_stop <= start < stop:
                return f"applied ranges {self.applied} are not ascending and disjoint"
            previous_stop = stop
        if self.applied and previous_stop != self.next_offset:
            return f"next offset {self.next_offset} is not the end of the applied ranges"
        span = sum(stop - start for start, stop in self.applied)
        if self.learned + self.rejected != span:
            return f"{self.learned} learned + {self.rejected} rejected != {span} applied offsets"
        return None


def _partitions_from(
    extra: Mapping[str, Any],
) -> tuple[dict[PartitionKey, _Partition], dict[str, int]]:
    if extra.get("format") != STATE_FORMAT:
        raise ValueError(
            f"checkpoint extra has format {extra.get('format')!r}, expected {STATE_FORMAT}"
        )
    partitions: dict[PartitionKey, _Partition] = {}
    for item in extra["partitions"]:
        key, state = _Partition.from_state(item)
        if key in partitions:
            raise ValueError(f"partition {key[0]}/{key[1]} appears twice in the checkpoint")
        partitions[key] = state
    invalid = {str(reason): int(count) for reason, count in dict(extra["invalid"]).items()}
    wrong = {r: c for r, c in invalid.items() if r not in REASON_CODES or c < 0}
    if wrong:
        raise ValueError(f"checkpoint counts unknown reasons or negative counts: {wrong}"[:300])
    return partitions, invalid


def offsets_text(offsets: Iterable[tuple[PartitionKey, int]]) -> str:
    """``topic/partition@offset`` list for logs."""
    return ", ".join(f"{t}/{p}@{o}" for (t, p), o in sorted(offsets))
