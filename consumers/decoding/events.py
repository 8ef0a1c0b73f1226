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
    An RFC 3339 date-time string or epoch seconds (see :mod:`consumers.decoding.timestamps`).

Any other field is refused (``unknown_field``): a misspelt ``lable`` or ``feature`` must not
silently become a different event. Duplicate keys anywhere (also inside ``features``) are refused
(``duplicate_key``) because JSON parsers disagree on which value wins. So is JSON nested deeper than
:data:`MAX_NESTING_DEPTH` (``too_deep``).

Every refused record becomes a :class:`Rejection` with a stable reason code (:data:`REASON_CODES`),
a readable message and the record's original coordinates, key, headers and value.

Speed
-----
:meth:`EventDecoder.decode_batch` first reads the batch with a compiled reader, for dense models
(:mod:`consumers.decoding.fastjson`) and murmur3 hashing models
(:mod:`consumers.decoding.fastsparse`): one numba pass over the joined bytes, no Python object per
event. What it cannot vouch for, it escalates. The rest is decoded with orjson, then checked as a
whole batch at once: a handful of C-level passes over the decoded lists, one numpy conversion of
all feature vectors, and one SWAR byte count (see :mod:`consumers.decoding.scan`) that proves no
record holds a duplicate key, a boolean, a null, a stray string or an escape. Only the records
that fail a bulk check are diagnosed one by one, by the exact slow path
:meth:`EventDecoder.inspect`; each faster tier accepts a subset of what the slow path accepts, with
bit-identical vectors.

Object-valued features (schema, vocabulary, hashing encoders) decode straight to a
:class:`~learning.sparse.CSRBatch` in every tier, never through a dense row; dense arrays stay a
dense matrix.

This module holds :class:`EventDecoder` and is where every public name is imported from; the parts
live in :mod:`consumers.decoding` (wire names, batch types, labels, the precise path, bulk checks).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from itertools import chain
from typing import Any, ClassVar

import numpy as np

from consumers.decoding._csr import empty_batch
from consumers.decoding.batch import (
    DecodedBatch,
    Event,
    Matrix,
    PartitionSpan,
    Record,
    Rejection,
    SourceRecord,
    _Compiled,
    _Fast,
    _rejection,
    _Rows,
    _spans,
    compiled_reader,
    stack_rows,
)
from consumers.decoding.bulk import (
    _all_valid_ts,
    _decode_values,
    _ids_fit,
    _marker_verdict,
    _markers_balance,
    _row_id_ok,
    _row_ts_ok,
    _strings,
    _with_required_fields,
)
from consumers.decoding.labels import LabelLookup
from consumers.decoding.precise import (
    _check_id,
    _check_ts,
    _json_kind,
    duplicate_key,
    parse_event_json,
    validate_features,
    validate_sparse_features,
)
from consumers.decoding.scan import nesting_depth
from consumers.decoding.wire import (
    _DICT_TYPE,
    _LIST_TYPE,
    _MISSING,
    _NUMBER_TYPES,
    ALLOWED_FIELDS,
    BAD_ID,
    BAD_TS,
    DUPLICATE_KEY,
    EVENT_REASONS,
    FEATURES,
    ID,
    LABEL,
    MAX_ID_LENGTH,
    MAX_MATRIX_ELEMENTS,
    MAX_NESTING_DEPTH,
    MISSING_FEATURES,
    MISSING_LABEL,
    NOT_JSON,
    NOT_OBJECT,
    NOT_UTF8,
    REASON_CODES,
    REQUIRED_FIELDS,
    TOO_DEEP,
    TS,
    UNKNOWN_FIELD,
    UNKNOWN_LABEL,
    WRONG_TYPE,
    InvalidEventError,
    _clip,
    _get_features,
    _get_id,
    _get_label,
    _get_ts,
    _get_value,
)
from learning.encoders import MAX_ABS_FEATURE, DenseEncoder, Encoder, as_sparse
from learning.errors import FeatureError
from learning.labels import ClassIndex, LabelMap

logger = logging.getLogger(__name__)

