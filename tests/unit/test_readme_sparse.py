"""The README's Sparse events section and sparse benchmark rows quote what asserts them.

Every figure is written here from the asserting test's or benchmark's own constant, so changing
one without the README (or the other way round) fails this test.
"""

from __future__ import annotations

from pathlib import Path

import bench.bench_sparse as sparse_bench
import bench.sparse_stream as workload
import tests.integration.test_sparse_stream as stream_test

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## Sparse events"
BENCHMARKS = "## Benchmarks"
MIB = 2**20
ASSERTING_TEST = stream_test.test_bag_of_words_stream_equals_the_offline_learner


def raw_section(title: str) -> str:
    """The section titled ``title``, up to the next second-level title."""
    text = README.read_text(encoding="utf-8")
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    return text[start : end if end >= 0 else len(text)]


def section(title: str) -> str:
    """The section, with every run of whitespace (line breaks included) made one space."""
    return " ".join(raw_section(title).split())


def bar_rows(text: str) -> dict[str, str]:
    """First cell → last cell of every table row of ``text`` (one line per row)."""
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) > 1:
            rows[cells[0]] = cells[-1]
    return rows


def test_the_sparse_section_quotes_the_end_to_end_test() -> None:
    text = section(SECTION)
    assert f"tests/integration/test_sparse_stream.py::{ASSERTING_TEST.__name__}" in text
    assert f"a stream of {stream_test.GOOD_EVENTS:,} bag-of-words events" in text
    assert f"with 2^{stream_test.HASHING_BITS} buckets" in text
    for reason in stream_test.BAD_EVENTS:
        assert f"`{reason}`" in text
    # Control: another count is not quoted.
    assert f"a stream of {stream_test.GOOD_EVENTS + 1:,} bag-of-words events" not in text


def test_the_sparse_section_describes_the_benchmark_workload() -> None:
    text = section(SECTION)
    assert (
        f"{workload.WORDS_PER_EVENT} words per event drawn Zipf-like from a vocabulary of "
        f"{workload.VOCABULARY:,}"
    ) in text


def test_the_sparse_bars_are_the_benchmark_bars() -> None:
    sparse_rows = bar_rows(raw_section(SECTION))
    expected = {
        "`learner_sparse_b18_vs_river`": f"{sparse_bench.PER_EVENT_BAR:g}x",
        "`learner_sparse_b10_vs_river`": f"{sparse_bench.PER_EVENT_BAR:g}x",
        "`learner_sparse_batch_b18_vs_river`": f"{sparse_bench.BATCH_BAR:g}x",
        "`learner_sparse_batch_b10_vs_river`": f"{sparse_bench.BATCH_BAR:g}x",
        "`pipeline_sparse_b18_vs_decode`": f"{sparse_bench.PIPELINE_BAR:g}x",
        "`pipeline_sparse_b10_vs_decode`": f"{sparse_bench.PIPELINE_BAR:g}x",
        "`pipeline_sparse_b18_peak_rss`": f"{sparse_bench.MEMORY_BAR:g}x (below it)",
        "`pipeline_sparse_b18_state_bytes`": f"{sparse_bench.MEMORY_BAR:g}x (below it)",
    }
    assert sparse_rows == expected
    benchmark_rows = bar_rows(raw_section(BENCHMARKS))
    assert (
        benchmark_rows["`learner_sparse_b{18,10}_vs_river`"]
        == expected["`learner_sparse_b18_vs_river`"]
    )
    assert (
        benchmark_rows["`learner_sparse_batch_b{18,10}_vs_river`"]
        == expected["`learner_sparse_batch_b18_vs_river`"]
    )
    assert (
        benchmark_rows["`pipeline_sparse_b{18,10}_vs_decode`"]
        == expected["`pipeline_sparse_b18_vs_decode`"]
    )
    limits = section(BENCHMARKS)
    assert f"the {sparse_bench.MAX_RSS_BYTES // MIB} MiB limit" in limits
    assert f"the {sparse_bench.MAX_STATE_BYTES // MIB} MiB limit" in limits
    assert f"fresh process running that pipeline on {sparse_bench.MEMORY_EVENTS:,} events" in (
        limits
    )
