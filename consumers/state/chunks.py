"""State records larger than the broker's message limit: split into chunks, never dropped.

A state record (``consumers.state.topic.encode_state_record``, the checkpoint frame) grows with
the model: a dense model of 1,000 features with 64 voters is about 1 MB, a 2^18-bucket hashed
model several MB, while Kafka refuses a message above ``message.max.bytes`` (1 MiB by default).
A value above ``max_bytes`` is therefore **split**: its chunks go first, each under its own key,
and a small *manifest* goes last under the state key::

    chunk key      = the state key's JSON object plus "chunk": <index>
    chunk value    = CHUNK_MAGIC | sequence u64 | index u32 | count u32 | bytes of the value
    manifest value = SPLIT_MAGIC | sequence u64 | count u32 | total length u64 | SHA-256 of value

All of them go in the writer's one transaction, so a ``read_committed`` reader sees every chunk of
a manifest or none. Compaction keeps the newest record of each chunk key, which is the chunk of the
newest manifest, so the newest manifest can always be reassembled; an older one whose chunks were
replaced fails its check and is skipped like any damaged record. A value within ``max_bytes`` is
written as it is, under the state key, as before.
"""

from __future__ import annotations

import hashlib
import json
import struct

from consumers.state.checkpoint import HEADER, MAGIC, CheckpointError

CHUNK_MAGIC = b"NVKCHNK1"
SPLIT_MAGIC = b"NVKSPLT1"
CHUNK_HEADER = struct.Struct(">8sQII")
SPLIT_HEADER = struct.Struct(">8sQIQ32s")
CHUNK_FIELD = "chunk"
KEY_ENCODING = "utf-8"
MIN_RECORD_BYTES = 1_024
DEFAULT_MAX_RECORD_BYTES = 1_000_000
"""Below Kafka's default ``message.max.bytes`` (1,048,588) and the producer's ``max_request_size``
(1,048,576), with room for the record's key and the batch overhead."""


class SplitRecordError(CheckpointError):
    """A split state record cannot be put back together (a chunk missing, altered or foreign)."""


def chunk_key(key: bytes, index: int) -> bytes:
    """The key of chunk ``index`` of a split state record of ``key``.

    >>> chunk_key(b'{"group":"g","model":"events"}', 3)
    b'{"chunk":3,"group":"g","model":"events"}'
    """
    fields = json.loads(key.decode(KEY_ENCODING))
    fields[CHUNK_FIELD] = index
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode(KEY_ENCODING)


def split_state_value(key: bytes, value: bytes, max_bytes: int) -> list[tuple[bytes, bytes]]:
    """The (key, value) records to send, in order, for the state record ``value`` of ``key``.

    One record (``value`` itself) when it fits in ``max_bytes``; otherwise its chunks, each
    within ``max_bytes``, then the manifest under ``key``.

    >>> from consumers.state.checkpoint import frame
    >>> value = frame(b"x" * 500, 7)
    >>> [len(v) for _, v in split_state_value(b'{"model":"m"}', value, 1000)]
    [556]
    >>> parts = split_state_value(b'{"model":"m"}', value, 300)
    >>> [k.decode() for k, _ in parts]
    ['{"chunk":0,"model":"m"}', '{"chunk":1,"model":"m"}', '{"chunk":2,"model":"m"}', '{"model":"m"}']
    """  # noqa: E501
    if len(value) <= max_bytes:
        return [(key, value)]
    size = max_bytes - CHUNK_HEADER.size
    if size <= 0:
        raise ValueError(f"max_bytes {max_bytes} leaves no room after the chunk header")
    magic, sequence, _, _ = HEADER.unpack_from(value)
    if magic != MAGIC:
        raise ValueError("only a framed state record (encode_state_record) can be split")
    pieces = [value[start : start + size] for start in range(0, len(value), size)]
    count = len(pieces)
    records = [
        (chunk_key(key, index), CHUNK_HEADER.pack(CHUNK_MAGIC, sequence, index, count) + piece)
        for index, piece in enumerate(pieces)
    ]
    digest = hashlib.sha256(value).digest()
    manifest = SPLIT_HEADER.pack(SPLIT_MAGIC, sequence, count, len(value), digest)
    return [*records, (key, manifest)]


class StateAssembler:
    """Puts split state records of one key back together while reading the topic in order.

    Feed every chunk with :meth:`add_chunk` (records of other keys are ignored), and each record
    of the state key with :meth:`complete`, which returns the whole value. Only the newest chunk
    of each index is kept, so memory is bounded by the largest split record.

    >>> from consumers.state.checkpoint import frame, unframe
    >>> key = b'{"model":"m"}'
    >>> value = frame(b"model bytes " * 100, 2)
    >>> assembler = StateAssembler(key)
    >>> *chunks, (_, manifest) = split_state_value(key, value, 400)
    >>> for chunk_key_, chunk in chunks:
    ...     assembler.add_chunk(chunk_key_, chunk)
    >>> unframe(assembler.complete(manifest)) == b"model bytes " * 100
    True
    """

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._fields = json.loads(key.decode(KEY_ENCODING))
        self._chunks: dict[int, tuple[int, bytes]] = {}

    def add_chunk(self, key: bytes | None, value: bytes | None) -> None:
        """Keep ``value`` if it is a chunk of this key's state records."""
        index = self._chunk_index(key)
        if index is None or value is None or len(value) < CHUNK_HEADER.size:
            return
        magic, sequence, chunk, _ = CHUNK_HEADER.unpack_from(value)
        if magic == CHUNK_MAGIC and chunk == index:
            self._chunks[index] = (sequence, bytes(value[CHUNK_HEADER.size :]))

    def complete(self, value: bytes | None) -> bytes | None:
        """The whole state record a record of the state key stands for.

        A plain record (or a tombstone) is returned as it is, for the caller to verify.

        Raises
        ------
        SplitRecordError
            When ``value`` is a manifest whose chunks are missing or do not add up.
        """
        if value is None or not value.startswith(SPLIT_MAGIC):
            return value
        if len(value) != SPLIT_HEADER.size:
            raise SplitRecordError("bad state record: a split manifest of the wrong length")
        _, sequence, count, total, digest = SPLIT_HEADER.unpack(value)
        pieces = []
        for index in range(count):
            held = self._chunks.get(index)
            if held is None or held[0] != sequence:
                raise SplitRecordError(
                    f"bad state record: chunk {index} of {count} of split record {sequence} "
                    "is missing"
                )
            pieces.append(held[1])
        whole = b"".join(pieces)
        if len(whole) != total or hashlib.sha256(whole).digest() != digest:
            raise SplitRecordError(
                f"bad state record: the chunks of split record {sequence} do not match its "
                "manifest (length or SHA-256)"
            )
        return whole

    def _chunk_index(self, key: bytes | None) -> int | None:
        if key is None or key == self._key or CHUNK_FIELD.encode() not in key:
            return None
        try:
            fields = json.loads(key.decode(KEY_ENCODING))
        except (UnicodeDecodeError, ValueError):
            return None
        if not isinstance(fields, dict):
            return None
        index = fields.pop(CHUNK_FIELD, None)
        if fields != self._fields or not isinstance(index, int) or index < 0:
            return None
        return index
