"""What every encoder shares: the protocols, the value and name checks, the base classes.

An object-valued encoder (:class:`ObjectEncoder`) validates one event into *entries*: the
columns and values of its features in the event's order, distinct columns, the bias left out.
The dense form assembles them into x̃; the sparse form sorts them into CSR. One validation for
both, so the two forms refuse exactly the same events with exactly the same codes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Any, ClassVar, Protocol, cast, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from learning.errors import FeatureError
from learning.sparse import CSRBatch

logger = logging.getLogger(__name__)

BIAS_NAME = "bias"
MAX_ABS_FEATURE = 1e100
"""Largest accepted feature magnitude. Far beyond any real measurement, and small enough that no
dot product, weight, squared norm or averaging sum can overflow for any realistic stream
(|w_j| ≤ M·10¹⁰⁰ after M updates, so ‖w‖², w·x̃ stay below 10³⁰⁸ while M·d < 10¹⁰⁰)."""
DEFAULT_MAX_FEATURES_PER_EVENT = 10_000
"""Most names one event may carry (``too_many_features`` beyond): far above a text event's
words, small enough that one event cannot make a batch hold millions of entries."""
SMALL_DIMENSION = 256
SMALL_VECTOR = 64

FeatureName = str | int
SparseRow = tuple[NDArray[np.int64], NDArray[np.float64]]
"""One event in sparse form: strictly increasing columns and their values."""
PLAIN_NUMBER_TYPES = frozenset({float, int})
RowKey = tuple[bytes, bytes, int]
"""What an encoder vouches identifies a row it wrote: the event's content as bytes (names,
values) and the row's length (see ``HashingEncoder.encode_sparse_into``)."""


@runtime_checkable
class Encoder(Protocol):
    """What learners need from an encoder."""

    bias: bool

    @property
    def sparse(self) -> bool:
        """Whether the encoder is object-valued and encodes to CSR (see :class:`SparseEncoder`)."""
        ...

    @property
    def dimension(self) -> int:
        """len(x̃), bias included."""
        ...

    @property
    def growable(self) -> bool:
        """Whether ``dimension`` can grow (only the vocabulary encoder's does)."""
        ...

    @property
    def coordinate_names(self) -> tuple[FeatureName, ...]:
        """Names of the coordinates of x̃ in order, ``"bias"`` first."""
        ...

    def encode(self, features: Any, *, grow: bool = False) -> NDArray[np.float64]:
        """x̃ for one event."""
        ...

    def encode_batch(
        self, rows: Sequence[Any] | NDArray[Any], *, grow: bool = False
    ) -> NDArray[np.float64]:
        """x̃ for many events, shape (n, dimension)."""
        ...

    def to_state(self) -> dict[str, Any]:
        """Plain JSON-able data."""
        ...


@runtime_checkable
class SparseEncoder(Encoder, Protocol):
    """An object-valued encoder: events are mappings of name → number, encoded to CSR too."""

    max_features_per_event: int

    def encode_sparse(self, features: Any, *, grow: bool = False) -> SparseRow:
        """(columns, values) of x̃ for one event, columns strictly increasing, bias first."""
        ...

    def encode_sparse_batch(
        self, rows: Sequence[Any], *, grow: bool = False, joined_names: bytes | None = None
    ) -> CSRBatch:
        """x̃ for many events as a :class:`~learning.sparse.CSRBatch` (``joined_names``: what
        :meth:`join_names` gave for these rows, so they are not joined again)."""
        ...

    def join_names(self, rows: Sequence[Mapping[Any, Any]]) -> bytes | None:
        """The names of ``rows`` as the batch path hashes them in one piece, or ``None``."""
        ...


def as_sparse(encoder: Encoder) -> SparseEncoder | None:
    """``encoder`` typed as a :class:`SparseEncoder` when it is object-valued, else ``None``.

    Decided by the ``sparse`` flag, never by ``isinstance`` against the protocol: that would
    evaluate every protocol property, ``coordinate_names`` included (2^b names when hashing).
    """
    return cast(SparseEncoder, encoder) if encoder.sparse else None


