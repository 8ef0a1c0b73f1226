"""Decoding and validation of Kafka event records.

Wire format
-----------
A record value is a UTF-8 JSON object with exactly these fields:

``features`` (required)
    An array of numbers of the model's length (dense models), or an object of name → number
    (schema, vocabulary or hashing models). Numbers are JSON numbers: not booleans, not strings,
    finite (``NaN``, ``Infinity`` and numbers that overflow a double such as ``1e999`` are
    refused).
``label`` (required)
    A string or an integer. Binary models map it to ±1 with their label map (a label map key
    that is an integer literal such as ``"-1"`` also matches the JSON integer ``-1``); multiclass
    models look it up among their classes. Booleans match only a boolean label map.
``id`` (optional)
    A non-empty string of at most :data:`MAX_ID_LENGTH` characters.
``ts`` (optional)
    An RFC 3339 date-time string or epoch seconds (see :mod:`consumers.timestamps`).

Any other field is refused (``unknown_field``): a misspelt ``lable`` or ``feature`` must not
silently become a different event. Duplicate keys anywhere (also inside ``features``) are refused
(``duplicate_key``) because JSON parsers disagree on which value wins. So is JSON nested deeper than
:data:`MAX_NESTING_DEPTH` (``too_deep``).

Every refused record becomes a :class:`Rejection` with a stable reason code (:data:`REASON_CODES`),
a readable message and the record's original coordinates, key, headers and value.

Speed
-----
:meth:`EventDecoder.decode_batch` decodes every value with orjson, then checks the whole batch at
once: a handful of C-level passes over the decoded lists, one numpy conversion of all feature
vectors, and one SWAR byte count (see :mod:`consumers._scan`) that proves no record holds a
duplicate key, a boolean, a null, a stray string or an escape. Only the records that fail a bulk
check are diagnosed one by one, by the exact slow path :meth:`EventDecoder.inspect`; the fast path
accepts a subset of what the slow path accepts, with bit-identical vectors.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, groupby
from operator import attrgetter, itemgetter, methodcaller
from typing import Any, Protocol, runtime_checkable

import numpy as np
import orjson
from numpy.typing import NDArray

from consumers._csr import empty_batch, stack, take
from consumers._fastjson import LabelTable, parse_dense
from consumers._scan import count_markers, count_markers_each, count_text_markers, nesting_depth
from consumers.timestamps import all_valid_text_timestamps, valid_timestamp
from learning.encoders import MAX_ABS_FEATURE, DenseEncoder, Encoder, SparseEncoder
from learning.errors import FEATURE_ERROR_CODES, FeatureError
from learning.labels import ClassIndex, LabelMap
from learning.sparse import CSRBatch

logger = logging.getLogger(__name__)

NOT_UTF8 = "not_utf8"
NOT_JSON = "not_json"
NOT_OBJECT = "not_object"
DUPLICATE_KEY = "duplicate_key"
TOO_DEEP = "too_deep"
MISSING_FEATURES = "missing_features"
MISSING_LABEL = "missing_label"
UNKNOWN_LABEL = "unknown_label"
UNKNOWN_FIELD = "unknown_field"
BAD_ID = "bad_id"
BAD_TS = "bad_ts"
WRONG_TYPE = "wrong_type"

EVENT_REASONS = (
    NOT_UTF8,
    NOT_JSON,
    NOT_OBJECT,
    DUPLICATE_KEY,
    TOO_DEEP,
    MISSING_FEATURES,
    MISSING_LABEL,
    UNKNOWN_LABEL,
    UNKNOWN_FIELD,
    BAD_ID,
    BAD_TS,
)
REASON_CODES: tuple[str, ...] = EVENT_REASONS + tuple(sorted(FEATURE_ERROR_CODES))
"""Every reason code a rejection can carry (stable: dashboards and alerts key on them)."""

FEATURES = "features"
LABEL = "label"
ID = "id"
TS = "ts"
ALLOWED_FIELDS = frozenset({FEATURES, LABEL, ID, TS})
REQUIRED_FIELDS = 2

MAX_ID_LENGTH = 256
MAX_DOUBLE_DIGITS = 309
MAX_NESTING_DEPTH = 32
MAX_MESSAGE_CHARS = 300
MAX_MATRIX_ELEMENTS = 8_000_000
"""Upper bound on rows times dimension of one decoded dense matrix (64 MB of float64), and on
rows times the per-event feature bound of one sparse batch."""

Matrix = NDArray[np.float64] | CSRBatch
"""Decoded feature vectors: a dense (rows, dimension) matrix, or CSR for object-valued encoders."""

# Marker bytes (see consumers._scan) that the fixed field names account for per event:
# "features" holds one 'u', "label" two 'l'; "id" and "ts" hold none.
FIXED_FIELD_MARKERS = 3
QUOTES_PER_STRING = 2

_LABEL_TYPES = frozenset({str, int})
_NUMBER_TYPES = frozenset({int, float})
_LIST_TYPE = frozenset({list})
_DICT_TYPE = frozenset({dict})

_get_value = attrgetter("value")
_get_offset = attrgetter("offset")
_get_partition_key = attrgetter("topic", "partition")
_get_features = itemgetter(FEATURES)
_get_label = itemgetter(LABEL)
_MISSING = object()
_get_id = methodcaller("get", ID, _MISSING)
_get_ts = methodcaller("get", TS, _MISSING)


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


class InvalidEventError(Exception):
    """Raised by the precise path: the record is refused for ``reason`` (a reason code)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 3] + "..."


