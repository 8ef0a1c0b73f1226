"""Feature encoders: one event's features → the augmented float64 vector x̃.

x̃ puts the bias coordinate x₀ = 1 **first** when ``bias=True`` (the seeds' convention), then
the features. Four encoders cover the ways events arrive:

* :class:`DenseEncoder` — a sequence of numbers of fixed length;
* :class:`SchemaEncoder` — a mapping over a declared set of names (absent names are 0);
* :class:`VocabularyEncoder` — a mapping whose names are learned as they appear (river style:
  features may appear or disappear mid-stream; absent names are 0);
* :class:`HashingEncoder` — signed feature hashing of names into 2^b buckets, for open
  vocabularies of unbounded size.

Encoding never mutates the encoder unless ``grow=True`` is passed (only the vocabulary encoder
grows), so predictions on untrusted input cannot change the model. Bad input raises
:class:`~learning.errors.FeatureError` with a stable code.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from learning.errors import FeatureError

logger = logging.getLogger(__name__)

BIAS_NAME = "bias"
MAX_ABS_FEATURE = 1e100
"""Largest accepted feature magnitude. Far beyond any real measurement, and small enough that no
dot product, weight, squared norm or averaging sum can overflow for any realistic stream
(|w_j| ≤ M·10¹⁰⁰ after M updates, so ‖w‖², w·x̃ stay below 10³⁰⁸ while M·d < 10¹⁰⁰)."""
DEFAULT_MAX_FEATURES = 65_536
SMALL_DIMENSION = 256
SMALL_VECTOR = 64
DEFAULT_HASH_BITS = 18
MAX_HASH_BITS = 24
HASH_DIGEST_BYTES = 8
SIGN_BIT = 63
HASH_CACHE_SIZE = 65_536

FeatureName = str | int
_PLAIN_NUMBER_TYPES = frozenset({float, int})


@runtime_checkable
class Encoder(Protocol):
    """What learners need from an encoder."""

    bias: bool

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


def _assemble(
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


def _check_values(values: NDArray[np.float64]) -> None:
    """Every value finite and within ±MAX_ABS_FEATURE, else the first offender's error."""
    ok = np.abs(values) <= MAX_ABS_FEATURE
    if ok.all():
        return
    row, column = (int(i) for i in np.argwhere(~ok)[0])
    error = _value_error(column, float(values[row, column]))
    raise error.at_index(row) if values.shape[0] > 1 else error


def _value_error(name: object, value: float) -> FeatureError:
    if not math.isfinite(value):
        return FeatureError("non_finite", f"feature {name!r} is {value!r}")
    return FeatureError("too_large", f"feature {name!r} is {value!r}, beyond ±{MAX_ABS_FEATURE:g}")


def _check_name(name: object) -> FeatureName:
    if isinstance(name, bool) or not isinstance(name, str | int):
        raise FeatureError(
            "wrong_type", f"feature names must be str or int, got {type(name).__name__}"
        )
    return name


def _plain_vector(prefix: list[float], values: list[Any]) -> NDArray[np.float64] | None:
    """``prefix + values`` as x̃ when every value is a plain int/float, finite and within
    ±MAX_ABS_FEATURE; ``None`` when some value needs the precise, per-value path.

    The checks run at C speed: a type census, then either Python's sum/min/max (a NaN or an
    infinity makes the sum non-finite; a finite sum cannot overflow unless some value is out of
    the range checked next) or, for many values, numpy on the converted vector.
    """
    if not set(map(type, values)) <= _PLAIN_NUMBER_TYPES:
        return None
    if len(values) <= SMALL_VECTOR:
        if not (
            math.isfinite(sum(values))
            and min(values) >= -MAX_ABS_FEATURE
            and max(values) <= MAX_ABS_FEATURE
        ):
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


def _as_mapping(features: Any) -> Mapping[Any, Any]:
    if type(features) is dict and features:
        return features
    if not isinstance(features, Mapping):
        raise FeatureError(
            "wrong_type", f"features must be a mapping of name to number, got {type(features)}"
        )
    if not features:
        raise FeatureError("empty_features", "the event has no features")
    return features


class _EncoderBase:
    """Shared batch encoding and bias handling."""

    kind: ClassVar[str]
    growable: ClassVar[bool] = False
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

    def _blank(self) -> NDArray[np.float64]:
        vector = np.zeros(self.dimension, dtype=np.float64)
        if self.bias:
            vector[0] = 1.0
        return vector