def numeric_value(name: object, value: object) -> float:
    """One feature value as a finite float, or a :class:`FeatureError`.

    Examples
    --------
    >>> numeric_value("a", 3)
    3.0
    >>> numeric_value("a", True)
    Traceback (most recent call last):
    ...
    learning.errors.FeatureError: boolean_feature: feature 'a' is a boolean (True); send 1 or 0
    """
    kind = type(value)
    if kind is float:
        number = value
    elif kind is bool or isinstance(value, bool | np.bool_):
        raise FeatureError(
            "boolean_feature", f"feature {name!r} is a boolean ({value!r}); send 1 or 0"
        )
    elif isinstance(value, int | float | np.integer | np.floating):
        try:
            number = float(value)
        except OverflowError:
            raise FeatureError("non_finite", f"feature {name!r} overflows a float") from None
    else:
        raise FeatureError(
            "non_numeric", f"feature {name!r} is {kind.__name__} ({value!r:.40}), not a number"
        )
    assert isinstance(number, float)
    if not math.isfinite(number):
        raise FeatureError("non_finite", f"feature {name!r} is {number!r}")
    if abs(number) > MAX_ABS_FEATURE:
        raise FeatureError(
            "too_large", f"feature {name!r} is {number!r}, beyond ±{MAX_ABS_FEATURE:g}"
        )
    return number


def checked_value(name: object, value: object) -> float:
    """:func:`numeric_value`, with the common case (a float in range) decided inline."""
    if type(value) is float and -MAX_ABS_FEATURE <= value <= MAX_ABS_FEATURE:
        return value
    return numeric_value(name, value)


def assemble(
    dimension: int, bias: bool, positions: list[int], values: list[float]
) -> NDArray[np.float64]:
    """x̃ with ``values`` at ``positions`` (distinct), the bias first, zeros elsewhere."""
    if dimension <= SMALL_DIMENSION:
        dense = [0.0] * dimension
        if bias:
            dense[0] = 1.0
        for position, value in zip(positions, values, strict=True):
            dense[position] = value
        return np.array(dense)
    vector = np.zeros(dimension)
    if bias:
        vector[0] = 1.0
    if positions:
        vector[positions] = values
    return vector


def check_values(values: NDArray[np.float64]) -> None:
    """Every value finite and within ±MAX_ABS_FEATURE, else the first offender's error."""
    ok = np.abs(values) <= MAX_ABS_FEATURE
    if ok.all():
        return
    row, column = (int(i) for i in np.argwhere(~ok)[0])
    error = value_error(column, float(values[row, column]))
    raise error.at_index(row) if values.shape[0] > 1 else error


def value_error(name: object, value: float) -> FeatureError:
    """The error of a value that is not finite or beyond ±MAX_ABS_FEATURE."""
    if not math.isfinite(value):
        return FeatureError("non_finite", f"feature {name!r} is {value!r}")
    return FeatureError("too_large", f"feature {name!r} is {value!r}, beyond ±{MAX_ABS_FEATURE:g}")


def is_name(name: object) -> bool:
    """Whether ``name`` can name a feature: a str or an int (not a bool)."""
    kind = type(name)
    return kind is str or (kind is not bool and isinstance(name, str | int))


def check_name(name: object) -> FeatureName:
    """``name`` if it can name a feature, else ``bad_feature_name``."""
    if not is_name(name):
        raise bad_name(name, "str or int")
    assert isinstance(name, str | int)
    return name


def bad_name(name: object, expected: str) -> FeatureError:
    """The ``bad_feature_name`` error of a name that is not ``expected``."""
    return FeatureError(
        "bad_feature_name",
        f"feature names must be {expected}, got {type(name).__name__} ({name!r:.40})",
    )


