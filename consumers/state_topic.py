"""The state topic's records: one compacted record per (group, model), the checkpoint's framing.

A state record is what a local checkpoint file holds, in the same checksummed frame
(:func:`consumers.checkpoint.frame`)::

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

from consumers.checkpoint import HEADER, CheckpointError, frame, unframe

STATE_TOPIC_SUFFIX = ".state"
"""The default state topic is the events topic plus this suffix (``events.state``)."""
STATE_TOPIC_CONFIGS = {"cleanup.policy": "compact"}
"""Topic configuration the state topic is created with: only the newest record per key is kept."""
KEY_ENCODING = "utf-8"


class StateRecordError(CheckpointError):
    """A state-topic record is unusable (tombstone, truncated, altered, not a state record)."""


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
    consumers.state_topic.StateRecordError: bad state record: truncated: 7 bytes, shorter than the 56-byte header
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
