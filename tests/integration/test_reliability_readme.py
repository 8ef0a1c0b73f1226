"""The README's Reliability section quotes the figures the reliability tests assert.

Each figure is written here from the asserting test's own constant, so changing a bound in a
test without changing the README (or the other way round) fails this test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tests.integration.test_failover as failover
import tests.integration.test_reliability_crash as crash
import tests.integration.test_reliability_http_fuzz as fuzz
import tests.integration.test_reliability_security as security
import tests.integration.test_reliability_security_checkpoints as loader
import tests.integration.test_reliability_sigterm as sigterm
import tests.integration.test_reliability_soak as soak

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## Reliability"
MIB = 1024 * 1024
KIB = 1024
PERCENT = 100
FAILOVER_TEST = failover.test_sigkill_of_the_owner_fails_over_to_the_standby_exactly_once


def reliability_section(text: str) -> str:
    """The section, with every run of whitespace (line breaks included) made one space."""
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return " ".join(text[start : end if end >= 0 else len(text)].split())


def phases(names: tuple[str, ...]) -> str:
    return f"phases {', '.join(names[:-1])} and {names[-1]}"


def failover_kills() -> int:
    """The most owner SIGKILLs one failover run makes (its parametrisation's ``kills``)."""
    (cases,) = (m for m in FAILOVER_TEST.pytestmark if m.name == "parametrize")
    names, rows = cases.args
    return max(row[list(map(str.strip, names)).index("kills")] for row in rows)


def kill_points(kills: int) -> str:
    points = [f"{number / (kills + 1):.0%}" for number in range(1, kills + 1)]
    return f"at {', '.join(points[:-1])} and {points[-1]} of it"


def quoted_figures() -> list[str]:
    """Every figure the section must state, as the section words it."""
    kills = failover_kills()
    return [
        # failover
        f"a {failover.EVENTS:,}-event stream ({failover.EVENTS // failover.POISON_EVERY} poison "
        f"records) at {failover.RATE:,.0f}/s",
        f"{kills} SIGKILLs of the owner, {kill_points(kills)}",
        # crash
        f"{crash.KILLS} SIGKILLs per run",
        f"each ≥ {crash.MIN_PROGRESS_STEP:.0%} of the stream",
        f"{crash.EVENTS:,}-record stream ({crash.EVENTS // crash.POISON_EVERY} poison records",
        # sigterm
        f"≥ {sigterm.STOP_AT:,} of a {sigterm.EVENTS:,}-event stream published at "
        f"{sigterm.RATE:,.0f}/s",
        f"within {sigterm.FLOW_WINDOW_S:.0f} s before and within {sigterm.FLOW_WINDOW_S:.0f} s "
        "after the signal",
        f"within its {sigterm.DEADLINE_S:.0f} s deadline",
        # fuzzing
        phases(fuzz.PHASES),
        f"up to {fuzz.RAW_BODY_EXAMPLES} hypothesis-generated raw bodies",
        "every answer is "
        + ", ".join(map(str, sorted(fuzz.ACCEPTED_STATUSES)[:-1]))
        + f" or {sorted(fuzz.ACCEPTED_STATUSES)[-1]}",
        # soak
        f"full rate for {soak.LOAD_S:.0f} s ({soak.PARTITIONS} partitions)",
        f"keeps {soak.CLIENTS} connections",
        f"after a {soak.WARM_UP_S:.0f} s warm-up < {PERCENT * (1 + soak.MAX_RSS_GROWTH):.0f}%",
        # security
        f"declared {security.HUGE_BODY_BYTES // MIB} MB `Content-Length`",
        f"the limit plus one {security.SMALL_CHUNK // KIB} KB chunk",
        f"grows < {security.MAX_PEAK_RSS_GROWTH_BYTES // MIB} MB",
        f"refuses {len(loader.CRAFTED)} kinds of crafted content",
    ]


def missing_figures(section: str) -> list[str]:
    return [figure for figure in quoted_figures() if figure not in section]


def test_the_reliability_section_states_the_asserted_figures() -> None:
    section = reliability_section(README.read_text(encoding="utf-8"))
    assert missing_figures(section) == []
    for figure in quoted_figures():  # the control: each figure, when altered, is caught
        assert missing_figures(section.replace(figure, "?")) == [figure]