class DenseEncoder(_EncoderBase):
    """A fixed number of numeric features given as a sequence or 1-D array.

    Parameters
    ----------
    n_features
        How many numbers each event carries (bias not counted).
    bias
        Prepend x₀ = 1.

    Examples
    --------
    >>> DenseEncoder(2).encode([2.0, -0.5]).tolist()
    [1.0, 2.0, -0.5]
    """

    kind = "dense"

    def __init__(self, n_features: int, *, bias: bool = True) -> None:
        if n_features < 1:
            raise ValueError(f"n_features must be at least 1, got {n_features}")
        self.n_features = n_features
        self.bias = bias

    @property
    def dimension(self) -> int:
        return self.n_features + self.offset

    @property
    def coordinate_names(self) -> tuple[FeatureName, ...]:
        return self._with_bias(tuple(f"x{i}" for i in range(1, self.n_features + 1)))

    def encode(self, features: Any, *, grow: bool = False) -> NDArray[np.float64]:
        values = self._values(features)
        if not self.bias:
            return values
        out = np.empty(self.dimension, dtype=np.float64)
        out[0] = 1.0
        out[1:] = values
        return out

    def encode_batch(
        self, rows: Sequence[Any] | NDArray[Any], *, grow: bool = False
    ) -> NDArray[np.float64]:
        if isinstance(rows, np.ndarray) and rows.ndim == 2 and rows.dtype.kind in "fiu":
            return self._encode_matrix(rows)
        return super().encode_batch(rows, grow=grow)

    def _encode_matrix(self, rows: NDArray[Any]) -> NDArray[np.float64]:
        if rows.shape[1] != self.n_features:
            raise FeatureError(
                "wrong_dimension", f"expected {self.n_features} features, got {rows.shape[1]}"
            )
        values = rows.astype(np.float64, copy=False)
        _check_values(values)
        out = np.empty((rows.shape[0], self.dimension), dtype=np.float64)
        if self.bias:
            out[:, 0] = 1.0
        out[:, self.offset :] = values
        return out

    def _values(self, features: Any) -> NDArray[np.float64]:
        if isinstance(features, Mapping | str | bytes) or not isinstance(
            features, Sequence | np.ndarray
        ):
            raise FeatureError(
                "wrong_type", f"DenseEncoder takes a sequence of numbers, got {type(features)}"
            )
        if len(features) == 0:
            raise FeatureError("empty_features", "the event has no features")
        if len(features) != self.n_features:
            raise FeatureError(
                "wrong_dimension", f"expected {self.n_features} features, got {len(features)}"
            )
        if isinstance(features, np.ndarray) and features.ndim == 1 and features.dtype.kind in "fiu":
            values = features.astype(np.float64)
        elif set(map(type, features)) <= _PLAIN_NUMBER_TYPES:
            try:
                values = np.array(features, dtype=np.float64)
            except OverflowError:
                values = np.array([numeric_value(i, v) for i, v in enumerate(features)])
        else:
            values = np.array([numeric_value(i, v) for i, v in enumerate(features)])
        _check_values(values[None, :])
        return values

    def to_state(self) -> dict[str, Any]:
        return {"kind": self.kind, "n_features": self.n_features, "bias": self.bias}

    def __repr__(self) -> str:
        return f"DenseEncoder({self.n_features}, bias={self.bias})"


class SchemaEncoder(_EncoderBase):
    """Named features over a declared schema; absent names are 0, unknown names are refused.

    Parameters
    ----------
    names
        The feature names in coordinate order.
    bias
        Prepend x₀ = 1.

    Examples
    --------
    >>> SchemaEncoder(["width", "height"]).encode({"height": 0.9}).tolist()
    [1.0, 0.0, 0.9]
    """

    kind = "schema"

    def __init__(self, names: Sequence[FeatureName], *, bias: bool = True) -> None:
        checked = [_check_name(name) for name in names]
        if not checked:
            raise ValueError("a schema needs at least one feature name")
        if len(set(checked)) != len(checked):
            raise ValueError(f"duplicate feature names in {checked}")
        self.names = tuple(checked)
        self.bias = bias
        self._positions = {name: i + self.offset for i, name in enumerate(self.names)}
        self._prefix: list[float] = [1.0] if bias else []

    @property
    def dimension(self) -> int:
        return len(self.names) + self.offset

    @property
    def coordinate_names(self) -> tuple[FeatureName, ...]:
        return self._with_bias(self.names)

    def encode(self, features: Any, *, grow: bool = False) -> NDArray[np.float64]:
        mapping = _as_mapping(features)
        if len(mapping) == len(self.names) and tuple(mapping) == self.names:
            fast = _plain_vector(self._prefix, list(mapping.values()))
            if fast is not None:
                return fast
        lookup = self._positions.get
        positions: list[int] = []
        values = []
        for name, raw in mapping.items():
            value = raw
            if not (type(value) is float and -MAX_ABS_FEATURE <= value <= MAX_ABS_FEATURE):
                value = numeric_value(name, raw)
            position = lookup(name)
            if position is None:
                raise FeatureError(
                    "unknown_feature", f"{name!r} is not in the schema {list(self.names)}"
                )
            positions.append(position)
            values.append(value)
        return _assemble(self.dimension, self.bias, positions, values)

    def to_state(self) -> dict[str, Any]:
        return {"kind": self.kind, "names": list(self.names), "bias": self.bias}

    def __repr__(self) -> str:
        return f"SchemaEncoder({list(self.names)!r}, bias={self.bias})"


