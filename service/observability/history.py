"""A bounded history of ``/stats`` points for the dashboard chart.

The service records one point about once a second for as long as it runs, so the history must not
grow with the stream. :class:`StatsHistory` keeps the newest points at full resolution and thins
the older ones: when the older region fills up, every other point in it is dropped and from then
on only every second point leaving the recent region is kept. The older region therefore always
spans the whole run back to the first point, at a resolution that halves each time it fills, and
the total number of points never exceeds ``capacity``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_CAPACITY = 1200
"""Points kept in total: 20 minutes at full resolution plus the thinned run before them."""

MIN_OLDER_POINTS = 2
"""Halving needs at least two points in the older region."""

DEFAULT_INTERVAL_S = 1.0
"""How often :class:`HistoryRecorder` samples ``/stats``."""


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    """One sample of the learning curve.

    Attributes
    ----------
    t
        Unix time of the sample, in seconds.
    seen
        Events learned so far.
    mistakes
        Cumulative perceptron mistakes (updates) so far.
    bounds
        The mistake bound of each reference separator, ``None`` where it is not defined yet.
    """

    t: float
    seen: int
    mistakes: int
    bounds: tuple[tuple[str, float | None], ...]

    @classmethod
    def from_stats(cls, stats: Mapping[str, Any], t: float) -> HistoryPoint:
        """Build a point from a ``/stats`` dictionary (see docs/DESIGN.md).

        Raises
        ------
        ValueError
            When ``stats`` lacks ``seen``, ``mistakes`` or a well-formed ``bounds`` list.
        """
        try:
            seen = int(stats["seen"])
            mistakes = int(stats["mistakes"])
            bounds = tuple(
                (str(entry["name"]), _optional_float(entry["bound"]))
                for entry in stats.get("bounds", ())
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"stats must have integer 'seen' and 'mistakes' and a 'bounds' list of "
                f"{{'name', 'bound'}} objects: {exc!r}"
            ) from exc
        return cls(t=t, seen=seen, mistakes=mistakes, bounds=bounds)

    def same_curve_as(self, other: HistoryPoint) -> bool:
        """True when both points show the same counts and bounds (times may differ)."""
        return (
            self.seen == other.seen
            and self.mistakes == other.mistakes
            and self.bounds == other.bounds
        )

    def to_json(self) -> dict[str, Any]:
        """The point in the ``/stats/history`` shape."""
        return {
            "t": self.t,
            "seen": self.seen,
            "mistakes": self.mistakes,
            "bounds": dict(self.bounds),
        }


def _optional_float(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"a bound must be a number or null, got {value!r}")
    return float(value)


class StatsHistory:
    """A thread-safe, bounded history of stats points, thinned as it ages.

    Parameters
    ----------
    capacity
        The most points ever held.
    full_resolution
        How many of the newest points are kept unthinned; defaults to half of ``capacity``.

    Examples
    --------
    >>> history = StatsHistory(capacity=4, full_resolution=2)
    >>> for n in range(10):
    ...     _ = history.record({"seen": n, "mistakes": n // 2, "bounds": []}, now=float(n))
    >>> [point.seen for point in history.points()]
    [0, 4, 8, 9]
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY, full_resolution: int | None = None):
        if full_resolution is None:
            full_resolution = capacity // 2
        if full_resolution < 1 or capacity - full_resolution < MIN_OLDER_POINTS:
            raise ValueError(
                f"need 1 <= full_resolution <= capacity - {MIN_OLDER_POINTS}, got "
                f"capacity={capacity}, full_resolution={full_resolution}"
            )
        self.capacity = capacity
        self.full_resolution = full_resolution
        self._older_capacity = capacity - full_resolution
        self._lock = threading.Lock()
        self._recent: deque[HistoryPoint] = deque()
        self._older: list[HistoryPoint] = []
        self._stride = 1
        self._aged = 0
        self._last: HistoryPoint | None = None

    @property
    def stride(self) -> int:
        """How many aged points the older region keeps one of (a power of two)."""
        return self._stride

    def __len__(self) -> int:
        with self._lock:
            return len(self._older) + len(self._recent)

    def record(self, stats: Mapping[str, Any], now: float | None = None) -> bool:
        """Add a point built from a ``/stats`` dictionary.

        A point that repeats the previous counts and bounds is skipped, so an idle stream does
        not push the learning curve out of the history.

        Parameters
        ----------
        stats
            The ``/stats`` dictionary (only ``seen``, ``mistakes`` and ``bounds`` are read).
        now
            Unix time of the sample; the current time when omitted.

        Returns
        -------
        bool
            Whether the point was added.
        """
        point = HistoryPoint.from_stats(stats, time.time() if now is None else now)
        with self._lock:
            if self._last is not None and point.same_curve_as(self._last):
                return False
            if len(self._recent) == self.full_resolution:
                self._age(self._recent.popleft())
            self._recent.append(point)
            self._last = point
            return True

    def _age(self, point: HistoryPoint) -> None:
        """Move a point out of the recent region, keeping one in ``stride`` of them."""
        index = self._aged
        self._aged += 1
        if index % self._stride:
            return
        if len(self._older) == self._older_capacity:
            self._older = self._older[::2]
            self._stride *= 2
            if index % self._stride:
                return
        self._older.append(point)

    def points(self) -> list[HistoryPoint]:
        """All points, oldest first."""
        with self._lock:
            return [*self._older, *self._recent]

    def to_json(self) -> dict[str, Any]:
        """The ``/stats/history`` body: ``{"capacity": N, "points": [...]}``."""
        return {"capacity": self.capacity, "points": [p.to_json() for p in self.points()]}


class HistoryRecorder:
    """A daemon thread that records ``stats_source()`` into a history every ``interval_s``.

    Parameters
    ----------
    history
        Where the points go.
    stats_source
        Returns the current ``/stats`` dictionary, or ``None`` while there is none yet.
    interval_s
        Seconds between samples.
    """

    def __init__(
        self,
        history: StatsHistory,
        stats_source: Callable[[], Mapping[str, Any] | None],
        interval_s: float = DEFAULT_INTERVAL_S,
    ):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.history = history
        self.stats_source = stats_source
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start sampling (a no-op when already running)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="novikoff-history", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop sampling and wait for the thread to end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def sample(self) -> bool:
        """Record one point now; returns whether a point was added."""
        stats = self.stats_source()
        return stats is not None and self.history.record(stats)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception:
                # The chart may miss a point; the recorder must not die with it.
                logger.exception("could not record a stats history point")
            self._stop.wait(self.interval_s)