def _integer_alias(label: Hashable) -> int | None:
    """``-1`` for the label ``"-1"``: integer literals in a label map also match JSON integers."""
    if type(label) is not str:
        return None
    try:
        return int(label)
    except ValueError:
        return None


class LabelLookup:
    """Event labels → encoded targets, for the bulk path and the precise path alike.

    Parameters
    ----------
    table
        Label → target (±1.0 for binary, class index for multiclass). Keys are strings or
        integers; boolean keys go to ``booleans`` instead, because ``True == 1`` in Python.
    dtype
        dtype of the encoded targets.
    booleans
        Boolean labels → target (only a boolean label map has them).
    expected
        How to describe the valid labels in an error message.

    Examples
    --------
    >>> lookup = LabelLookup.binary(LabelMap({"1": 1, "-1": -1}))
    >>> lookup.encode(-1), lookup.encode("1")
    (-1.0, 1.0)
    """

    def __init__(
        self,
        table: Mapping[Hashable, float | int],
        dtype: type[np.float64] | type[np.int64],
        booleans: Mapping[bool, float | int] | None = None,
        expected: str = "",
    ) -> None:
        self._table = dict(table)
        self._dtype = dtype
        self._booleans = dict(booleans or {})
        self._expected = expected or f"one of {sorted(map(str, self._table))}"

    @classmethod
    def binary(cls, label_map: LabelMap) -> LabelLookup:
        """The lookup of a binary model: labels → ±1.0."""
        return cls._build(
            [(label_map.positive, 1.0), (label_map.negative, -1.0)],
            np.float64,
            f"{label_map.positive!r} (+1) or {label_map.negative!r} (-1)",
        )

    @classmethod
    def multiclass(cls, classes: ClassIndex | Sequence[Hashable]) -> LabelLookup:
        """The lookup of a multiclass model: class label → class index."""
        labels = classes.labels if isinstance(classes, ClassIndex) else tuple(classes)
        return cls._build(
            [(label, index) for index, label in enumerate(labels)],
            np.int64,
            f"one of the classes {list(labels)}",
        )

    @classmethod
    def _build(
        cls,
        pairs: Iterable[tuple[Hashable, float | int]],
        dtype: type[np.float64] | type[np.int64],
        expected: str,
    ) -> LabelLookup:
        table: dict[Hashable, float | int] = {}
        booleans: dict[bool, float | int] = {}
        aliases: dict[Hashable, float | int] = {}
        for label, target in pairs:
            if type(label) is bool:
                booleans[label] = target
                continue
            table[label] = target
            alias = _integer_alias(label)
            if alias is not None:
                aliases[alias] = target
        for alias_label, alias_target in aliases.items():
            table.setdefault(alias_label, alias_target)
        return cls(table, dtype, booleans, expected)

    @property
    def dtype(self) -> type[np.float64] | type[np.int64]:
        """dtype of encoded targets."""
        return self._dtype

    def pairs(self) -> list[tuple[object, float | int]]:
        """(label, target) for every non-boolean label, aliases included."""
        return list(self._table.items())

    def encode(self, label: object) -> float | int:
        """The target of one label, or :class:`InvalidEventError` (``unknown_label``)."""
        kind = type(label)
        found: float | int | None = None
        if isinstance(label, bool):
            found = self._booleans.get(label)
        elif kind in _LABEL_TYPES:
            found = self._table.get(label)
        if found is None:
            shown = _clip(repr(label))
            raise InvalidEventError(UNKNOWN_LABEL, f"label {shown} is not {self._expected}")
        return found

    def encode_all(self, labels: list[Any]) -> NDArray[Any] | None:
        """Targets of many labels, or ``None`` when any label is not plainly known.

        Booleans never reach this path (the bulk scan escalates them), so the ``True == 1``
        ambiguity cannot arise here.
        """
        if not set(map(type, labels)) <= _LABEL_TYPES:
            return None
        try:
            return np.fromiter(map(self._table.__getitem__, labels), self._dtype, len(labels))
        except (KeyError, TypeError):
            return None


