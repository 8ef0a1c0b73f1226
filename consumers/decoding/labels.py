"""Event labels to encoded targets (±1 or class indices), for the bulk and the precise paths."""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from consumers.decoding.wire import _LABEL_TYPES, UNKNOWN_LABEL, InvalidEventError, _clip
from learning.labels import ClassIndex, LabelMap

logger = logging.getLogger(__name__)


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
    grow
        Adds a new label to the model and returns its target (a multiclass model whose classes
        are discovered as they appear); ``None``: the labels are fixed.

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
        grow: Callable[[Hashable], int] | None = None,
    ) -> None:
        self._table = dict(table)
        self._dtype = dtype
        self._booleans = dict(booleans or {})
        self._expected = expected or f"one of {sorted(map(str, self._table))}"
        self._grow = grow

    @classmethod
    def binary(cls, label_map: LabelMap) -> LabelLookup:
        """The lookup of a binary model: labels → ±1.0."""
        return cls._build(
            [(label_map.positive, 1.0), (label_map.negative, -1.0)],
            np.float64,
            f"{label_map.positive!r} (+1) or {label_map.negative!r} (-1)",
        )

    @classmethod
    def multiclass(
        cls,
        classes: ClassIndex | Sequence[Hashable],
        grow: Callable[[Hashable], int] | None = None,
    ) -> LabelLookup:
        """The lookup of a multiclass model: class label → class index (``grow``: adds a class
        the model has not seen, see :class:`LabelLookup`)."""
        labels = classes.labels if isinstance(classes, ClassIndex) else tuple(classes)
        lookup = cls._build(
            [(label, index) for index, label in enumerate(labels)],
            np.int64,
            f"one of the classes {list(labels)}",
        )
        lookup._grow = grow
        return lookup

    @classmethod
    def _build(
        cls,
        pairs: Iterable[tuple[Hashable, float | int]],
        dtype: type[np.float64] | type[np.int64],
        expected: str,
    ) -> LabelLookup:
        lookup = cls({}, dtype, expected=expected)
        pairs = list(pairs)
        for label, target in pairs:
            lookup._add(label, target)
        for label, target in pairs:
            alias = _integer_alias(label)
            if alias is not None:
                lookup._table.setdefault(alias, target)
        return lookup

    def _add(self, label: Hashable, target: float | int) -> None:
        if type(label) is bool:
            self._booleans[label] = target
        else:
            self._table[label] = target

    def __len__(self) -> int:
        """Labels known, aliases included: it grows exactly when a label is added."""
        return len(self._table) + len(self._booleans)

    @property
    def dtype(self) -> type[np.float64] | type[np.int64]:
        """dtype of encoded targets."""
        return self._dtype

    def pairs(self) -> list[tuple[object, float | int]]:
        """(label, target) for every non-boolean label, aliases included."""
        return list(self._table.items())

    def find(self, label: object) -> float | int | None:
        """The target of one label; ``None`` for a new label that :meth:`add` will take;
        else :class:`InvalidEventError` (``unknown_label``)."""
        kind = type(label)
        found: float | int | None = None
        if isinstance(label, bool):
            found = self._booleans.get(label)
        elif kind in _LABEL_TYPES:
            found = self._table.get(label)
        if found is None and not (self._grow is not None and kind in _LABEL_TYPES | {bool}):
            shown = _clip(repr(label))
            raise InvalidEventError(UNKNOWN_LABEL, f"label {shown} is not {self._expected}")
        return found

    def add(self, label: object) -> float | int:
        """Adds a label :meth:`find` called new to the model; its target."""
        if self._grow is None:
            raise TypeError("this label lookup is fixed")
        target = self._grow(label)
        self._add(label, target)
        alias = _integer_alias(label)
        if alias is not None:
            self._table.setdefault(alias, target)
        return target

    def encode(self, label: object) -> float | int:
        """The target of one label, adding a new one when the lookup grows, or
        :class:`InvalidEventError` (``unknown_label``)."""
        found = self.find(label)
        return self.add(label) if found is None else found

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
