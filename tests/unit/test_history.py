"""StatsHistory: bounded memory, whole-run coverage, full resolution for recent points."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.observability.history import HistoryPoint, HistoryRecorder, StatsHistory


def stats(seen: int, mistakes: int | None = None, bound: float | None = 100.0) -> dict[str, Any]:
    return {
        "seen": seen,
        "mistakes": seen // 3 if mistakes is None else mistakes,
        "bounds": [{"name": "u", "bound": bound, "gamma": 0.1, "k": 0}],
        "radius": 1.0,
    }


def fill(history: StatsHistory, count: int) -> None:
    for n in range(count):
        assert history.record(stats(n), now=float(n))


def test_point_has_the_documented_shape() -> None:
    history = StatsHistory(capacity=8)
    history.record(stats(30, mistakes=7, bound=12.5), now=1700000000.5)
    assert history.to_json() == {
        "capacity": 8,
        "points": [{"t": 1700000000.5, "seen": 30, "mistakes": 7, "bounds": {"u": 12.5}}],
    }


def test_an_undefined_bound_is_null() -> None:
    history = StatsHistory(capacity=8)
    history.record(stats(0, bound=None), now=0.0)
    assert history.to_json()["points"][0]["bounds"] == {"u": None}


def test_memory_stays_bounded_over_a_long_run() -> None:
    history = StatsHistory(capacity=64, full_resolution=32)
    fill(history, 100_000)
    assert len(history) <= 64
    points = history.points()
    assert points[0].seen == 0, "the start of the run is always kept"
    assert points[-1].seen == 99_999
    assert [p.seen for p in points[-32:]] == list(range(100_000 - 32, 100_000))


def test_older_points_are_evenly_thinned() -> None:
    history = StatsHistory(capacity=20, full_resolution=10)
    fill(history, 1_000)
    older = [p.seen for p in history.points()[:-10]]
    gaps = {b - a for a, b in itertools.pairwise(older)}
    assert gaps == {history.stride}
    assert history.stride > 1


def test_recording_is_full_resolution_until_capacity() -> None:
    history = StatsHistory(capacity=10, full_resolution=5)
    fill(history, 10)
    assert [p.seen for p in history.points()] == list(range(10))
    assert history.stride == 1


def test_a_point_that_repeats_the_last_is_skipped() -> None:
    history = StatsHistory(capacity=8)
    assert history.record(stats(5), now=1.0)
    assert not history.record(stats(5), now=2.0)
    assert history.record(stats(5, bound=90.0), now=3.0)
    assert len(history) == 2


@pytest.mark.parametrize(
    "bad",
    [
        {"mistakes": 1, "bounds": []},
        {"seen": 1, "bounds": []},
        {"seen": "x", "mistakes": 1, "bounds": []},
        {"seen": 1, "mistakes": 1, "bounds": [{"bound": 3.0}]},
        {"seen": 1, "mistakes": 1, "bounds": [{"name": "u", "bound": "3"}]},
        {"seen": 1, "mistakes": 1, "bounds": [{"name": "u", "bound": True}]},
    ],
)
def test_malformed_stats_are_a_clear_error(bad: dict[str, Any]) -> None:
    history = StatsHistory(capacity=8)
    with pytest.raises(ValueError, match="stats must have"):
        history.record(bad)
    assert len(history) == 0


@pytest.mark.parametrize(("capacity", "full"), [(1, None), (3, 2), (10, 0), (10, 9)])
def test_impossible_sizes_are_refused(capacity: int, full: int | None) -> None:
    with pytest.raises(ValueError, match="full_resolution"):
        StatsHistory(capacity=capacity, full_resolution=full)


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(min_value=3, max_value=40),
    full_share=st.floats(min_value=0.0, max_value=1.0),
    count=st.integers(min_value=0, max_value=2_000),
)
def test_invariants_hold_for_any_size(capacity: int, full_share: float, count: int) -> None:
    full = max(1, min(capacity - 2, round(capacity * full_share)))
    history = StatsHistory(capacity=capacity, full_resolution=full)
    fill(history, count)
    seen = [p.seen for p in history.points()]
    assert len(seen) <= capacity
    assert seen == sorted(set(seen))
    if count:
        assert seen[0] == 0
        assert seen[-min(full, count) :] == list(range(count - min(full, count), count))


def test_concurrent_recording_and_reading_is_safe() -> None:
    history = StatsHistory(capacity=50, full_resolution=20)
    writers = 4
    per_writer = 2_000
    errors: list[BaseException] = []

    def write(offset: int) -> None:
        try:
            for n in range(per_writer):
                history.record(stats(offset + n * writers), now=float(n))
        except BaseException as exc:  # pragma: no cover - only on failure
            errors.append(exc)

    def read() -> None:
        try:
            for _ in range(500):
                body = history.to_json()
                assert len(body["points"]) <= 50
        except BaseException as exc:  # pragma: no cover - only on failure
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    threads.append(threading.Thread(target=read))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert 20 < len(history) <= 50


def test_recorder_samples_until_stopped() -> None:
    history = StatsHistory(capacity=100)
    counter = iter(range(1_000_000))
    calls: list[int] = []

    def source() -> dict[str, Any] | None:
        n = next(counter)
        calls.append(n)
        return None if n == 0 else stats(n)

    recorder = HistoryRecorder(history, source, interval_s=0.01)
    recorder.start()
    deadline = time.monotonic() + 5
    while len(history) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    recorder.stop()
    recorded = len(history)
    assert recorded >= 3
    assert history.points()[0].seen == 1, "a None sample records nothing"
    time.sleep(0.05)
    assert len(history) == recorded, "nothing is recorded after stop()"


def test_recorder_survives_a_failing_source(caplog: pytest.LogCaptureFixture) -> None:
    history = StatsHistory(capacity=100)
    samples = iter([{"seen": "bad"}, stats(1), stats(2)])

    def source() -> dict[str, Any] | None:
        return next(samples, None)

    recorder = HistoryRecorder(history, source, interval_s=0.01)
    recorder.start()
    deadline = time.monotonic() + 5
    while len(history) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    recorder.stop()
    assert [p.seen for p in history.points()] == [1, 2]
    assert "could not record" in caplog.text


def test_recorder_refuses_a_non_positive_interval() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        HistoryRecorder(StatsHistory(), lambda: None, interval_s=0)


def test_point_round_trips_through_json() -> None:
    point = HistoryPoint.from_stats(stats(9, mistakes=4, bound=None), t=3.0)
    assert point.to_json() == {"t": 3.0, "seen": 9, "mistakes": 4, "bounds": {"u": None}}