def plain_vector(prefix: list[float], values: list[Any]) -> NDArray[np.float64] | None:
    """``prefix + values`` as x̃ when every value is a plain int/float, finite and within
    ±MAX_ABS_FEATURE; ``None`` when some value needs the precise, per-value path.

    The checks run at C speed: a type census, then either Python's sum/min/max (a NaN or an
    infinity makes the sum non-finite; a finite sum cannot overflow unless some value is out of
    the range checked next) or, for many values, numpy on the converted vector.
    """
    if not set(map(type, values)) <= PLAIN_NUMBER_TYPES:
        return None
    if len(values) <= SMALL_VECTOR:
        try:
            finite = math.isfinite(sum(values))
        except OverflowError:  # an int sum beyond any float: the precise path names the value
            return None
        if not (finite and min(values) >= -MAX_ABS_FEATURE and max(values) <= MAX_ABS_FEATURE):
            return None
        return np.array(prefix + values, dtype=np.float64)
    combined = prefix + values
    try:
        vector = np.fromiter(combined, dtype=np.float64, count=len(combined))
    except OverflowError:
        return None
    if not (np.abs(vector) <= MAX_ABS_FEATURE).all():
        return None
    return vector


class EncoderBase:
    """Shared batch encoding and bias handling."""

    kind: ClassVar[str]
    growable: ClassVar[bool] = False
    sparse: ClassVar[bool] = False
    validated_output: ClassVar[bool] = True
    """Every vector it returns is finite and within ±MAX_ABS_FEATURE (learners skip re-checks)."""
    bias: bool

    @property
    def offset(self) -> int:
        """Index of the first feature coordinate (1 with a bias, else 0)."""
        return 1 if self.bias else 0

    @property
    def dimension(self) -> int:
        raise NotImplementedError

    def encode(self, features: Any, *, grow: bool = False) -> NDArray[np.float64]:
        raise NotImplementedError

    def encode_batch(
        self, rows: Sequence[Any] | NDArray[Any], *, grow: bool = False
    ) -> NDArray[np.float64]:
        """Encode many events; a bad row raises its :class:`FeatureError` with ``index`` set.

        With ``grow=True`` a vocabulary grows with the valid rows before the bad one (they are
        valid features, so nothing is lost; unused coordinates just keep zero weights).
        """
        encoded: list[NDArray[np.float64]] = []
        for i, row in enumerate(rows):
            try:
                encoded.append(self.encode(row, grow=grow))
            except FeatureError as error:
                raise error.at_index(i) from None
        width = self.dimension
        out = np.zeros((len(encoded), width), dtype=np.float64)
        for i, vector in enumerate(encoded):
            out[i, : vector.shape[0]] = vector
        return out

    def _with_bias(self, names: tuple[FeatureName, ...]) -> tuple[FeatureName, ...]:
        """The coordinate names: ``"bias"`` first when the encoder has one, then ``names``."""
        return (BIAS_NAME, *names) if self.bias else names


