"""The dead-letter writer: headers, acknowledgements, failures, oversized values."""

from __future__ import annotations

import hashlib

import pytest

from consumers.decoding.events import Rejection
from consumers.dlq import TRUNCATED_VALUE_BYTES, DeadLetterError, DeadLetterWriter
from tests.unit.consumers.fakes import FakeProducer, MessageSizeTooLargeError


def rejection(
    offset: int, value: bytes | None = b"bad", reason: str = "not_json", key: bytes | None = b"k"
) -> Rejection:
    return Rejection(
        reason=reason,
        message="what is wrong",
        topic="events",
        partition=2,
        offset=offset,
        value=value,
        headers=(("trace", b"t1"), ("novikoff.reason", b"spoofed")),
        key=key,
    )


def test_headers_value_key_and_counts() -> None:
    producer = FakeProducer()
    writer = DeadLetterWriter(lambda: producer)
    writer.write([rejection(5), rejection(6, reason="bad_id")])
    first = producer.sent[0]
    assert first["topic"] == "events.dlq" and first["value"] == b"bad" and first["key"] == b"k"
    assert first["headers"] == [
        ("trace", b"t1"),
        ("novikoff.reason", b"not_json"),
        ("novikoff.message", b"what is wrong"),
        ("novikoff.topic", b"events"),
        ("novikoff.partition", b"2"),
        ("novikoff.offset", b"5"),
    ]
    assert writer.written == {"not_json": 1, "bad_id": 1}
    assert producer.flushes == 1


def test_configured_topic() -> None:
    producer = FakeProducer()
    DeadLetterWriter(lambda: producer, "quarantine").write([rejection(1)])
    assert producer.sent[0]["topic"] == "quarantine"


def test_failures_are_raised_with_the_unwritten_rejections() -> None:
    producer = FakeProducer(
        fail=lambda topic, value: ConnectionError("down") if value == b"x" else None
    )
    writer = DeadLetterWriter(lambda: producer)
    with pytest.raises(DeadLetterError) as caught:
        writer.write([rejection(1), rejection(2, value=b"x"), rejection(3)])
    assert [r.offset for r in caught.value.failed] == [2]
    assert writer.written == {"not_json": 2}


def test_a_producer_that_cannot_be_built_fails_everything() -> None:
    def broken() -> FakeProducer:
        raise ConnectionError("no brokers")

    with pytest.raises(DeadLetterError) as caught:
        DeadLetterWriter(broken).write([rejection(1), rejection(2)])
    assert len(caught.value.failed) == 2


def test_an_oversized_value_is_written_truncated() -> None:
    huge = b"z" * (TRUNCATED_VALUE_BYTES * 20)
    producer = FakeProducer(
        fail=lambda topic, value: MessageSizeTooLargeError() if value == huge else None
    )
    DeadLetterWriter(lambda: producer).write([rejection(9, value=huge)])
    (sent,) = producer.sent
    headers = dict(sent["headers"])
    assert sent["value"] == huge[:TRUNCATED_VALUE_BYTES]
    assert headers["novikoff.truncated"] == str(len(huge)).encode()
    assert headers["novikoff.sha256"] == hashlib.sha256(huge).hexdigest().encode()
    assert headers["novikoff.offset"] == b"9"


def test_a_record_without_key_or_value_is_still_dead_lettered() -> None:
    producer = FakeProducer()
    DeadLetterWriter(lambda: producer).write([rejection(1, value=None, key=None)])
    (sent,) = producer.sent
    assert sent["value"] == b"" and ("novikoff.null_value", b"true") in sent["headers"]


def test_close_closes_the_producer() -> None:
    producer = FakeProducer()
    writer = DeadLetterWriter(lambda: producer)
    writer.write([rejection(1)])
    writer.close()
    assert producer.closed