class VocabularyEncoder(_EncoderBase):
    """Named features whose vocabulary grows as names appear (absent names are 0).

    The vocabulary is learned state: it is saved with the model. It grows only when
    ``grow=True`` (learning); prediction ignores names it has not learned, since their weights
    are zero anyway. It never grows past ``max_features``: a new name beyond that is refused with
    ``unknown_feature`` so a flood of junk names cannot take over the model.

    Parameters
    ----------
    bias
        Prepend x₀ = 1.
    max_features
        Upper bound on the vocabulary size.

    Examples
    --------
    >>> encoder = VocabularyEncoder()
    >>> encoder.encode({"a": 2, "b": 3}, grow=True).tolist()
    [1.0, 2.0, 3.0]
    >>> encoder.encode({"b": 1, "c": 9}).tolist()
    [1.0, 0.0, 1.0]
    """

    kind = "vocabulary"
    growable = True

    def __init__(self, *, bias: bool = True, max_features: int = DEFAULT_MAX_FEATURES) -> None:
        if max_features < 1:
            raise ValueError(f"max_features must be at least 1, got {max_features}")
        self.bias = bias
        self.max_features = max_features
        self._names: list[FeatureName] = []
        self._positions: dict[FeatureName, int] = {}
        self._in_order: tuple[Any, ...] | None = None
        self._prefix: list[float] = [1.0] if bias else []

    @property
    def dimension(self) -> int:
        return len(self._names) + self.offset

    @property
    def vocabulary(self) -> tuple[FeatureName, ...]:
        """Learned names in coordinate order."""
        return tuple(self._names)

    @property
    def coordinate_names(self) -> tuple[FeatureName, ...]:
        return self._with_bias(tuple(self._names))

    def encode(self, features: Any, *, grow: bool = False) -> NDArray[np.float64]:
        mapping = _as_mapping(features)
        if self._in_order is not None and tuple(mapping) == self._in_order:
            fast = _plain_vector(self._prefix, list(mapping.values()))
            if fast is not None:
                return fast
        lookup = self._positions.get
        positions: list[int] = []
        values = []
        new: list[tuple[FeatureName, float]] = []
        for name, raw in mapping.items():
            value = raw
            if not (type(value) is float and -MAX_ABS_FEATURE <= value <= MAX_ABS_FEATURE):
                value = numeric_value(name, raw)
            position = lookup(name)
            if position is not None:
                positions.append(position)
                values.append(value)
            elif grow:
                new.append((_check_name(name), value))
        if new:
            if len(self._names) + len(new) > self.max_features:
                names = [name for name, _ in new]
                raise FeatureError(
                    "unknown_feature",
                    f"vocabulary is full ({self.max_features} names); new names {names}",
                )
            for name, value in new:
                positions.append(self._add(name))
                values.append(value)
        self._remember_order(mapping, positions)
        return _assemble(self.dimension, self.bias, positions, values)

    def _remember_order(self, mapping: Mapping[Any, Any], positions: list[int]) -> None:
        """When an event lists exactly the vocabulary in order, later ones like it skip lookups."""
        if self._names and len(positions) == len(mapping) == len(self._names):
            keys = tuple(mapping)
            if keys == tuple(self._names):
                self._in_order = keys

    def _add(self, name: FeatureName) -> int:
        position = len(self._names) + self.offset
        self._in_order = None
        self._names.append(name)
        self._positions[name] = position
        return position

    def to_state(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "bias": self.bias,
            "max_features": self.max_features,
            "vocabulary": list(self._names),
        }

    @classmethod
    def from_vocabulary(
        cls, vocabulary: Sequence[FeatureName], *, bias: bool, max_features: int
    ) -> VocabularyEncoder:
        """An encoder that has already learned ``vocabulary`` (used when loading state)."""
        encoder = cls(bias=bias, max_features=max_features)
        for name in vocabulary:
            encoder._add(_check_name(name))
        if len(encoder._positions) != len(vocabulary):
            raise ValueError("duplicate names in vocabulary")
        return encoder

    def __repr__(self) -> str:
        return (
            f"VocabularyEncoder(bias={self.bias}, max_features={self.max_features})"
            f" with {len(self._names)} names"
        )