def validate_features(payload: Any, encoder: Encoder, *, grow: bool = False) -> NDArray[np.float64]:
    """One event's features as the augmented vector x̃, or :class:`~learning.FeatureError`.

    Shared by the consumer and the HTTP API so both refuse the same inputs with the same codes.
    ``grow`` lets a vocabulary encoder learn new names (the consumer does, predictions do not).

    Examples
    --------
    >>> from learning import DenseEncoder
    >>> validate_features([2, -0.25], DenseEncoder(2)).tolist()
    [1.0, 2.0, -0.25]
    >>> validate_features([True, 1], DenseEncoder(2))
    Traceback (most recent call last):
    ...
    learning.errors.FeatureError: boolean_feature: feature 0 is a boolean (True); send 1 or 0
    """
    try:
        return encoder.encode(payload, grow=grow)
    except FeatureError:
        raise
    except (TypeError, ValueError, OverflowError, AttributeError) as exc:
        raise FeatureError(WRONG_TYPE, _clip(f"features cannot be read: {exc}")) from None


def validate_sparse_features(
    payload: Any, encoder: SparseEncoder, *, grow: bool = False
) -> CSRBatch:
    """One event's features as a one-row CSR batch, or :class:`~learning.FeatureError`.

    The sparse twin of :func:`validate_features`, shared the same way by the consumer and the
    HTTP API: the same inputs are refused with the same codes, and the row equals the dense x̃.

    Examples
    --------
    >>> from learning import HashingEncoder
    >>> row = validate_sparse_features({"colour": 2}, HashingEncoder(4))
    >>> row.indices.tolist(), row.values.tolist()
    ([0, 2], [1.0, 2.0])
    >>> validate_sparse_features({"colour": float("nan")}, HashingEncoder(4))
    Traceback (most recent call last):
    ...
    learning.errors.FeatureError: non_finite: feature 'colour' is nan
    """
    try:
        columns, values = encoder.encode_sparse(payload, grow=grow)
    except FeatureError:
        raise
    except (TypeError, ValueError, OverflowError, AttributeError) as exc:
        raise FeatureError(WRONG_TYPE, _clip(f"features cannot be read: {exc}")) from None
    indptr = np.array([0, columns.shape[0]], dtype=np.int64)
    return CSRBatch(indptr=indptr, indices=columns, values=values, dimension=encoder.dimension)


class _DuplicateKeyError(ValueError):
    pass


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKeyError(key)
            seen.add(key)
    return obj


