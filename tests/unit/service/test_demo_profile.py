"""The demo's Tansu group timing: its embedded broker only, never over explicit settings."""

from __future__ import annotations

from pathlib import Path

from service.cli.demo import TANSU_GROUP_TIMING, DemoOptions, demo_settings
from service.settings import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_MAX_POLL_INTERVAL_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
)

BOOTSTRAP = "127.0.0.1:19092"


def options(config: Path | None = None) -> DemoOptions:
    return DemoOptions(
        config=config,
        port=None,
        rate=10.0,
        count=1,
        dim=2,
        margin=0.1,
        noise=0.0,
        malformed=0.0,
        seed=0,
        state_dir=None,
    )


def timing(
    embedded: bool, config: Path | None = None, state: Path = Path("state")
) -> tuple[int, ...]:
    kafka = demo_settings(options(config), BOOTSTRAP, state, embedded=embedded).kafka
    return kafka.session_timeout_ms, kafka.heartbeat_interval_ms, kafka.max_poll_interval_ms


def test_embedded_tansu_gets_its_profile() -> None:
    assert timing(embedded=True) == tuple(TANSU_GROUP_TIMING.values())


def test_an_external_cluster_keeps_kafkas_defaults() -> None:
    expected = (
        DEFAULT_SESSION_TIMEOUT_MS,
        DEFAULT_HEARTBEAT_INTERVAL_MS,
        DEFAULT_MAX_POLL_INTERVAL_MS,
    )
    assert timing(embedded=False) == expected
    assert timing(embedded=True) != expected  # control: the profile does change something


def test_the_profile_never_overrides_an_explicit_setting(tmp_path: Path) -> None:
    config = tmp_path / "novikoff.toml"
    config.write_text("[kafka]\nsession_timeout_ms = 20000\n", encoding="utf-8")
    session, heartbeat, poll = timing(embedded=True, config=config)
    assert session == 20_000
    assert (heartbeat, poll) == (
        TANSU_GROUP_TIMING["heartbeat_interval_ms"],
        TANSU_GROUP_TIMING["max_poll_interval_ms"],
    )