class HashingEncoder(_EncoderBase):
    """Signed feature hashing of names into 2^n_bits buckets.

    Each name is hashed with BLAKE2b (64-bit digest, stable across processes and machines,
    unlike Python's salted ``hash``): the low ``n_bits`` bits pick the bucket and the top bit the
    sign, so colliding features cancel on average instead of piling up. Names are typed before
    hashing (``"s:"`` + UTF-8 for str, ``"i:"`` + decimal for int), so ``"1"`` and ``1`` differ.

    Parameters
    ----------
    n_bits
        log2 of the number of buckets (1 to 24).
    bias
        Prepend x₀ = 1.

    Examples
    --------
    >>> encoder = HashingEncoder(n_bits=4)
    >>> vector = encoder.encode({"colour": 2.0})
    >>> encoder.dimension, float(np.abs(vector).sum())
    (17, 3.0)
    """

    kind = "hashing"

    def __init__(self, n_bits: int = DEFAULT_HASH_BITS, *, bias: bool = True) -> None:
        if not 1 <= n_bits <= MAX_HASH_BITS:
            raise ValueError(f"n_bits must be in 1..{MAX_HASH_BITS}, got {n_bits}")
        self.n_bits = n_bits
        self.bias = bias
        self._cache: dict[Hashable, tuple[int, float]] = {}

    @property
    def n_buckets(self) -> int:
        """2 ** n_bits."""
        return 1 << self.n_bits

    @property
    def dimension(self) -> int:
        return self.n_buckets + self.offset

    @property
    def coordinate_names(self) -> tuple[FeatureName, ...]:
        return self._with_bias(tuple(f"h{i}" for i in range(self.n_buckets)))

    def bucket(self, name: Hashable) -> tuple[int, float]:
        """(coordinate, sign) of a feature name."""
        cached = self._cache.get(name)
        if cached is not None:
            return cached
        checked = _check_name(name)
        key = f"s:{checked}" if isinstance(checked, str) else f"i:{checked}"
        digest = hashlib.blake2b(
            key.encode("utf-8", "surrogatepass"), digest_size=HASH_DIGEST_BYTES
        ).digest()
        value = int.from_bytes(digest, "little")
        coordinate = (value & (self.n_buckets - 1)) + self.offset
        sign = -1.0 if (value >> SIGN_BIT) & 1 else 1.0
        if len(self._cache) >= HASH_CACHE_SIZE:
            self._cache.clear()
        self._cache[checked] = (coordinate, sign)
        return coordinate, sign

    def encode(self, features: Any, *, grow: bool = False) -> NDArray[np.float64]:
        mapping = _as_mapping(features)
        pairs = [(self.bucket(name), numeric_value(name, value)) for name, value in mapping.items()]
        vector = self._blank()
        for (coordinate, sign), number in pairs:
            vector[coordinate] += sign * number
        _check_values(vector[None, :])
        return vector

    def to_state(self) -> dict[str, Any]:
        return {"kind": self.kind, "n_bits": self.n_bits, "bias": self.bias}

    def __repr__(self) -> str:
        return f"HashingEncoder(n_bits={self.n_bits}, bias={self.bias})"


def encoder_from_state(meta: Mapping[str, Any]) -> Encoder:
    """Rebuild an encoder from :meth:`to_state` data (``KeyError``/``ValueError`` if malformed)."""
    kind = meta["kind"]
    bias = bool(meta["bias"])
    if kind == DenseEncoder.kind:
        return DenseEncoder(int(meta["n_features"]), bias=bias)
    if kind == SchemaEncoder.kind:
        return SchemaEncoder(list(meta["names"]), bias=bias)
    if kind == VocabularyEncoder.kind:
        return VocabularyEncoder.from_vocabulary(
            list(meta["vocabulary"]), bias=bias, max_features=int(meta["max_features"])
        )
    if kind == HashingEncoder.kind:
        return HashingEncoder(int(meta["n_bits"]), bias=bias)
    raise ValueError(f"unknown encoder kind {kind!r}")
