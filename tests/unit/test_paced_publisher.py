"""The SIGTERM test's proof that the stream was flowing: acknowledgements on both sides."""

from __future__ import annotations

from tests.support.ledger import PacedPublisher


def publisher_with_acks(times: list[float]) -> PacedPublisher:
    publisher = PacedPublisher("127.0.0.1:1", "topic", [], rate_per_s=1.0)
    publisher._acks = [(at, number) for number, at in enumerate(times, start=1)]
    return publisher


def test_acks_on_both_sides_of_the_moment_mean_flowing() -> None:
    assert publisher_with_acks([9.5, 10.2]).flowing_at(10.0, within_s=1.0)


def test_a_stream_that_ended_before_or_started_after_is_not_flowing() -> None:
    assert not publisher_with_acks([8.0, 9.5]).flowing_at(10.0, within_s=1.0)
    assert not publisher_with_acks([10.5, 10.7]).flowing_at(10.0, within_s=1.0)
    assert not publisher_with_acks([8.0, 12.0]).flowing_at(10.0, within_s=1.0)
