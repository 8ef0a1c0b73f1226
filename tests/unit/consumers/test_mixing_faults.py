"""Mixing mode meets the consumer's errors as the consumer runner does: classified and counted.

An error retrying cannot fix (a codec kafka-python cannot decode) becomes the runner's standing
``fault``: ``/readyz`` gives its cause and fix, one ERROR line names it however often it recurs,
and every occurrence reaches the fault observer (``novikoff_consumer_errors_total``). A transient
error is retried without a standing fault (the control).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from kafka.errors import KafkaConnectionError, UnsupportedCodecError

from consumers.faults import FaultKind
from consumers.mixing.options import MixingOptions
from consumers.mixing.runner import IDLE_EVENTS_POLL_MS, MixingRunner
from learning import DenseEncoder, LabelMap, Perceptron
from learning.mixing import DistributedBound
from tests.unit.consumers.test_faults import CountingObserver
from tests.unit.consumers.test_runner import TIMEOUT_S, new_engine, settings, wait_until

ATTEMPTS = 3


class BrokenClient:
    """A kafka-python client stand-in whose ``poll`` raises ``error`` (metadata: no topic yet)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def assign(self, partitions: Any) -> None:
        pass

    def seek_to_beginning(self, *partitions: Any) -> None:
        pass

    def subscribe(self, topics: Any, listener: Any = None) -> None:
        pass

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return None

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[Any, Any]:
        raise self.error

    def close(self, autocommit: bool = False, timeout_ms: int | None = None) -> None:
        pass


def runner(error: Exception, observer: CountingObserver, *, learns: bool = True) -> MixingRunner:
    return MixingRunner(
        new_engine(),
        settings(backoff_seconds=0.01, backoff_max_seconds=0.02),
        MixingOptions(round_events=10, round_seconds=0.0, contributions_topic="t.mixing"),
        lambda: Perceptron(LabelMap({"1": 1, "-1": -1}), encoder=DenseEncoder(1)),
        lambda partitions: DistributedBound([], partitions),
        consumer_builder=lambda config: BrokenClient(error),
        learns=learns,
        fault_observer=observer,
    )


def error_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.ERROR and r.name == "consumers.mixing.runner"
    ]


@pytest.mark.parametrize("learns", [True, False], ids=["learner", "replica"])
def test_a_codec_error_is_a_standing_fault_reported_once_and_counted_each_time(
    caplog: pytest.LogCaptureFixture, learns: bool
) -> None:
    caplog.set_level(logging.INFO, logger="consumers.mixing.runner")
    observer = CountingObserver()
    mixing = runner(UnsupportedCodecError("snappy"), observer, learns=learns)
    mixing.start()
    try:
        wait_until(lambda: len(observer.kinds()) >= ATTEMPTS)
        fault = mixing.fault
        assert fault is not None and fault.kind is FaultKind.CODEC
        reason = mixing.not_ready_reason or ""
        assert "fix: install novikoff" in reason
        assert not mixing.connected
        assert set(observer.kinds()) == {"codec"}
        (line,) = error_lines(caplog)
        assert "cannot be decoded" in line
    finally:
        assert mixing.stop(timeout=TIMEOUT_S)


def test_a_transient_error_is_retried_without_a_standing_fault(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="consumers.mixing.runner")
    observer = CountingObserver()
    mixing = runner(KafkaConnectionError("broker away"), observer)
    mixing.start()
    try:
        wait_until(lambda: len(observer.kinds()) >= ATTEMPTS)
        assert mixing.fault is None
        assert "broker away" in (mixing.not_ready_reason or "")
        assert set(observer.kinds()) == {"transient"}
        assert error_lines(caplog) == []
    finally:
        assert mixing.stop(timeout=TIMEOUT_S)


def test_a_learner_owning_nothing_polls_long_enough_to_finish_its_group_join() -> None:
    """kafka-python completes a join only inside a poll() still running when its answers arrive:
    a learner that owns nothing (joining) polls for the full timeout; only owned shards all
    waiting for a mix poll briefly (the control: the short poll exists)."""
    mixing = runner(KafkaConnectionError("unused"), CountingObserver())
    full = mixing._settings.poll_timeout_ms
    assert mixing._events_poll_ms() == full
    mixing._owned.add(0)
    assert mixing._events_poll_ms() == IDLE_EVENTS_POLL_MS < full
