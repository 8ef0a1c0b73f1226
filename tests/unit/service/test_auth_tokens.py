"""Tokens: the format, rotation through the file, the lockout table, and constant-time checks."""

from __future__ import annotations

import gc
import logging
import math
import random
import secrets
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from service.http.auth.lockout import FailureLimiter
from service.http.auth.tokens import (
    MAX_TOKEN_LENGTH,
    MIN_TOKEN_LENGTH,
    TokenConfigError,
    TokenSource,
    TokenTable,
    parse_tokens,
)
from service.settings import TOKENS_ENV_VAR, load_settings

OLD = secrets.token_urlsafe(32)
NEW = secrets.token_urlsafe(32)
OTHER = secrets.token_urlsafe(32)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# -- format ---------------------------------------------------------------------------------------


def test_entries_give_each_token_its_scopes() -> None:
    text = f"# rotation in progress\nread,predict:{OLD}\n  predict:{NEW}   metrics:{OTHER}\n"
    table = TokenTable(parse_tokens(text, "tokens"))
    assert len(table) == 3
    assert table.scopes_of(OLD) == {"read", "predict"}
    assert table.scopes_of(NEW) == {"predict"}
    assert table.scopes_of(OTHER) == {"metrics"}
    assert table.scopes_of(OLD[:-1]) is None
    assert table.scopes_of(OLD + "x") is None
    assert table.scopes_of("x" * (MAX_TOKEN_LENGTH + 1)) is None
    assert table.scopes_of("") is None


def test_a_token_listed_twice_holds_both_scopes() -> None:
    table = TokenTable(parse_tokens(f"read:{OLD} predict:{NEW} predict:{OLD}", "tokens"))
    assert len(table) == 2
    assert table.scopes_of(OLD) == {"read", "predict"} and table.scopes_of(NEW) == {"predict"}


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("{token}", "scope[,scope...]:token"),
        ("admin:{token}", "scopes must be among predict, read, metrics"),
        (":{token}", "scopes must be among"),
        ("{token}:read", "scopes must be among"),
        ("read:short", f"{MIN_TOKEN_LENGTH} to {MAX_TOKEN_LENGTH} characters"),
        ("read:" + "a" * (MAX_TOKEN_LENGTH + 1), "characters"),
        ("read:{token}\u00e9", "characters"),
        ("read:{token}=x", "characters"),
    ],
)
def test_a_bad_entry_names_its_line_and_not_its_token(entry: str, problem: str) -> None:
    token = secrets.token_urlsafe(24)
    text = f"read:{OLD}\n# comment\n" + entry.format(token=token)
    with pytest.raises(TokenConfigError) as raised:
        parse_tokens(text, "secret-file")
    message = str(raised.value)
    assert "secret-file line 3" in message and problem in message
    assert token not in message and OLD not in message


def test_the_tokens_variable_is_not_mistaken_for_a_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TOKENS_ENV_VAR, f"read:{OLD}")
    settings = load_settings()
    assert OLD not in repr(settings) and OLD not in str(settings.model_dump())


# -- rotation -------------------------------------------------------------------------------------


