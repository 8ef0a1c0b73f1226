"""The README's read-replica and cluster sections quote the constants of the code and tests."""

from __future__ import annotations

from pathlib import Path

import bench.bench_replicas as replicas_bench
import bench.bench_state_size as size_bench
import tests.integration.test_replicas as replicas_test
from consumers.state.chunks import DEFAULT_MAX_RECORD_BYTES
from service.settings import DEFAULT_REPLICA_MAX_MODEL_AGE_SECONDS, load_settings

README = Path(__file__).resolve().parents[2] / "README.md"
KIB = 1024
SECTIONS = ("## Read replicas", "## Running on a cluster")


def section(text: str, title: str) -> str:
    """One section, every run of whitespace made one space."""
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    return " ".join(text[start : end if end >= 0 else len(text)].split())


def quoted(text: str) -> str:
    return " ".join(section(text, title) for title in SECTIONS)


def expected_figures() -> list[str]:
    return [
        f"bar {replicas_bench.RATE_BAR:g}x",
        f"{replicas_bench.WRK_THREADS} threads and {replicas_bench.CONNECTIONS} connections",
        f"{size_bench.EVENTS:,} seeded events",
        f"{replicas_test.TOPIC_LIMIT_BYTES // KIB} KiB `max.message.bytes`",
        f"at most {replicas_test.CHUNK_BYTES // KIB} KiB",
        f"(limit {DEFAULT_MAX_RECORD_BYTES:,} bytes)",
        f"{size_bench.KAFKA_MESSAGE_MAX_BYTES:,} bytes by default",
        "tests/integration/test_replicas.py",
        "tests/unit/test_deploy.py",
    ]


def test_the_sections_quote_the_asserting_constants() -> None:
    text = quoted(README.read_text(encoding="utf-8"))
    missing = [figure for figure in expected_figures() if figure not in text]
    assert missing == []


def test_a_changed_constant_would_be_caught() -> None:
    text = quoted(README.read_text(encoding="utf-8"))
    assert f"bar {replicas_bench.RATE_BAR + 0.1:g}x" not in text
    assert f"{replicas_test.TOPIC_LIMIT_BYTES // KIB + 1} KiB `max.message.bytes`" not in text


def test_the_settings_table_gives_the_defaults() -> None:
    text = README.read_text(encoding="utf-8")
    assert (
        f"| `service.replica_max_model_age_seconds` | {DEFAULT_REPLICA_MAX_MODEL_AGE_SECONDS} |"
        in text
    )
    assert f"| `kafka.state_record_max_bytes` | {DEFAULT_MAX_RECORD_BYTES} |" in text
    transactions = str(load_settings().kafka.transactions).lower()
    assert f"| `kafka.transactions` | `{transactions}` |" in text