class _NonFiniteTracker:
    """Parse hooks for the lenient parser: remember whether a number was NaN or infinite."""

    def __init__(self) -> None:
        self.seen = False

    def constant(self, text: str) -> float:
        self.seen = True
        return float(text)

    def number(self, text: str) -> float:
        value = float(text)
        if value in (float("inf"), float("-inf")):
            self.seen = True
        return value

    def integer(self, text: str) -> int | float:
        # A double holds at most 309 integer digits; longer integers overflow it (and Python
        # refuses to convert very long digit strings at all).
        if len(text.lstrip("-")) > MAX_DOUBLE_DIGITS:
            self.seen = True
            return float("-inf") if text.startswith("-") else float("inf")
        value = int(text)
        try:
            float(value)
        except OverflowError:
            self.seen = True
        return value


def parse_event_json(value: object) -> Any:
    """Parse one record value exactly, or raise :class:`InvalidEventError` saying why not.

    orjson decides what is valid JSON; the standard library parser, with hooks, finds duplicate
    keys and tells non-finite numbers (which orjson refuses without saying where) from other
    syntax errors, so that ``NaN`` in ``features`` is reported as ``non_finite``.
    """
    if value is None:
        raise InvalidEventError(NOT_JSON, "the record has no value (a tombstone)")
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidEventError(NOT_JSON, f"the value is {type(value).__name__}, not bytes")
    raw = bytes(value)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidEventError(NOT_UTF8, f"byte {exc.start} is not UTF-8 ({exc.reason})") from None
    depth = nesting_depth(raw)
    if depth > MAX_NESTING_DEPTH:
        raise InvalidEventError(
            TOO_DEEP, f"JSON nested {depth} levels deep (at most {MAX_NESTING_DEPTH})"
        )
    strict_error: orjson.JSONDecodeError | None = None
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        strict_error = exc
    tracker = _NonFiniteTracker()
    try:
        lenient = json.loads(
            text,
            object_pairs_hook=_refuse_duplicates,
            parse_constant=tracker.constant,
            parse_float=tracker.number,
            parse_int=tracker.integer,
        )
    except _DuplicateKeyError as exc:
        raise InvalidEventError(
            DUPLICATE_KEY, _clip(f"key {exc.args[0]!r} appears more than once")
        ) from None
    except (ValueError, RecursionError) as exc:
        raise InvalidEventError(NOT_JSON, _clip(str(strict_error or exc))) from None
    if strict_error is None:
        return parsed
    if tracker.seen:
        return lenient
    raise InvalidEventError(NOT_JSON, _clip(str(strict_error)))


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def _check_id(event_id: object) -> str:
    if type(event_id) is not str:
        raise InvalidEventError(BAD_ID, f"id must be a string, got a JSON {_json_kind(event_id)}")
    if not 1 <= len(event_id) <= MAX_ID_LENGTH:
        raise InvalidEventError(
            BAD_ID, f"id must have 1 to {MAX_ID_LENGTH} characters, got {len(event_id)}"
        )
    return event_id


def _check_ts(ts: object) -> None:
    if not valid_timestamp(ts):
        shown = _clip(repr(ts))
        raise InvalidEventError(
            BAD_TS, f"ts {shown} is neither an RFC 3339 date-time nor epoch seconds"
        )


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
    rows: _Rows
    escalated: list[int]


