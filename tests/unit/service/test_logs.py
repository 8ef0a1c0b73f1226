"""Logging: plain or JSON lines, on the settings' level."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import orjson
import pytest

from service.observability.logs import (
    REPORTED_BY_THE_RUNNER,
    LibraryRepeatFilter,
    configure_logging,
)
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


def _kafka_record(name: str, msg: str, *, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, None) if exc is not None else None
    return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, ("broker-1",), exc_info)


def test_library_repeats_are_dropped_within_the_window_and_tracebacks_folded() -> None:
    repeat_filter = LibraryRepeatFilter(window_s=3600)
    first = _kafka_record("kafka.conn", "connect to %s failed", exc=ConnectionRefusedError(111))
    assert repeat_filter.filter(first)
    assert first.exc_info is None
    assert first.getMessage() == "connect to broker-1 failed (ConnectionRefusedError(111))"
    assert not repeat_filter.filter(_kafka_record("kafka.conn", "connect to %s failed"))
    assert repeat_filter.filter(_kafka_record("kafka.client", "connect to %s failed"))


def test_library_filter_passes_every_record_of_our_own() -> None:
    repeat_filter = LibraryRepeatFilter(window_s=3600)
    for _ in range(3):
        assert repeat_filter.filter(_kafka_record("consumers.runner", "consumer lost Kafka"))


def test_library_repeat_is_let_through_again_after_the_window() -> None:
    repeat_filter = LibraryRepeatFilter(window_s=0.0)
    assert repeat_filter.filter(_kafka_record("kafka.conn", "connect to %s failed"))
    assert repeat_filter.filter(_kafka_record("kafka.conn", "connect to %s failed"))


def test_library_records_of_causes_the_runner_reports_are_dropped() -> None:
    repeat_filter = LibraryRepeatFilter(window_s=0.0)
    for name, template in REPORTED_BY_THE_RUNNER:
        assert not repeat_filter.filter(_kafka_record(name, template))
    # Control: another record of the same logger still shows.
    assert repeat_filter.filter(_kafka_record("kafka.cluster", "Metadata refresh: failed %s"))
