"""The README's on-paper mixing projection: its figures follow from its formula and inputs.

throughput(N) = P·R / ((P/N)·(R/r₁ + t_c) + t_f) with r₁ = 40,000 events/s, P = 4, R = 5,000,
t_c = 25 ms and t_f = FOLLOW_FETCH_WAIT_MS; the README rounds the results to thousands.
"""

from __future__ import annotations

from consumers.mixing.runner import FOLLOW_FETCH_WAIT_MS
from tests.unit.test_readme_sparse import raw_section

R1 = 40_000.0
PARTITIONS = 4
ROUND_EVENTS = 5_000
COMMIT_S = 0.025
ROUNDING = 1_000


def throughput(instances: int, commit_s: float = COMMIT_S) -> float:
    fetch_s = FOLLOW_FETCH_WAIT_MS / 1000
    per_instance = PARTITIONS / instances * (ROUND_EVENTS / R1 + commit_s)
    return PARTITIONS * ROUND_EVENTS / (per_instance + fetch_s)


def stated(commit_s: float = COMMIT_S) -> dict[int, str]:
    """The projection's figures as the README writes them, for N = 1, 2 and 4."""
    rates = {n: throughput(n, commit_s) for n in (1, 2, 4)}
    one, two, four = (round(rates[n] / ROUNDING) * ROUNDING for n in (1, 2, 4))
    return {
        1: f"about {one:,.0f} events/s at N = 1",
        2: f"{two:,.0f} at N = 2 ({rates[2] / rates[1]:.2f}x)",
        4: f"{four:,.0f} at N = 4 ({rates[4] / rates[1]:.1f}x)",
    }


def test_the_projected_figures_follow_from_the_formula() -> None:
    text = " ".join(raw_section("Mixing: one model learned by many processes").split())
    for n, phrase in stated().items():
        assert phrase in text, (n, phrase)
    # Control: another commit cost gives other figures, which the README does not state.
    assert any(phrase not in text for phrase in stated(commit_s=2 * COMMIT_S).values())
