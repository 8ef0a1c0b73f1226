"""The state topic's records: one compacted record per (group, model), the checkpoint's framing.

A state record is what a local checkpoint file holds, in the same checksummed frame
(:func:`consumers.state.checkpoint.frame`)::

    key   = UTF-8 JSON {"group": <consumer group>, "model": <model id>} (sorted keys, compact)
    value = MAGIC | sequence (u64 BE) | payload length (u64 BE) | SHA-256 of payload | payload

where the payload is the bytes of ``learning.dump_state`` (model, tracker, counters, offsets).
The topic is compacted (``cleanup.policy=compact``), so the newest record of each key survives and
a reader needs only the last committed record of its key. A value that fails verification (torn,
altered, not a novikoff frame, a tombstone) raises :class:`StateRecordError`; readers skip it and
keep the previous good record.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafka import KafkaConsumer, TopicPartition

from consumers.state.checkpoint import HEADER, CheckpointError, frame, unframe
from consumers.state.chunks import StateAssembler

logger = logging.getLogger(__name__)

STATE_TOPIC_SUFFIX = ".state"
"""The default state topic is the events topic plus this suffix (``events.state``)."""
STATE_RECORD_MAX_BYTES = 64 * 1024 * 1024
"""The largest state record: the state topic's ``max.message.bytes`` and the owner's
``max_request_size`` (a bigger state fails its commit with an ERROR, nothing is dropped)."""
STATE_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "max.message.bytes": str(STATE_RECORD_MAX_BYTES),
}
"""Topic configuration the state topic is created with: only the newest record per key is kept,
and a record may be as large as :data:`STATE_RECORD_MAX_BYTES`."""
KEY_ENCODING = "utf-8"
READ_COMMITTED = "read_committed"
DEFAULT_KEEP_RECORDS = 2
"""Verified records kept while reading, newest first: the newest and the one before it."""
DEFAULT_READ_TIMEOUT_SECONDS = 30.0
BOOTSTRAP_TIMEOUT_MS = 5_000
"""How long a state reader waits for a first broker before it gives up."""
READ_POLL_MS = 500


class StateRecordError(CheckpointError):
    """A state-topic record is unusable (tombstone, truncated, altered, not a state record)."""


class StateTopicUnavailableError(RuntimeError):
    """The state topic could not be read to its end (missing, broker away, timeout)."""


def default_state_topic(topic: str) -> str:
    """The state topic of an events topic when ``[kafka] state_topic`` is unset.

    >>> default_state_topic("events")
    'events.state'
    """
    return f"{topic}{STATE_TOPIC_SUFFIX}"


def state_key(group: str, model_id: str) -> bytes:
    """The record key of the state of ``model_id`` learned by consumer group ``group``.

    >>> state_key("novikoff", "events")
    b'{"group":"novikoff","model":"events"}'
    """
    if not group or not model_id:
        raise ValueError("a state key needs a non-empty group and model id")
    text = json.dumps({"group": group, "model": model_id}, sort_keys=True, separators=(",", ":"))
    return text.encode(KEY_ENCODING)


def encode_state_record(payload: bytes, sequence: int) -> bytes:
    """The value of a state record: ``payload`` (``dump_state`` bytes) in the checkpoint frame.

    >>> decode_state_record(encode_state_record(b"model bytes", 7))
    b'model bytes'
    """
    if sequence < 0:
        raise ValueError(f"sequence must be non-negative, got {sequence}")
    return frame(payload, sequence)


def decode_state_record(value: bytes | None) -> bytes:
    """The payload of a state record, after verifying magic, length and checksum.

    Raises
    ------
    StateRecordError
        When ``value`` is a tombstone (``None``) or fails verification; the message says why.

    >>> decode_state_record(b"garbage")
    Traceback (most recent call last):
    ...
    consumers.state.topic.StateRecordError: bad state record: truncated: 7 bytes, shorter than the 56-byte header
    """  # noqa: E501
    if value is None:
        raise StateRecordError("bad state record: a tombstone (no value)")
    try:
        return unframe(bytes(value))
    except CheckpointError as exc:
        raise StateRecordError(f"bad state record: {exc}") from exc


def state_record_sequence(value: bytes) -> int:
    """The sequence number in a verified state record's header.

    Raises
    ------
    StateRecordError
        When ``value`` fails verification.

    >>> state_record_sequence(encode_state_record(b"x", 42))
    42
    """
    decode_state_record(value)
    _, sequence, _, _ = HEADER.unpack_from(value)
    return int(sequence)


@dataclass(frozen=True, slots=True)
class StateRecord:
    """A verified state record read back from the state topic."""

    offset: int
    sequence: int
    payload: bytes


def read_state_records(
    connection: Mapping[str, Any],
    topic: str,
    key: bytes,
    *,
    keep: int = DEFAULT_KEEP_RECORDS,
    timeout_s: float = DEFAULT_READ_TIMEOUT_SECONDS,
) -> list[StateRecord]:
    """The newest verified records of ``key`` in the state topic, newest first (at most ``keep``).

    The topic is read ``read_committed`` from its start to its last stable offset, so records of
    an open or aborted transaction are never seen. A record failing verification is logged at
    ERROR and skipped: the previous good one of the key stays a candidate.

    Parameters
    ----------
    connection
        Connection and security options only (``KafkaConsumer`` keyword arguments): the topic is
        read by assignment, outside any group.
    topic, key
        The state topic and the record key (:func:`state_key`).
    keep
        How many verified records to keep, so a caller that refuses the newest can fall back.
    timeout_s
        Bound on the whole read.

    Raises
    ------
    StateTopicUnavailableError
        When the topic cannot be read to its end within ``timeout_s``.
    """
    consumer = KafkaConsumer(
        **connection,
        group_id=None,
        enable_auto_commit=False,
        isolation_level=READ_COMMITTED,
        bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS,
    )
    try:
        return _read(consumer, topic, key, keep, timeout_s)
    except StateTopicUnavailableError:
        raise
    except Exception as exc:
        raise StateTopicUnavailableError(f"cannot read state topic {topic!r}: {exc!r}") from exc
    finally:
        consumer.close()


def _read(consumer: Any, topic: str, key: bytes, keep: int, timeout_s: float) -> list[StateRecord]:
    deadline = time.monotonic() + timeout_s
    partitions = consumer.partitions_for_topic(topic)
    if not partitions:
        raise StateTopicUnavailableError(f"state topic {topic!r} does not exist")
    assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
    consumer.assign(assigned)
    consumer.seek_to_beginning(*assigned)
    ends = consumer.end_offsets(assigned)
    found: deque[StateRecord] = deque(maxlen=keep)
    assembler = StateAssembler(key)
    remaining = {tp for tp in assigned if ends.get(tp, 0) > consumer.position(tp)}
    while remaining:
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            raise StateTopicUnavailableError(
                f"state topic {topic!r} not read to its end within {timeout_s}s"
            )
        polled = consumer.poll(timeout_ms=min(left_ms, READ_POLL_MS))
        for tp, records in sorted(polled.items(), key=lambda item: item[0].partition):
            for record in records:
                if record.key != key:
                    assembler.add_chunk(record.key, record.value)
                    continue
                try:
                    value = assembler.complete(record.value)
                    payload = decode_state_record(value)
                except CheckpointError as exc:
                    logger.error(
                        "state record %s/%d@%d skipped: %s; the previous one is used",
                        tp.topic,
                        tp.partition,
                        record.offset,
                        exc,
                    )
                    continue
                assert value is not None  # decode_state_record refuses a tombstone
                found.append(StateRecord(record.offset, state_record_sequence(value), payload))
        remaining = {tp for tp in remaining if consumer.position(tp) < ends[tp]}
    return list(reversed(found))
