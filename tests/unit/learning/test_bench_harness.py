"""The benchmark harness: records, ratios, discovery, the results file."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

import bench.__main__ as bench_main
from bench import BenchRecord, ResultMismatchError
from bench.__main__ import discover, main, print_table


def test_ratio_follows_the_direction_of_better() -> None:
    rate = BenchRecord("fast", value=300.0, reference=100.0, unit="events/s", bar=2.0)
    assert rate.ratio == 3.0 and rate.meets_bar is True
    duration = BenchRecord("slow", 2.0, 1.0, "s", higher_is_better=False, bar=1.0)
    assert duration.ratio == 0.5 and duration.meets_bar is False
    alone = BenchRecord("alone", 1.0, None, "s")
    assert alone.ratio is None and alone.meets_bar is None
    assert rate.as_dict()["ratio"] == 3.0


def test_every_bench_module_is_discovered() -> None:
    assert "bench.bench_learner" in discover()


def test_table_and_results_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    print_table([BenchRecord("x", 10.0, 5.0, "events/s", bar=1.0)])
    assert "2.0x" in capsys.readouterr().out
    output = tmp_path / "results.json"
    assert main(["--only", "no_such_module", "--output", str(output)]) == 0
    payload = json.loads(output.read_text())
    assert payload["results"] == [] and "machine" in payload


def _fake_module(monkeypatch: pytest.MonkeyPatch, run: object) -> None:
    module = types.ModuleType("bench.bench_fake")
    module.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "bench.bench_fake", module)
    monkeypatch.setattr(bench_main, "discover", lambda: ["bench.bench_fake"])


@pytest.mark.parametrize(("ratio", "status"), [(2.0, 0), (0.5, 1)])
def test_a_ratio_below_its_bar_fails_the_run(
    ratio: float, status: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = BenchRecord("fake_vs_reference", ratio, 1.0, "events/s", bar=1.0)
    _fake_module(monkeypatch, lambda quick=False: [record])
    assert main(["--output", str(tmp_path / "results.json")]) == status


def test_a_failed_correctness_check_fails_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def run(quick: bool = False) -> list[BenchRecord]:
        raise ResultMismatchError("learned 9 of 10 events")

    _fake_module(monkeypatch, run)
    output = tmp_path / "results.json"
    assert main(["--output", str(output)]) == 1
    assert json.loads(output.read_text())["failed_modules"] == ["bench.bench_fake"]
