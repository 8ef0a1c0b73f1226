"""Benchmarks: ``python -m bench`` runs every ``bench/bench_*.py`` module and compares.

Adding a benchmark
------------------
Create ``bench/bench_<topic>.py`` with a function ``run(quick: bool = False) ->
list[BenchRecord]``. Each record names one measurement, its value, the value of a reference
measured **in the same run** (never a stored number) and which direction is better; the harness
computes the ratio, prints a table and writes ``bench/results.json``. ``quick=True`` asks for a
smaller workload (used by smoke tests); the ratios are then noisier.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)


class ResultMismatchError(AssertionError):
    """A benchmark's own correctness check failed: its figure measures the wrong work."""


@dataclass(frozen=True)
class BenchRecord:
    """One benchmark measurement against a reference measured in the same run.

    Attributes
    ----------
    name
        Stable identifier, e.g. ``learner_d10_vs_river``.
    value
        Our measurement.
    reference
        The reference's measurement (same unit), or ``None`` when there is none.
    unit
        Unit of ``value`` and ``reference``.
    reference_name
        What the reference is.
    higher_is_better
        True for rates (events/s), False for durations.
    bar
        Minimum ratio the benchmark is expected to reach, if any.
    details
        Anything else worth keeping (JSON-able): counts, sizes, checks.
    """

    name: str
    value: float
    reference: float | None
    unit: str
    reference_name: str = ""
    higher_is_better: bool = True
    bar: float | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        """How many times better than the reference (>1 is better)."""
        if self.reference is None or self.reference == 0 or self.value == 0:
            return None
        return self.value / self.reference if self.higher_is_better else self.reference / self.value

    @property
    def meets_bar(self) -> bool | None:
        """Whether the ratio reaches the bar (``None`` without a bar)."""
        if self.bar is None:
            return None
        ratio = self.ratio
        return ratio is not None and ratio >= self.bar

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form, ratio and verdict included."""
        return {
            "name": self.name,
            "value": self.value,
            "reference": self.reference,
            "ratio": self.ratio,
            "unit": self.unit,
            "reference_name": self.reference_name,
            "higher_is_better": self.higher_is_better,
            "bar": self.bar,
            "meets_bar": self.meets_bar,
            "details": self.details,
        }


def best_time(action: Callable[[], object], repeats: int) -> float:
    """Fastest wall time of ``repeats`` runs of ``action`` (seconds)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - start)
    return best