class ObjectEncoder(EncoderBase):
    """An encoder of name → number mappings, in dense and in sparse (CSR) form.

    Subclasses define :meth:`_entries` (one event's validated columns and values) and
    :meth:`_batch_columns` (the columns of many names at once, for the bulk path).
    """

    sparse = True
    max_features_per_event: int
    summed: ClassVar[bool] = False
    """Whether names may share a column (hashing); their values are then summed in event order,
    starting from 0.0, exactly as the dense form adds them up."""

    def _limit(self, max_features_per_event: int) -> int:
        if max_features_per_event < 1:
            raise ValueError(
                f"max_features_per_event must be at least 1, got {max_features_per_event}"
            )
        return max_features_per_event

    def _mapping(self, features: object) -> Mapping[Any, Any]:
        """``features`` as a non-empty mapping within the per-event bound, else the error."""
        if type(features) is not dict or not features:
            if not isinstance(features, Mapping):
                raise FeatureError(
                    "wrong_type",
                    f"features must be a mapping of name to number, got {type(features)}",
                )
            if not features:
                raise FeatureError("empty_features", "the event has no features")
        if len(features) > self.max_features_per_event:
            raise FeatureError(
                "too_many_features",
                f"{len(features)} features; at most {self.max_features_per_event} per event",
            )
        return features

    def _entries(self, mapping: Mapping[Any, Any], grow: bool) -> tuple[list[int], list[float]]:
        """Validated distinct columns and their values, in event order, bias left out."""
        raise NotImplementedError

    def _batch_columns(
        self, names: list[Any], grow: bool
    ) -> tuple[NDArray[np.int64], NDArray[np.bool_] | None] | None:
        """Columns of ``names`` (and which take a minus sign), or ``None``: use the row path."""
        raise NotImplementedError

    def join_names(self, rows: Sequence[Mapping[Any, Any]]) -> bytes | None:
        """Every name of ``rows`` (mappings), in order, as the one UTF-8 string its batch path
        hashes (murmur3 hashing: the names joined by a NUL byte); ``None`` when the encoder
        takes no such string (every other encoder) or a name is not a str of valid Unicode.

        A caller that reads these bytes too (the consumer's decoder counts JSON marker bytes
        on them) passes them back to :meth:`encode_sparse_batch` as ``joined_names``, so a
        batch's names are joined once.
        """
        return None

    def _compiled_batch(
        self, joined: bytes, values: NDArray[np.float64], lengths: list[int]
    ) -> CSRBatch | None:
        """The batch built by one compiled call from :meth:`join_names`'s bytes (checked
        values, ``lengths`` names per event), or ``None``: the bulk path's columns then. None
        here; hashing builds its rows."""
        return None

    def encode_sparse(self, features: Any, *, grow: bool = False) -> SparseRow:
        """(columns, values) of x̃ for one event: columns strictly increasing, bias (column 0)
        first when the encoder has one. The same validation and codes as :meth:`encode`."""
        columns, values = self._entries(self._mapping(features), grow)
        return self._sparse_row(columns, values)

    @staticmethod
    def _into(row: SparseRow, columns: NDArray[np.int64], values: NDArray[np.float64]) -> int:
        """Copy a sparse row to the start of ``columns`` / ``values``; returns its length."""
        indices, data = row
        n = int(indices.shape[0])
        columns[:n] = indices
        values[:n] = data
        return n

    def _sparse_row(self, columns: list[int], values: list[float]) -> SparseRow:
        """Validated entries (distinct columns, bias left out) as a sorted sparse row."""
        if self.bias:
            columns = [0, *columns]
            values = [1.0, *values]
        indices = np.array(columns, dtype=np.int64)
        data = np.array(values, dtype=np.float64)
        if indices.shape[0] > 1 and not (indices[1:] > indices[:-1]).all():
            order = np.argsort(indices, kind="stable")
            indices, data = indices[order], data[order]
        return indices, data

    def encode_sparse_batch(
        self, rows: Sequence[Any], *, grow: bool = False, joined_names: bytes | None = None
    ) -> CSRBatch:
        """x̃ for many events as CSR, never a dense row; ``to_dense()`` equals
        :meth:`encode_batch` bit for bit. A bad row raises its :class:`FeatureError` with
        ``index`` set (with ``grow=True`` a vocabulary keeps what the rows before it taught).

        ``joined_names``: :meth:`join_names` of these very ``rows`` when the caller holds it
        already (taken as given, not recomputed); ``None``: joined here when needed.
        """
        fast = self._bulk_batch(rows, grow, joined_names)
        if fast is not None:
            return fast
        encoded: list[SparseRow] = []
        for i, row in enumerate(rows):
            try:
                encoded.append(self.encode_sparse(row, grow=grow))
            except FeatureError as error:
                raise error.at_index(i) from None
        return CSRBatch.from_rows(encoded, self.dimension)

    def _bulk_batch(
        self, rows: Sequence[Any], grow: bool, joined_names: bytes | None
    ) -> CSRBatch | None:
        """The whole batch in a few C-level passes when every row is a plain dict of plain
        numbers whose names need no per-row decision; ``None`` otherwise (the row path)."""
        if type(rows) is not list or not rows or set(map(type, rows)) != {dict}:
            return None
        lengths = list(map(len, rows))
        if min(lengths) < 1 or max(lengths) > self.max_features_per_event:
            return None
        raw = list(chain.from_iterable(map(dict.values, rows)))
        if not set(map(type, raw)) <= PLAIN_NUMBER_TYPES:
            return None
        try:
            values = np.fromiter(raw, dtype=np.float64, count=len(raw))
        except OverflowError:
            return None
        if not (np.abs(values) <= MAX_ABS_FEATURE).all():
            return None
        joined = self.join_names(rows) if joined_names is None else joined_names
        if joined is not None:
            compiled = self._compiled_batch(joined, values, lengths)
            if compiled is not None:
                return compiled
        names = list(chain.from_iterable(rows))
        found = self._batch_columns(names, grow)
        if found is None:
            return None
        columns, negative = found
        if negative is not None:
            values = np.where(negative, -values, values) + 0.0
        return self._to_csr(np.asarray(lengths, dtype=np.int64), columns, values)

    def _to_csr(
        self, lengths: NDArray[np.int64], columns: NDArray[np.int64], values: NDArray[np.float64]
    ) -> CSRBatch | None:
        """Rows of (columns, values) in event order → CSR sorted by column, bias prepended,
        shared columns summed in event order; ``None`` if a sum leaves the accepted range."""
        n = lengths.shape[0]
        width = self.dimension
        row_of = np.repeat(np.arange(n, dtype=np.int64), lengths)
        keys = row_of * width + columns
        if self.bias:
            keys = np.concatenate([np.arange(n, dtype=np.int64) * width, keys])
            values = np.concatenate([np.ones(n), values])
        # Keys are distinct unless names share a column, so an unstable sort is exact; shared
        # columns get their entries back in event order (positions increase within a row).
        order = np.argsort(keys)
        keys = keys[order]
        first: NDArray[np.bool_] | None = None
        if self.summed and keys.shape[0] > 1:
            first = np.ones(keys.shape[0], dtype=bool)
            first[1:] = keys[1:] != keys[:-1]
            if first.all():
                first = None
            else:
                _restore_event_order(order, first)
        values = values[order]
        if first is not None:
            values = _sum_runs(values, first)
            keys = keys[first]
            if not (np.abs(values) <= MAX_ABS_FEATURE).all():
                return None
        rows = keys // width
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
        return CSRBatch(indptr=indptr, indices=keys - rows * width, values=values, dimension=width)


def _restore_event_order(order: NDArray[np.intp], first: NDArray[np.bool_]) -> None:
    """Sort ``order`` within each run of equal keys (``first`` opens a run), in place."""
    starts = np.flatnonzero(first)
    sizes = np.diff(np.append(starts, order.shape[0]))
    for slot in np.flatnonzero(sizes > 1).tolist():
        start = int(starts[slot])
        stop = start + int(sizes[slot])
        order[start:stop] = np.sort(order[start:stop])


def _sum_runs(values: NDArray[np.float64], first: NDArray[np.bool_]) -> NDArray[np.float64]:
    """One value per run of ``first`` (True opens a run): the run's values added one by one in
    order, starting from 0.0, as the dense form accumulates them."""
    starts = np.flatnonzero(first)
    sizes = np.diff(np.append(starts, values.shape[0]))
    summed = values[starts].copy()
    for slot in np.flatnonzero(sizes > 1).tolist():
        start = int(starts[slot])
        total = 0.0
        for value in values[start : start + int(sizes[slot])].tolist():
            total += value
        summed[slot] = total
    return summed