class EventDecoder:
    """Turns records into a :class:`DecodedBatch` for one model.

    Parameters
    ----------
    encoder
        The model's feature encoder (its dimension fixes the vector length).
    labels
        A :class:`LabelLookup`, or the model's ``LabelMap`` (binary) / ``ClassIndex``
        (multiclass), from which one is built.
    grow
        Let a vocabulary encoder learn new feature names (what a learning consumer wants).

    Examples
    --------
    >>> from learning import DenseEncoder, LabelMap
    >>> decoder = EventDecoder(DenseEncoder(1), LabelMap({"1": 1, "-1": -1}))
    >>> batch = decoder.decode_batch([
    ...     Record("events", 0, 0, b'{"features": [2], "label": -1}'),
    ...     Record("events", 0, 1, b'{"features": [true], "label": 1}'),
    ... ])
    >>> batch.X.tolist(), batch.y.tolist(), [r.reason for r in batch.rejections]
    ([[1.0, 2.0]], [-1.0], ['boolean_feature'])
    """

    def __init__(
        self,
        encoder: Encoder,
        labels: LabelLookup | LabelMap | ClassIndex,
        *,
        grow: bool = False,
    ) -> None:
        self._encoder = encoder
        if isinstance(labels, LabelMap):
            labels = LabelLookup.binary(labels)
        elif isinstance(labels, ClassIndex):
            labels = LabelLookup.multiclass(labels)
        self._labels = labels
        self._grow = grow
        self._sparse: SparseEncoder | None = (
            encoder if encoder.sparse and isinstance(encoder, SparseEncoder) else None
        )
        self._dense_features = encoder.n_features if isinstance(encoder, DenseEncoder) else None
        self._compiled_labels = (
            LabelTable(labels.pairs(), labels.dtype) if self._dense_features is not None else None
        )

    @property
    def encoder(self) -> Encoder:
        """The feature encoder."""
        return self._encoder

    @property
    def labels(self) -> LabelLookup:
        """The label lookup."""
        return self._labels

    @property
    def max_batch_rows(self) -> int:
        """Most records to decode at once so one batch stays within :data:`MAX_MATRIX_ELEMENTS`
        (dense: rows times dimension; sparse: rows times the most entries one event may have)."""
        if self._sparse is not None:
            widest = self._sparse.max_features_per_event + int(self._sparse.bias)
            return max(1, MAX_MATRIX_ELEMENTS // widest)
        return max(1, MAX_MATRIX_ELEMENTS // max(1, self._encoder.dimension))

    # -- the precise path -----------------------------------------------------------------------

    def inspect(self, value: object) -> Event:
        """Decode and validate one record value exactly, or raise :class:`InvalidEventError`."""
        obj = parse_event_json(value)
        if type(obj) is not dict:
            raise InvalidEventError(
                NOT_OBJECT, f"the event is a JSON {_json_kind(obj)}, not an object"
            )
        unknown = obj.keys() - ALLOWED_FIELDS
        if unknown:
            names = _clip(", ".join(repr(name) for name in sorted(unknown)))
            raise InvalidEventError(
                UNKNOWN_FIELD, f"unknown field(s) {names}; allowed: {sorted(ALLOWED_FIELDS)}"
            )
        if FEATURES not in obj:
            raise InvalidEventError(MISSING_FEATURES, "the event has no 'features'")
        if LABEL not in obj:
            raise InvalidEventError(MISSING_LABEL, "the event has no 'label'")
        event_id = _check_id(obj[ID]) if ID in obj else None
        if TS in obj:
            _check_ts(obj[TS])
        target = self._labels.encode(obj[LABEL])
        try:
            x: Matrix = (
                validate_features(obj[FEATURES], self._encoder, grow=self._grow)
                if self._sparse is None
                else validate_sparse_features(obj[FEATURES], self._sparse, grow=self._grow)
            )
        except FeatureError as exc:
            raise InvalidEventError(exc.code, _clip(exc.message)) from None
        return Event(x=x, y=target, event_id=event_id)

    # -- the bulk path --------------------------------------------------------------------------

    def decode_batch(self, records: Sequence[SourceRecord]) -> DecodedBatch:
        """Decode and validate ``records``; valid rows keep the records' order.

        Never raises for bad input: every record ends up either as a row of ``X`` or as a
        :class:`Rejection`. Three tiers, each exact: the compiled parser (dense models), then
        orjson with bulk checks, then the precise per-record diagnosis for what is left.
        """
        try:
            return self._decode_tiers(records)
        except Exception:
            # A bug must not stall the stream on one record forever: decode one by one, and
            # dead-letter (with the error) any record the precise path itself cannot handle.
            logger.exception("bulk decoding failed; decoding %d record(s) one by one", len(records))
            return self._assemble(records, [], list(range(len(records))), guarded=True)

    def _decode_tiers(self, records: Sequence[SourceRecord]) -> DecodedBatch:
        values: list[Any] = list(map(_get_value, records))
        tiers: list[_Rows] = []
        pending: list[int] | None = None
        if self._compiled_labels is not None:
            compiled = self._decode_compiled(values)
            if compiled is not None:
                tiers.append(compiled.rows)
                if not compiled.escalated:
                    return self._assemble(records, tiers, [])
                pending = compiled.escalated
        pending_values = values if pending is None else [values[i] for i in pending]
        objs, suspects = _decode_values(pending_values)
        candidates = _with_required_fields(objs, suspects)
        index = list(range(len(objs))) if candidates is None else candidates
        fast = self._bulk(
            index,
            objs if candidates is None else [objs[i] for i in index],
            pending_values if candidates is None else [pending_values[i] for i in index],
            suspects,
        )
        if pending is not None:
            fast.index = [pending[i] for i in fast.index]
            suspect_list = sorted(pending[i] for i in suspects)
        else:
            suspect_list = sorted(suspects)
        tiers.append(_Rows.of(fast))
        return self._assemble(records, tiers, suspect_list)

    def _decode_compiled(self, values: list[Any]) -> _Compiled | None:
        labels = self._compiled_labels
        assert labels is not None and self._dense_features is not None
        try:
            parsed = parse_dense(
                values,
                n_features=self._dense_features,
                bias=self._encoder.bias,
                labels=labels,
                max_id_length=MAX_ID_LENGTH,
                max_abs=MAX_ABS_FEATURE,
            )
        except TypeError:
            return None
        if parsed.accepted == len(values):
            everything = np.arange(len(values), dtype=np.int64)
            return _Compiled(
                _Rows(
                    everything, parsed.X, labels.targets[parsed.slots], parsed.event_ids(everything)
                ),
                [],
            )
        accepted = parsed.slots >= 0
        index = np.flatnonzero(accepted)
        rows = _Rows(
            index,
            parsed.X[accepted],
            labels.targets[parsed.slots[accepted]],
            parsed.event_ids(index),
        )
        return _Compiled(rows, np.flatnonzero(~accepted).tolist())

    def _bulk(
        self, index: list[int], rows: list[Any], values: list[Any], suspects: set[int]
    ) -> _Fast:
        """Validate rows in bulk; each round drops the rows that fail a check into ``suspects``."""
        while index:
            outcome = self._try_bulk(rows, values)
            if isinstance(outcome, _Fast):
                outcome.index = index
                return outcome
            if all(outcome):
                # A bulk check failed but no single row fails it: cannot happen unless a bulk
                # check and its per-row twin disagree. Diagnose every row precisely instead.
                logger.error("bulk validation could not isolate a failing row; checking each")
                outcome = [False] * len(outcome)
            kept = [position for position, ok in enumerate(outcome) if ok]
            suspects.update(index[position] for position, ok in enumerate(outcome) if not ok)
            index = [index[position] for position in kept]
            rows = [rows[position] for position in kept]
            values = [values[position] for position in kept]
        return _Fast([], self.empty_matrix(), np.empty(0, self._labels.dtype), [])

    def _try_bulk(self, rows: list[dict[str, Any]], values: list[Any]) -> _Fast | list[bool]:
        """Every check on all rows at once: the valid rows, or a verdict per row for one check."""
        count = len(rows)
        ids = list(map(_get_id, rows))
        stamps = list(map(_get_ts, rows))
        with_id = count - ids.count(_MISSING)
        with_ts = count - stamps.count(_MISSING)
        keys = sum(map(len, rows))
        if keys != REQUIRED_FIELDS * count + with_id + with_ts:
            return [len(row.keys() - ALLOWED_FIELDS) == 0 for row in rows]
        labels = list(map(_get_label, rows))
        y = self._labels.encode_all(labels)
        if y is None:
            return [self._labels.encode_all([label]) is not None for label in labels]
        features = list(map(_get_features, rows))
        shape_verdict = self._shape_verdict(features)
        if shape_verdict is not None:
            return shape_verdict
        present_ids = ids if with_id == count else [i for i in ids if i is not _MISSING]
        if present_ids and not _ids_fit(present_ids):
            return [_row_id_ok(row) for row in rows]
        present_ts = stamps if with_ts == count else [t for t in stamps if t is not _MISSING]
        if present_ts and not _all_valid_ts(present_ts):
            ts_verdict = [_row_ts_ok(row) for row in rows]
            if not all(ts_verdict):
                return ts_verdict
        strings = _strings(labels, present_ids, present_ts)
        named = self._dense_features is None
        if not _markers_balance(values, rows, keys, strings, named):
            return _marker_verdict(values, rows, named)
        X = self._encode_rows(features)
        if X is None:
            return [self._encode_rows([row]) is not None for row in features]
        event_ids: list[str | None] = (
            ids if with_id == count else [None if i is _MISSING else i for i in ids]
        )
        return _Fast([], X, y, event_ids)

    def _shape_verdict(self, features: list[Any]) -> list[bool] | None:
        if self._dense_features is not None:
            width = self._dense_features
            if set(map(type, features)) == _LIST_TYPE and set(map(len, features)) == {width}:
                return None
            return [type(f) is list and len(f) == width for f in features]
        if set(map(type, features)) == _DICT_TYPE:
            numbers = chain.from_iterable(map(dict.values, features))
            if set(map(type, numbers)) <= _NUMBER_TYPES:
                return None
        return [type(f) is dict and set(map(type, f.values())) <= _NUMBER_TYPES for f in features]

    def _encode_rows(self, features: list[Any]) -> Matrix | None:
        if self._sparse is not None:
            try:
                return self._sparse.encode_sparse_batch(features, grow=self._grow)
            except (FeatureError, TypeError, ValueError, OverflowError):
                return None
        if self._dense_features is None:
            try:
                return self._encoder.encode_batch(features, grow=self._grow)
            except (FeatureError, TypeError, ValueError, OverflowError):
                return None
        width = self._dense_features
        try:
            flat = np.fromiter(chain.from_iterable(features), np.float64, len(features) * width)
        except (TypeError, ValueError, OverflowError):
            return None
        if not (np.abs(flat) <= MAX_ABS_FEATURE).all():
            return None
        values = flat.reshape(len(features), width)
        if not self._encoder.bias:
            return values
        X = np.empty((len(features), width + 1), dtype=np.float64)
        X[:, 0] = 1.0
        X[:, 1:] = values
        return X

    def empty_matrix(self) -> Matrix:
        """No rows, in the form this decoder produces."""
        if self._sparse is not None:
            return empty_batch(self._encoder.dimension)
        return np.empty((0, self._encoder.dimension), dtype=np.float64)

    # -- putting it together --------------------------------------------------------------------

    def _assemble(
        self,
        records: Sequence[SourceRecord],
        tiers: list[_Rows],
        suspects: list[int],
        *,
        guarded: bool = False,
    ) -> DecodedBatch:
        rejections: list[Rejection] = []
        slow_index: list[int] = []
        slow_events: list[Event] = []
        for i in suspects:
            record = records[i]
            try:
                slow_events.append(self.inspect(record.value))
                slow_index.append(i)
            except InvalidEventError as exc:
                rejections.append(_rejection(record, exc.reason, exc.message))
            except Exception as exc:
                if not guarded:
                    raise
                logger.exception(
                    "cannot decode %s/%d@%d", record.topic, record.partition, record.offset
                )
                message = _clip(f"the event could not be decoded (internal error {exc!r})")
                rejections.append(_rejection(record, NOT_JSON, message))
        if slow_events:
            tiers.append(_Rows.of_events(slow_index, slow_events, self._labels.dtype))
        rows = _Rows.merge(
            [tier for tier in tiers if len(tier.index)], self.empty_matrix(), self._labels.dtype
        )
        return DecodedBatch(
            X=rows.X,
            y=rows.y,
            spans=_spans(records, rows.index),
            rejections=tuple(rejections),
            row_records=rows.index,
            records=records,
            id_source=rows.ids,
        )


def _decode_values(values: list[Any]) -> tuple[list[Any], set[int]]:
    """orjson on every value; values it refuses are suspects (``None`` in their place)."""
    loads = orjson.loads
    try:
        return list(map(loads, values)), set()
    except orjson.JSONDecodeError:
        pass
    objs: list[Any] = []
    suspects: set[int] = set()
    for i, value in enumerate(values):
        try:
            objs.append(loads(value))
        except orjson.JSONDecodeError:
            objs.append(None)
            suspects.add(i)
    return objs, suspects


def _with_required_fields(objs: list[Any], suspects: set[int]) -> list[int] | None:
    """Indices of objects with ``features`` and ``label`` (``None``: all of them)."""
    if not suspects:
        try:
            list(map(_get_features, objs))
            list(map(_get_label, objs))
        except (KeyError, TypeError, IndexError):
            pass
        else:
            return None
    candidates: list[int] = []
    for i, obj in enumerate(objs):
        if type(obj) is dict and FEATURES in obj and LABEL in obj:
            candidates.append(i)
        else:
            suspects.add(i)
    return candidates


def _ids_fit(ids: list[Any]) -> bool:
    """Whether every id is a string of acceptable length."""
    if set(map(type, ids)) != {str}:
        return False
    lengths = list(map(len, ids))
    return min(lengths) >= 1 and max(lengths) <= MAX_ID_LENGTH


def _all_valid_ts(stamps: list[Any]) -> bool:
    kinds = set(map(type, stamps))
    if not kinds <= {str, int, float}:
        return False
    if kinds == {str}:
        return all_valid_text_timestamps(stamps)
    return all(map(valid_timestamp, stamps))


def _row_ts_ok(row: dict[str, Any]) -> bool:
    return TS not in row or valid_timestamp(row[TS])


def _strings(labels: list[Any], ids: list[Any], stamps: list[Any]) -> list[str]:
    """Every decoded string value of the rows (the field names are accounted for separately)."""
    label_types = set(map(type, labels))
    if label_types == {int}:
        strings: list[str] = []
    elif label_types == {str}:
        strings = list(labels)
    else:
        strings = [label for label in labels if type(label) is str]
    strings.extend(ids)
    if stamps:
        strings.extend(stamp for stamp in stamps if type(stamp) is str)
    return strings


def _expected_markers(keys: int, rows: int, strings: list[str], named_features: list[Any]) -> int:
    """Marker bytes the decoded rows account for (see :mod:`consumers._scan`)."""
    total = (
        QUOTES_PER_STRING * keys
        + FIXED_FIELD_MARKERS * rows
        + QUOTES_PER_STRING * len(strings)
        + count_text_markers("".join(strings))
    )
    if named_features:
        total += QUOTES_PER_STRING * sum(map(len, named_features))
        total += count_text_markers("".join(chain.from_iterable(named_features)))
    return total


def _markers_balance(
    values: list[Any], rows: list[dict[str, Any]], keys: int, strings: list[str], named: bool
) -> bool:
    try:
        raw = count_markers(values)
    except TypeError:
        return False
    features = list(map(_get_features, rows)) if named else []
    return raw == _expected_markers(keys, len(rows), strings, features)


def _marker_verdict(values: list[Any], rows: list[dict[str, Any]], named: bool) -> list[bool]:
    if set(map(type, values)) != {bytes}:
        return [type(value) is bytes for value in values]
    found = count_markers_each(values)
    verdict: list[bool] = []
    for count, row in zip(found.tolist(), rows, strict=True):
        ids = [row[ID]] if ID in row else []
        stamps = [row[TS]] if TS in row else []
        strings = _strings([row[LABEL]], ids, stamps)
        features = [row[FEATURES]] if named else []
        verdict.append(count == _expected_markers(len(row), 1, strings, features))
    return verdict


def _row_id_ok(row: dict[str, Any]) -> bool:
    if ID not in row:
        return True
    try:
        _check_id(row[ID])
    except InvalidEventError:
        return False
    return True


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
