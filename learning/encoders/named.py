"""Encoders of named features: a declared schema, or a vocabulary learned as names appear."""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from learning.encoders._common import (
    DEFAULT_MAX_FEATURES_PER_EVENT,
    MAX_ABS_FEATURE,
    PLAIN_NUMBER_TYPES,
    FeatureName,
    ObjectEncoder,
    RowKey,
    SparseRow,
    assemble,
    bad_name,
    check_name,
    checked_value,
    is_name,
    plain_vector,
)
from learning.encoders._packed import (
    NO_ROW,
    PACKED_FLOAT_BYTES,
    packed_format,
    packed_row_entry,
)
from learning.errors import FeatureError

logger = logging.getLogger(__name__)

DEFAULT_MAX_FEATURES = 65_536
"""Default bound on a vocabulary's size."""
IN_ORDER = b""
"""The names part of the :data:`RowKey` of an event listing the whole vocabulary in order."""
NO_PACK_FORMAT = ""
"""``VocabularyEncoder._pack_format`` while no order of the whole vocabulary is known."""


def _known_columns(positions: Mapping[Any, int], names: list[Any]) -> NDArray[np.int64] | None:
    """The columns of ``names`` when every one is known, else ``None``."""
    try:
        return np.fromiter(map(positions.__getitem__, names), dtype=np.int64, count=len(names))
    except KeyError:
        return None


class SchemaEncoder(ObjectEncoder):
    """Named features over a declared schema; absent names are 0, unknown names are refused.

    Parameters
    ----------
    names
        The feature names in coordinate order.
    bias
        Prepend x₀ = 1.
    max_features_per_event
        Most names one event may carry (``too_many_features`` beyond).

    Examples
    --------
    >>> encoder = SchemaEncoder(["width", "height"])
    >>> encoder.encode({"height": 0.9}).tolist()
    [1.0, 0.0, 0.9]
    >>> [part.tolist() for part in encoder.encode_sparse({"height": 0.9})]
    [[0, 2], [1.0, 0.9]]
    """

    kind = "schema"

    def __init__(
        self,
        names: Sequence[FeatureName],
        *,
        bias: bool = True,
        max_features_per_event: int = DEFAULT_MAX_FEATURES_PER_EVENT,
    ) -> None:
        checked = [check_name(name) for name in names]
        if not checked:
            raise ValueError("a schema needs at least one feature name")
        if len(set(checked)) != len(checked):
            raise ValueError(f"duplicate feature names in {checked}")
        self.names = tuple(checked)
        self.bias = bias
        self.max_features_per_event = self._limit(max_features_per_event)
        self._positions = {name: i + self.offset for i, name in enumerate(self.names)}
        self._prefix: list[float] = [1.0] if bias else []

    @property
    def dimension(self) -> int:
        return len(self.names) + self.offset

    @property
    def coordinate_names(self) -> tuple[FeatureName, ...]:
        return self._with_bias(self.names)

    def encode(self, features: Any, *, grow: bool = False) -> NDArray[np.float64]:
        mapping = self._mapping(features)
        if len(mapping) == len(self.names) and tuple(mapping) == self.names:
            fast = plain_vector(self._prefix, list(mapping.values()))
            if fast is not None:
                return fast
        positions, values = self._entries(mapping, grow)
        return assemble(self.dimension, self.bias, positions, values)

    def _entries(self, mapping: Mapping[Any, Any], grow: bool) -> tuple[list[int], list[float]]:
        lookup = self._positions.get
        positions: list[int] = []
        values: list[float] = []
        for name, raw in mapping.items():
            value = checked_value(name, raw)
            position = lookup(name)
            if position is None:
                if not is_name(name):
                    raise bad_name(name, "str or int")
                raise FeatureError(
                    "unknown_feature", f"{name!r} is not in the schema {list(self.names)}"
                )
            positions.append(position)
            values.append(value)
        return positions, values

    def _batch_columns(
        self, names: list[Any], grow: bool
    ) -> tuple[NDArray[np.int64], NDArray[np.bool_] | None] | None:
        columns = _known_columns(self._positions, names)
        return None if columns is None else (columns, None)

    def to_state(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "names": list(self.names),
            "bias": self.bias,
            "max_features_per_event": self.max_features_per_event,
        }

    def __repr__(self) -> str:
        return (
            f"SchemaEncoder({list(self.names)!r}, bias={self.bias}, "
            f"max_features_per_event={self.max_features_per_event})"
        )


