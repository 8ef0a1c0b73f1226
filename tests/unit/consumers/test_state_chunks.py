"""Split state records: chunks within the limit, reassembled bit for bit, damage refused."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

from consumers.state.chunks import (
    CHUNK_HEADER,
    SplitRecordError,
    StateAssembler,
    chunk_key,
    split_state_value,
)
from consumers.state.follower import StateFollower
from consumers.state.topic import (
    decode_state_record,
    encode_state_record,
    state_key,
)
from tests.unit.consumers.state_fakes import TOPIC, WAIT_S, FakeStateTopic, wait_until

KEY = state_key("novikoff", "events")
LIMIT = 1_000
PAYLOAD = os.urandom(10 * LIMIT)


def assemble(records: list[tuple[bytes, bytes]]) -> bytes | None:
    assembler = StateAssembler(KEY)
    *chunks, (head_key, head) = records
    assert head_key == KEY
    for key, value in chunks:
        assembler.add_chunk(key, value)
    return assembler.complete(head)


def test_a_large_record_is_split_within_the_limit_and_reassembled_bit_for_bit() -> None:
    value = encode_state_record(PAYLOAD, 5)
    records = split_state_value(KEY, value, LIMIT)
    assert len(records) > 2, "split"
    assert all(len(v) <= LIMIT for _, v in records)
    assert [k for k, _ in records[:-1]] == [chunk_key(KEY, i) for i in range(len(records) - 1)]
    whole = assemble(records)
    assert whole == value
    assert decode_state_record(whole) == PAYLOAD


def test_a_record_within_the_limit_is_sent_as_it_is() -> None:
    value = encode_state_record(b"small", 1)
    assert split_state_value(KEY, value, LIMIT) == [(KEY, value)]
    assert StateAssembler(KEY).complete(value) == value


def test_a_missing_chunk_is_refused() -> None:
    records = split_state_value(KEY, encode_state_record(PAYLOAD, 5), LIMIT)
    del records[3]
    with pytest.raises(SplitRecordError, match=r"chunk 3 of .* is missing"):
        assemble(records)


def test_a_chunk_of_another_sequence_is_refused() -> None:
    older = split_state_value(KEY, encode_state_record(PAYLOAD, 4), LIMIT)
    newer = split_state_value(KEY, encode_state_record(PAYLOAD, 5), LIMIT)
    newer[2] = older[2]
    with pytest.raises(SplitRecordError, match=r"chunk 2 .* split record 5 is missing"):
        assemble(newer)


def test_an_altered_chunk_is_refused() -> None:
    records = split_state_value(KEY, encode_state_record(PAYLOAD, 5), LIMIT)
    key, value = records[1]
    records[1] = (
        key,
        value[: CHUNK_HEADER.size]
        + bytes([value[CHUNK_HEADER.size] ^ 1])
        + value[CHUNK_HEADER.size + 1 :],
    )
    with pytest.raises(SplitRecordError, match="do not match its manifest"):
        assemble(records)


def test_chunks_of_another_key_are_ignored() -> None:
    other = state_key("other", "events")
    records = split_state_value(KEY, encode_state_record(PAYLOAD, 5), LIMIT)
    assembler = StateAssembler(KEY)
    for key, value in split_state_value(other, encode_state_record(b"x" * 5000, 5), LIMIT)[:-1]:
        assembler.add_chunk(key, value)
    with pytest.raises(SplitRecordError, match="missing"):
        assembler.complete(records[-1][1])


@pytest.fixture
def follower_on(accepted: list[bytes]) -> Iterator[tuple[FakeStateTopic, StateFollower]]:
    topic = FakeStateTopic()
    follower = StateFollower(TOPIC, KEY, accepted.append, topic.consumer, end_check_interval_s=0)
    follower.start()
    yield topic, follower
    assert follower.stop(WAIT_S)


@pytest.fixture
def accepted() -> list[bytes]:
    return []


def test_the_follower_takes_a_split_record_and_skips_an_incomplete_one(
    follower_on: tuple[FakeStateTopic, StateFollower],
    accepted: list[bytes],
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic, follower = follower_on
    for key, value in split_state_value(KEY, encode_state_record(PAYLOAD, 1), LIMIT):
        topic.append(key, value)
    wait_until(lambda: accepted == [PAYLOAD], "the split record")
    newer = os.urandom(len(PAYLOAD))
    records = split_state_value(KEY, encode_state_record(newer, 2), LIMIT)
    with caplog.at_level(logging.ERROR, logger="consumers.state.follower"):
        for key, value in records[:2] + records[3:]:
            topic.append(key, value)
        wait_until(lambda: follower.skipped == 1, "the skip")
    assert "chunk 2 of" in caplog.text
    assert accepted == [PAYLOAD]
    # Control: the same split record, whole, is taken.
    for key, value in records:
        topic.append(key, value)
    wait_until(lambda: accepted[-1] == newer, "the complete record")