def test_rotation_two_tokens_valid_then_one_withdrawn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The file is re-read when it changes, at most every ``reload_seconds``."""
    path = tmp_path / "tokens"
    path.write_text(f"read:{OLD}\n")
    clock = Clock()
    source = TokenSource(path, reload_seconds=1.0, environ={}, clock=clock)
    assert source.table.scopes_of(OLD) == {"read"} and source.table.scopes_of(NEW) is None

    path.write_text(f"read:{OLD}\nread:{NEW}\n")
    clock.now = 0.5
    assert source.table.scopes_of(NEW) is None, "re-read before reload_seconds passed"
    clock.now = 1.0
    both = source.table
    assert both.scopes_of(OLD) == {"read"} and both.scopes_of(NEW) == {"read"}

    path.write_text(f"read:{NEW}\n")
    clock.now = 2.0
    assert source.table.scopes_of(OLD) is None and source.table.scopes_of(NEW) == {"read"}

    caplog.set_level(logging.INFO)
    path.write_text(f"read:{OTHER}\nnonsense\n")
    clock.now = 3.0
    assert source.table.scopes_of(NEW) == {"read"}, "a broken file keeps the previous tokens"
    assert source.table.scopes_of(OTHER) is None
    assert "keeping the previous tokens" in caplog.text and OTHER not in caplog.text


def test_environment_tokens_stay_valid_across_file_reloads(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"predict:{NEW}\n")
    source = TokenSource(path, 0.0, environ={TOKENS_ENV_VAR: f"metrics:{OTHER}"})
    path.write_text(f"predict:{OLD}\n")
    assert source.table.scopes_of(OTHER) == {"metrics"}
    assert source.table.scopes_of(OLD) == {"predict"} and source.table.scopes_of(NEW) is None
    assert OLD not in repr(source) and "2 tokens" in repr(source)


def test_an_unreadable_tokens_file_refuses_to_start(tmp_path: Path) -> None:
    with pytest.raises(TokenConfigError, match="tokens_file"):
        TokenSource(tmp_path / "absent", 1.0, environ={})


# -- lockout --------------------------------------------------------------------------------------


def test_failures_spread_beyond_the_window_never_lock_out() -> None:
    clock = Clock()
    limiter = FailureLimiter(3, 60.0, 30.0, 100, clock=clock)
    for step in range(10):
        clock.now = step * 30.0
        assert not limiter.record_failure("a")
    assert limiter.retry_after("a") is None
    clock.now += 1.0
    assert limiter.record_failure("a"), "three failures within 60 s: the third locks out"
    assert limiter.retry_after("a") == pytest.approx(30.0)
    assert limiter.retry_after("b") is None
    clock.now += 30.0
    assert limiter.retry_after("a") is None


def test_the_address_table_is_bounded() -> None:
    clock = Clock()
    limiter = FailureLimiter(2, 60.0, 30.0, max_clients=50, clock=clock)
    limiter.record_failure("kept")
    for i in range(10_000):
        limiter.record_failure(f"10.0.{i // 256}.{i % 256}")
        if i % 40 == 0:
            limiter.record_failure("kept")
        assert len(limiter) <= 50
    assert limiter.retry_after("kept") is not None, "the recently failing address is remembered"


# -- constant time --------------------------------------------------------------------------------

BATCH_CALLS = 40
"""Calls per timed sample, so each sample is tens of microseconds (far above the timer's step)."""
ROUNDS = 600
"""Rounds of measurement; each times every candidate once, in a fresh random order."""
Z = 6.0
"""How many standard errors from zero the median log-ratio may be and still count as equal."""
RELATIVE_FLOOR = math.log(1.05)
"""Costs within 5% count as equal however small the spread (a quiet machine)."""
MEDIAN_SE_PER_IQR = 1.2533 / 1.349
"""Standard error of a median is 1.2533 sigma / sqrt(n); sigma is IQR / 1.349 for a normal."""
TOKEN_CHARS = 43


def timed_rounds(
    check: Callable[[str], object], candidates: dict[str, str]
) -> dict[str, list[float]]:
    """Per round, the time of ``BATCH_CALLS`` calls with each candidate (random order per round).

    Comparing candidates within a round (a millisecond) cancels the machine's drift and load.
    """
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    shuffler = random.Random(0)
    names = list(candidates)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(ROUNDS):
            shuffler.shuffle(names)
            for name in names:
                value = candidates[name]
                start = time.perf_counter_ns()
                for _ in range(BATCH_CALLS):
                    check(value)
                samples[name].append(float(time.perf_counter_ns() - start))
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples


def log_ratios(a: list[float], b: list[float]) -> list[float]:
    """log(b / a), round by round."""
    return [math.log(y / x) for x, y in zip(a, b, strict=True)]


def same_cost(a: list[float], b: list[float]) -> bool:
    """Whether the median round-by-round log-ratio is within a tolerance taken from its spread."""
    ratios = log_ratios(a, b)
    standard_error = MEDIAN_SE_PER_IQR * _iqr(ratios) / math.sqrt(len(ratios))
    return abs(statistics.median(ratios)) <= max(Z * standard_error, RELATIVE_FLOOR)


def _iqr(values: list[float]) -> float:
    quartiles = statistics.quantiles(values, n=4)
    return quartiles[2] - quartiles[0]


class NaiveTable(TokenTable):
    """The mistake the test must catch: compare the raw token, stop at the first difference."""

    def __init__(self, tokens: list[str]) -> None:
        super().__init__()
        self.raw = tokens

    def scopes_of(self, presented: str) -> frozenset[str] | None:  # type: ignore[override]
        for token in self.raw:
            if len(token) != len(presented):
                continue
            for mine, theirs in zip(token, presented, strict=True):
                if mine != theirs:
                    break
            else:
                return frozenset({"read"})
        return None


def wrong_guesses(secret: str) -> dict[str, str]:
    """Wrong tokens: random, sharing all but the last character, and of other lengths."""
    flip = "A" if secret[-1] != "A" else "B"
    return {
        "random": secrets.token_urlsafe(32)[:TOKEN_CHARS],
        "prefix": secret[:-1] + flip,
        "shorter": secrets.token_urlsafe(32)[: TOKEN_CHARS - 5],
        "longer": secrets.token_urlsafe(40)[: TOKEN_CHARS + 5],
    }


def test_a_wrong_token_costs_the_same_whatever_its_prefix_or_length() -> None:
    """Equal medians for a random guess, one matching all but the last character, and guesses of
    other lengths (all within one SHA-256 block: the cost grows with the guess's own length,
    which tells nothing about the tokens); and a right token costs the same whichever it is."""
    valid = [secrets.token_urlsafe(32) for _ in range(4)]
    assert all(len(token) == TOKEN_CHARS for token in valid)
    table = TokenTable(parse_tokens(" ".join(f"read:{t}" for t in valid), "test"))
    guesses = wrong_guesses(valid[0])
    assert all(table.scopes_of(guess) is None for guess in guesses.values())
    samples = timed_rounds(table.scopes_of, {**guesses, "first": valid[0], "last": valid[-1]})
    for name in ("prefix", "shorter", "longer"):
        assert same_cost(samples["random"], samples[name]), (name, _summary(samples))
    assert same_cost(samples["first"], samples["last"]), _summary(samples)


def test_the_timing_check_catches_an_early_exit_comparison() -> None:
    """Control: the same measurement and tolerance flag a comparison that stops early."""
    valid = [secrets.token_urlsafe(32) for _ in range(4)]
    naive = NaiveTable(valid)
    guesses = wrong_guesses(valid[0])
    guesses["random"] = "#" + guesses["random"][1:]  # differs at the first character
    samples = timed_rounds(
        naive.scopes_of, {"random": guesses["random"], "prefix": guesses["prefix"]}
    )
    assert not same_cost(samples["random"], samples["prefix"]), _summary(samples)


def _summary(samples: dict[str, list[float]]) -> dict[str, float]:
    """Median cost per call of each candidate, in nanoseconds."""
    return {name: statistics.median(v) / BATCH_CALLS for name, v in samples.items()}