__all__ = [
    "BAD_ID",
    "BAD_TS",
    "DUPLICATE_KEY",
    "EVENT_REASONS",
    "MAX_ID_LENGTH",
    "MAX_MATRIX_ELEMENTS",
    "MAX_NESTING_DEPTH",
    "MISSING_FEATURES",
    "MISSING_LABEL",
    "NOT_JSON",
    "NOT_OBJECT",
    "NOT_UTF8",
    "REASON_CODES",
    "TOO_DEEP",
    "UNKNOWN_FIELD",
    "UNKNOWN_LABEL",
    "WRONG_TYPE",
    "DecodedBatch",
    "Event",
    "EventDecoder",
    "InvalidEventError",
    "LabelLookup",
    "Matrix",
    "PartitionSpan",
    "Record",
    "Rejection",
    "SourceRecord",
    "duplicate_key",
    "nesting_depth",
    "parse_event_json",
    "stack_rows",
    "validate_features",
    "validate_sparse_features",
]


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

    compiled_tier: ClassVar[bool] = True
    """Whether dense and murmur3 hashing models try their compiled reader first (off: orjson and
    precise tiers only, the same verdicts; ``BENCH_JSON_READER=off python -m bench`` measures
    that)."""

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
        self._sparse = as_sparse(encoder)
        self._dense_features = encoder.n_features if isinstance(encoder, DenseEncoder) else None
        self._compiled = compiled_reader(encoder, labels)

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
        label = obj[LABEL]
        target = self._labels.find(label)
        try:
            x: Matrix = (
                validate_features(obj[FEATURES], self._encoder, grow=self._grow)
                if self._sparse is None
                else validate_sparse_features(obj[FEATURES], self._sparse, grow=self._grow)
            )
        except FeatureError as exc:
            raise InvalidEventError(exc.code, _clip(exc.message)) from None
        if target is None:
            # Only a valid event adds a class, and the compiled tier learns it for what follows.
            target = self._labels.add(label)
            self._compiled = compiled_reader(self._encoder, self._labels)
        return Event(x=x, y=target, event_id=event_id)

    # -- the bulk path --------------------------------------------------------------------------

    def decode_batch(self, records: Sequence[SourceRecord]) -> DecodedBatch:
        """Decode and validate ``records``; valid rows keep the records' order.

        Never raises for bad input: every record ends up either as a row of ``X`` or as a
        :class:`Rejection`. Three tiers, each exact: a compiled reader (dense and murmur3
        hashing models), then orjson with bulk checks, then the precise per-record diagnosis
        for what is left.
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
        if self._compiled is not None and self.compiled_tier:
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
        assert self._compiled is not None
        try:
            return self._compiled(values)
        except TypeError:  # a value that is not bytes: the other tiers decide
            return None

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
            return [_row_ts_ok(row) for row in rows]
        strings = _strings(labels, present_ids, present_ts)
        named = self._dense_features is None
        # The encoder's joined names serve both the marker count and the encoding (one join).
        joined = self._sparse.join_names(features) if self._sparse is not None else None
        named_features = features if named else []
        if not _markers_balance(values, rows, keys, strings, named_features, joined_names=joined):
            return _marker_verdict(values, rows, named)
        X = self._encode_rows(features, joined)
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
            if self._sparse is not None and not self._grow:
                # The encoder checks every value itself (a FeatureError for a non-number) and
                # keeps nothing from a batch it refuses: a failing row is found by encoding.
                return None
            numbers = chain.from_iterable(map(dict.values, features))
            if set(map(type, numbers)) <= _NUMBER_TYPES:
                return None
        return [type(f) is dict and set(map(type, f.values())) <= _NUMBER_TYPES for f in features]

    def _encode_rows(self, features: list[Any], joined_names: bytes | None = None) -> Matrix | None:
        """The rows' vectors, or ``None`` when one is refused (``joined_names``: the sparse
        encoder's :meth:`~learning.encoders.SparseEncoder.join_names` of ``features``)."""
        if self._sparse is not None:
            try:
                return self._sparse.encode_sparse_batch(
                    features, grow=self._grow, joined_names=joined_names
                )
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
