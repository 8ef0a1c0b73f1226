"""Logging: plain or JSON lines, on the settings' level."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import orjson
import pytest

from service.logs import configure_logging
from service.settings import LoggingSettings


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_the_message_and_extra_fields(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(LoggingSettings(level="INFO", json_lines=True))
    logging.getLogger("novikoff.test").info("checkpoint %s written", "7", extra={"events": 12})
    logging.getLogger("novikoff.test").debug("not shown")
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    entry = orjson.loads(lines[0])
    assert entry["message"] == "checkpoint 7 written"
    assert entry["level"] == "INFO"
    assert entry["logger"] == "novikoff.test"
    assert entry["events"] == 12
    assert entry["ts"].endswith("Z")


def test_plain_lines(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(LoggingSettings(level="WARNING", json_lines=False))
    logging.getLogger("novikoff.test").warning("broker away")
    logging.getLogger("novikoff.test").info("not shown")
    err = capsys.readouterr().err
    assert "WARNING novikoff.test: broker away" in err
    assert "not shown" not in err
