"""Records in, a decoded batch out: the record protocol, rejections, events and the batch of valid
rows (a dense matrix, or a :class:`~learning.sparse.CSRBatch` for object-valued encoders)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import groupby
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from consumers.decoding._csr import stack, take
from consumers.decoding.fastjson import DenseParse, LabelTable, parse_dense
from consumers.decoding.fastsparse import MAX_KEY_SPAN, HashedParse, parse_hashed
from consumers.decoding.labels import LabelLookup
from consumers.decoding.wire import MAX_ID_LENGTH, _get_offset, _get_partition_key
from learning.encoders import MAX_ABS_FEATURE, DenseEncoder, Encoder, HashingEncoder
from learning.sparse import CSRBatch

logger = logging.getLogger(__name__)

Matrix = NDArray[np.float64] | CSRBatch
"""Decoded feature vectors: a dense (rows, dimension) matrix, or CSR for object-valued encoders."""


@runtime_checkable
class SourceRecord(Protocol):
    """What the decoder reads from a record (kafka-python's ``ConsumerRecord`` fits)."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


@dataclass(frozen=True, slots=True)
class Record:
    """An in-memory record, for tests, benchmarks and replays."""

    topic: str
    partition: int
    offset: int
    value: bytes | None
    key: bytes | None = None
    headers: Sequence[tuple[str, bytes]] = ()


@dataclass(frozen=True, slots=True)
class Rejection:
    """A record refused by validation, with everything needed to dead-letter and trace it."""

    reason: str
    message: str
    topic: str
    partition: int
    offset: int
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    key: bytes | None


@dataclass(frozen=True, slots=True)
class Event:
    """One valid event: the augmented vector (a one-row CSR batch for object-valued encoders),
    the encoded label and the optional id."""

    x: Matrix
    y: float | int
    event_id: str | None


@dataclass(frozen=True, slots=True)
class PartitionSpan:
    """A run of consecutive records of one partition inside a batch.

    ``rows`` indexes the valid events of the run in :attr:`DecodedBatch.X`; offsets run from
    ``first_offset`` to ``last_offset`` inclusive (gaps possible, e.g. after compaction).
    """

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    row_start: int
    row_stop: int
    records: int

    @property
    def rejected(self) -> int:
        """Records of the run that were refused."""
        return self.records - (self.row_stop - self.row_start)


class DecodedBatch:
    """Valid events as one matrix, in record order, plus the rejections.

    Attributes
    ----------
    X
        Augmented feature vectors, shape (n_valid, dimension): a dense matrix for dense
        encoders, a :class:`~learning.sparse.CSRBatch` for object-valued ones.
    y
        Encoded labels: ±1 float64 (binary) or class indices int64 (multiclass).
    spans
        Consecutive runs of one partition, in record order; each says which rows of ``X`` are
        its valid events.
    rejections
        Refused records, in record order.
    row_records
        Position in the decoded records of each row of ``X``.
    """

    __slots__ = (
        "X",
        "_event_ids",
        "_id_source",
        "_records",
        "rejections",
        "row_records",
        "spans",
        "y",
    )

    def __init__(
        self,
        *,
        X: Matrix,
        y: NDArray[Any],
        spans: tuple[PartitionSpan, ...],
        rejections: tuple[Rejection, ...],
        row_records: NDArray[np.int64],
        records: Sequence[SourceRecord],
        id_source: Callable[[], list[str | None]],
    ) -> None:
        self.X = X
        self.y = y
        self.spans = spans
        self.rejections = rejections
        self.row_records = row_records
        self._records = records
        self._id_source = id_source
        self._event_ids: list[str | None] | None = None

    @property
    def records(self) -> int:
        """Number of records decoded (valid and refused)."""
        return sum(span.records for span in self.spans)

    @property
    def valid(self) -> int:
        """Number of valid events."""
        return int(self.X.shape[0])

    @property
    def event_ids(self) -> list[str | None]:
        """The ``id`` of each valid row (``None`` when absent); built on first use."""
        if self._event_ids is None:
            self._event_ids = self._id_source()
        return self._event_ids

    @property
    def offsets(self) -> NDArray[np.int64]:
        """Source offset of each valid row."""
        offsets = np.fromiter(map(_get_offset, self._records), np.int64, len(self._records))
        result: NDArray[np.int64] = offsets[self.row_records]
        return result


@dataclass
class _Fast:
    """Valid rows found by the bulk path, by input index."""

    index: list[int]
    X: Matrix
    y: NDArray[Any]
    event_ids: list[str | None]


class _Rows:
    """Valid rows of one decoding tier: record positions, vectors, targets and ids."""

    __slots__ = ("X", "ids", "index", "y")

    def __init__(
        self,
        index: NDArray[np.int64],
        X: Matrix,
        y: NDArray[Any],
        ids: Callable[[], list[str | None]],
    ) -> None:
        self.index = index
        self.X = X
        self.y = y
        self.ids = ids

    @classmethod
    def of(cls, fast: _Fast) -> _Rows:
        event_ids = fast.event_ids
        return cls(np.asarray(fast.index, dtype=np.int64), fast.X, fast.y, lambda: event_ids)

    @classmethod
    def of_events(
        cls, index: list[int], events: list[Event], dtype: type[np.float64] | type[np.int64]
    ) -> _Rows:
        X = stack_rows(
            [x if isinstance(x, CSRBatch) else x.reshape(1, -1) for x in (e.x for e in events)]
        )
        y = np.asarray([event.y for event in events], dtype=dtype)
        event_ids = [event.event_id for event in events]
        return cls(np.asarray(index, dtype=np.int64), X, y, lambda: event_ids)

    @classmethod
    def merge(
        cls,
        tiers: list[_Rows],
        empty: Matrix,
        dtype: type[np.float64] | type[np.int64],
    ) -> _Rows:
        """All tiers' rows in record order."""
        if not tiers:
            return cls(np.empty(0, dtype=np.int64), empty, np.empty(0, dtype=dtype), list)
        if len(tiers) == 1:
            return tiers[0]
        index = np.concatenate([tier.index for tier in tiers])
        order = np.argsort(index, kind="stable")
        X = stack_rows([tier.X for tier in tiers])
        y = np.concatenate([tier.y for tier in tiers]).astype(dtype, copy=False)
        sources = [tier.ids for tier in tiers]

        def ids() -> list[str | None]:
            combined = [event_id for source in sources for event_id in source()]
            return [combined[i] for i in order.tolist()]

        ordered = take(X, order) if isinstance(X, CSRBatch) else X[order]
        return cls(index[order], ordered, y[order], ids)


def stack_rows(parts: Sequence[Matrix], width: int = 0) -> Matrix:
    """The rows of every part in order, at least ``width`` wide and as wide as the widest part
    (a vocabulary may have grown); narrower rows are padded with zeros. ``parts`` not empty."""
    width = max(width, *(part.shape[1] for part in parts))
    sparse = [part for part in parts if isinstance(part, CSRBatch)]
    if sparse:
        assert len(sparse) == len(parts), "one batch never mixes dense and sparse rows"
        return stack(sparse, width)
    X = np.zeros((sum(part.shape[0] for part in parts), width), dtype=np.float64)
    start = 0
    for part in parts:
        assert not isinstance(part, CSRBatch)
        X[start : start + part.shape[0], : part.shape[1]] = part
        start += part.shape[0]
    return X


@dataclass
class _Compiled:
    """The rows a compiled reader accepted, and the records it escalated (by position)."""

    rows: _Rows
    escalated: list[int]

    @classmethod
    def of(cls, parsed: DenseParse | HashedParse, targets: NDArray[Any]) -> _Compiled:
        """The outcome of a compiled reader (``targets``: its label table's)."""
        count = parsed.slots.shape[0]
        if parsed.accepted == count:
            everything = np.arange(count, dtype=np.int64)
            rows = _Rows(
                everything,
                parsed.rows(None),
                targets[parsed.slots],
                parsed.event_ids(everything),
            )
            return cls(rows, [])
        accepted = parsed.slots >= 0
        index = np.flatnonzero(accepted)
        rows = _Rows(
            index,
            parsed.rows(accepted),
            targets[parsed.slots[accepted]],
            parsed.event_ids(index),
        )
        return cls(rows, np.flatnonzero(~accepted).tolist())


def compiled_reader(
    encoder: Encoder, lookup: LabelLookup
) -> Callable[[list[bytes]], _Compiled] | None:
    """The compiled tier of a model: the dense reader for a :class:`~learning.DenseEncoder`, the
    hashed-event reader for murmur3 hashing, else ``None``. It raises ``TypeError`` for a value
    that is not bytes."""
    labels = LabelTable(lookup.pairs(), lookup.dtype)
    reader: Callable[[list[bytes]], DenseParse | HashedParse]
    if isinstance(encoder, DenseEncoder):
        reader = partial(parse_dense, n_features=encoder.n_features, bias=encoder.bias)
    elif (
        isinstance(encoder, HashingEncoder)
        and encoder.hash == "murmur3"
        and encoder.max_features_per_event < MAX_KEY_SPAN
    ):
        reader = partial(
            parse_hashed,
            n_bits=encoder.n_bits,
            bias=encoder.bias,
            max_features=encoder.max_features_per_event,
        )
    else:
        return None

    def read(values: list[bytes]) -> _Compiled:
        parsed = reader(values, labels=labels, max_id_length=MAX_ID_LENGTH, max_abs=MAX_ABS_FEATURE)
        return _Compiled.of(parsed, labels.targets)

    return read


def _spans(
    records: Sequence[SourceRecord], row_index: NDArray[np.int64]
) -> tuple[PartitionSpan, ...]:
    keys = list(map(_get_partition_key, records))
    if not keys:
        return ()
    if keys.count(keys[0]) == len(keys):
        runs = [(keys[0], len(keys))]
    else:
        runs = [(key, sum(1 for _ in run)) for key, run in groupby(keys)]
    spans: list[PartitionSpan] = []
    start = 0
    for (topic, partition), length in runs:
        stop = start + length
        spans.append(
            PartitionSpan(
                topic=topic,
                partition=partition,
                first_offset=records[start].offset,
                last_offset=records[stop - 1].offset,
                row_start=int(np.searchsorted(row_index, start)),
                row_stop=int(np.searchsorted(row_index, stop)),
                records=length,
            )
        )
        start = stop
    return tuple(spans)


def _rejection(record: SourceRecord, reason: str, message: str) -> Rejection:
    return Rejection(
        reason=reason,
        message=message,
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        value=record.value,
        headers=tuple(record.headers or ()),
        key=record.key,
    )