class VocabularyEncoder(ObjectEncoder):
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
    max_features_per_event
        Most names one event may carry (``too_many_features`` beyond).

    Examples
    --------
    >>> encoder = VocabularyEncoder()
    >>> encoder.encode({"a": 2, "b": 3}, grow=True).tolist()
    [1.0, 2.0, 3.0]
    >>> encoder.encode({"b": 1, "c": 9}).tolist()
    [1.0, 0.0, 1.0]
    >>> encoder.encode_sparse_batch([{"b": 1, "a": 5}, {"c": 2}], grow=True).to_dense().tolist()
    [[1.0, 5.0, 1.0, 0.0], [1.0, 0.0, 0.0, 2.0]]
    """

    kind = "vocabulary"
    growable = True

    def __init__(
        self,
        *,
        bias: bool = True,
        max_features: int = DEFAULT_MAX_FEATURES,
        max_features_per_event: int = DEFAULT_MAX_FEATURES_PER_EVENT,
    ) -> None:
        if max_features < 1:
            raise ValueError(f"max_features must be at least 1, got {max_features}")
        self.bias = bias
        self.max_features = max_features
        self.max_features_per_event = self._limit(max_features_per_event)
        self._names: list[FeatureName] = []
        self._positions: dict[FeatureName, int] = {}
        self._in_order: tuple[Any, ...] | None = None
        """The whole vocabulary in order, once an event listed it so (remembered only from a
        validated mapping: so within ``max_features_per_event``); None after it grows."""
        self._pack_format = NO_PACK_FORMAT
        """The ``struct`` format of an event in ``_in_order``'s values as float64."""
        self._prefix: list[float] = [1.0] if bias else []
        self._dimension = self.offset
        """``len(_names) + offset``, kept by :meth:`_add`: ``learn_one`` reads ``dimension`` on
        every event (measured: 0.05 µs a read of it, 0.11 µs computing the sum)."""

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def vocabulary(self) -> tuple[FeatureName, ...]:
        """Learned names in coordinate order."""
        return tuple(self._names)

    @property
    def coordinate_names(self) -> tuple[FeatureName, ...]:
        return self._with_bias(tuple(self._names))

    def encode(self, features: Any, *, grow: bool = False) -> NDArray[np.float64]:
        mapping = self._mapping(features)
        if self._in_order is not None and tuple(mapping) == self._in_order:
            fast = plain_vector(self._prefix, list(mapping.values()))
            if fast is not None:
                return fast
        positions, values = self._entries(mapping, grow)
        self._remember_order(mapping, positions)
        return assemble(self.dimension, self.bias, positions, values)

    def encode_sparse(self, features: Any, *, grow: bool = False) -> SparseRow:
        mapping = self._mapping(features)
        if self._in_order is not None and tuple(mapping) == self._in_order:
            # The event lists the whole vocabulary in order: every column, in order.
            fast = plain_vector(self._prefix, list(mapping.values()))
            if fast is not None:
                return np.arange(fast.shape[0], dtype=np.int64), fast
        positions, values = self._entries(mapping, grow)
        self._remember_order(mapping, positions)
        return self._sparse_row(positions, values)

    def encode_sparse_into(
        self,
        features: Any,
        columns: NDArray[np.int64],
        values: NDArray[np.float64],
        *,
        grow: bool = False,
        previous: RowKey | None = None,
    ) -> tuple[int, RowKey | None]:
        """:meth:`encode_sparse` written to the start of ``columns`` / ``values`` (writable,
        C-contiguous int64 and float64 arrays of at least ``max_features_per_event + 1``
        entries): (the row's length, its key or ``None``),
        as :meth:`HashingEncoder.encode_sparse_into <learning.HashingEncoder.encode_sparse_into>`.

        A ``dict`` event listing the whole vocabulary in order is written by one compiled call
        from its values packed as float64 and keyed by them (``IN_ORDER``, the packed bytes, n):
        the key names one row, since the vocabulary only grows and so has one state of each
        size.
        """
        mapping = self._mapping(features)
        packed = self._packed_in_order(mapping)
        if packed is not None:
            if previous is not None and previous[1] == packed and previous[0] == IN_ORDER:
                return previous[2], previous
            n = int(packed_row_entry()(packed, self.offset, MAX_ABS_FEATURE, columns, values))
            if n != NO_ROW:
                return n, (IN_ORDER, packed, n)
        positions, numbers = self._entries(mapping, grow)
        self._remember_order(mapping, positions)
        return self._into(self._sparse_row(positions, numbers), columns, values), None

    def _packed_in_order(self, mapping: Mapping[Any, Any]) -> bytes | None:
        """The values of an event listing the vocabulary in order, packed as float64; ``None``
        for any other event (see :meth:`_pack_in_order_into`)."""
        into = bytearray(len(mapping) * PACKED_FLOAT_BYTES)
        return None if self._pack_in_order_into(mapping, into) == NO_ROW else bytes(into)

    def _pack_in_order_into(self, features: Any, into: bytearray) -> int:
        """The values of a ``dict`` event listing the vocabulary in order, all plain numbers,
        packed as float64 at the start of ``into`` (room for ``max_features_per_event`` of
        them): their number; NO_ROW for any other event (the precise path, which validates it
        and names any error). Such an event is a valid mapping: a dict of the known order's
        length, which is within the per-event bound (see ``_in_order``)."""
        if type(features) is not dict or tuple(features) != self._in_order:
            return NO_ROW  # never equal while _in_order is None
        raw = features.values()
        if not PLAIN_NUMBER_TYPES.issuperset(map(type, raw)):
            return NO_ROW
        try:
            struct.pack_into(self._pack_format, into, 0, *raw)
        except (struct.error, OverflowError):  # an int beyond floats: the precise path says so
            return NO_ROW
        return len(raw)

    def _entries(self, mapping: Mapping[Any, Any], grow: bool) -> tuple[list[int], list[float]]:
        lookup = self._positions.get
        positions: list[int] = []
        values: list[float] = []
        new: list[tuple[FeatureName, float]] = []
        for name, raw in mapping.items():
            value = checked_value(name, raw)
            position = lookup(name)
            if position is not None:
                positions.append(position)
                values.append(value)
            elif grow:
                new.append((check_name(name), value))
            elif not is_name(name):
                raise bad_name(name, "str or int")
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
        return positions, values

    def _batch_columns(
        self, names: list[Any], grow: bool
    ) -> tuple[NDArray[np.int64], NDArray[np.bool_] | None] | None:
        columns = _known_columns(self._positions, names)
        return None if columns is None else (columns, None)

    def _remember_order(self, mapping: Mapping[Any, Any], positions: list[int]) -> None:
        """When an event lists exactly the vocabulary in order, later ones like it skip lookups."""
        if self._names and len(positions) == len(mapping) == len(self._names):
            keys = tuple(mapping)
            if keys == tuple(self._names):
                self._in_order = keys
                self._pack_format = packed_format(len(keys))

    def _add(self, name: FeatureName) -> int:
        position = len(self._names) + self.offset
        self._in_order = None
        self._pack_format = NO_PACK_FORMAT
        self._names.append(name)
        self._positions[name] = position
        self._dimension = position + 1
        return position

    def to_state(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "bias": self.bias,
            "max_features": self.max_features,
            "max_features_per_event": self.max_features_per_event,
            "vocabulary": list(self._names),
        }

    @classmethod
    def from_vocabulary(
        cls,
        vocabulary: Sequence[FeatureName],
        *,
        bias: bool,
        max_features: int,
        max_features_per_event: int = DEFAULT_MAX_FEATURES_PER_EVENT,
    ) -> VocabularyEncoder:
        """An encoder that has already learned ``vocabulary`` (used when loading state)."""
        encoder = cls(
            bias=bias, max_features=max_features, max_features_per_event=max_features_per_event
        )
        for name in vocabulary:
            encoder._add(check_name(name))
        if len(encoder._positions) != len(vocabulary):
            raise ValueError("duplicate names in vocabulary")
        return encoder

    def __repr__(self) -> str:
        return (
            f"VocabularyEncoder(bias={self.bias}, max_features={self.max_features}, "
            f"max_features_per_event={self.max_features_per_event}) with {len(self._names)} names"
        )
