"""The README's Benchmarks table states the bars and limits ``make bench`` enforces.

Each expected cell is written from the benchmark module's own constant, so changing a bar in
``bench/`` without the README (or the other way round) fails here. The sparse rows are checked by
``test_readme_sparse``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

import bench.bench_e2e as e2e
import bench.bench_learner as learner
import bench.bench_mixing as mixing
import bench.bench_pipeline as pipeline
import bench.bench_predict as predict
import bench.bench_replicas as replicas
from service.assembly import runner_settings
from service.settings import load_settings
from tests.unit.test_readme_sparse import BENCHMARKS, bar_rows, raw_section, section


def expected_rows() -> dict[str, tuple[str, str]]:
    """First cell → (reference cell, bar cell) of each non-sparse row of the Benchmarks table."""
    learner_bars = ", ".join(f"{learner.BARS[d]:g}x" for d in sorted(learner.BARS))
    dimensions = ",".join(str(d) for d in sorted(learner.BARS))
    return {
        "`pipeline_d10_vs_decode`, `pipeline_d100_vs_decode`": ("", f"{pipeline.BAR:g}x"),
        "`e2e_vs_raw_consumer`": ("", f"{e2e.BAR:g}x"),
        "`predict_c16_vs_fastapi_baseline`": ("", f"{predict.RATE_BAR:g}x"),
        "`predict_c16_p99_ms`": (f"the {predict.P99_LIMIT_MS:g} ms limit", "below it"),
        "`predict_batch_per_s`": (f"the {predict.BATCH_TARGET_PER_S:,.0f}/s target", "above it"),
        f"`learner_d{{{dimensions}}}_vs_river`": ("", learner_bars),
        f"`learner_learn_one_d{{{dimensions}}}_vs_river`": ("", f"{learner.LEARN_ONE_BAR:g}x"),
        "`predict_replicas2_vs_1`": ("", f"{replicas.RATE_BAR:g}x"),
        "`mixing_learners2_vs_1`": ("", f"{mixing.BAR:g}x"),
    }


def reference_cells(text: str) -> dict[str, str]:
    """First cell → third cell (the reference) of every table row of ``text``."""
    cells: dict[str, str] = {}
    for line in text.splitlines():
        parts = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(parts) > 2:
            cells[parts[0]] = parts[2]
    return cells


def first_table(text: str) -> str:
    """The lines of the first Markdown table in ``text`` (the table of bars)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end])


def wrong_rows(text: str) -> list[str]:
    text = first_table(text)
    bars = bar_rows(text)
    references = reference_cells(text)
    wrong = []
    for row, (reference, bar) in expected_rows().items():
        if bars.get(row) != bar or (reference and references.get(row) != reference):
            wrong.append(row)
    return wrong


def test_every_bar_in_the_benchmarks_table_is_the_enforced_bar() -> None:
    text = raw_section(BENCHMARKS)
    assert wrong_rows(text) == []
    # Control: a bar or a limit that differs from the benchmark's constant is caught.
    altered = text.replace(f"| {e2e.BAR:g}x |", "| 0.7x |", 1)
    assert wrong_rows(altered) == ["`e2e_vs_raw_consumer`"]
    altered = text.replace(f"the {predict.P99_LIMIT_MS:g} ms limit", "the 20 ms limit", 1)
    assert wrong_rows(altered) == ["`predict_c16_p99_ms`"]


def test_the_one_run_e2e_rows_state_the_enforced_bar() -> None:
    one_run = [line for line in section(BENCHMARKS).split("| `e2e_vs_raw_consumer` |")[2:] if line]
    assert one_run, "the one-run e2e table is gone"
    for row in one_run:
        bar_cell = row.split("|")[4].strip()
        assert bar_cell.startswith(f"{e2e.BAR:g}x"), row


class _OneBatchConsumer:
    """A KafkaConsumer stand-in that keeps its configuration and hands out ``count`` records."""

    configs: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, topic: str, **config: Any) -> None:
        self.configs.append(config)
        self._records = [SimpleNamespace(value=b"{}") for _ in range(e2e.QUICK_EVENTS)]

    def poll(self, timeout_ms: int, max_records: int) -> dict[str, list[Any]]:
        records, self._records = self._records, []
        return {"partition": records} if records else {}

    def close(self, autocommit: bool) -> None:
        pass


def test_the_e2e_method_the_readme_states_is_the_benchmarks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = section(BENCHMARKS)
    assert f"each side reads {e2e.WARMUP_EVENTS:,} events once, untimed" in text
    assert f"Then {e2e.ROUNDS} rounds, each one run of each side, alternating" in text
    assert f"read every\n{e2e.WATCH_INTERVAL_S * 1000:g} ms" in raw_section(BENCHMARKS)
    # The bare consumer is configured as the runner configures its own consumer.
    settings = load_settings(
        kafka={"bootstrap_servers": "127.0.0.1:9", "topic": e2e.TOPIC, "transactions": True}
    )
    monkeypatch.setattr(e2e, "KafkaConsumer", _OneBatchConsumer)
    _OneBatchConsumer.configs.clear()
    e2e.bare_consumer(settings, e2e.QUICK_EVENTS)
    expected = runner_settings(settings).kafka_consumer_config()
    assert _OneBatchConsumer.configs == [expected]
    assert expected["isolation_level"] == "read_committed"
    # Control: the service's plain consumer configuration reads uncommitted records, so the
    # comparison above tells the two apart.
    assert settings.kafka.consumer_config().get("isolation_level") != "read_committed"
