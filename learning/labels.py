"""Label maps: from user labels to the numeric codes the kernels work with.

Binary learners work on y ∈ {-1, +1}; a :class:`LabelMap` says which user label is +1.
Multiclass learners work on class indices; :class:`ClassIndex` keeps the labels in index order,
either declared up front or discovered in order of first appearance.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from learning.errors import LabelError

logger = logging.getLogger(__name__)


def _plain(label: Hashable) -> Hashable:
    """Numpy scalars become Python scalars so labels compare, hash and serialise alike."""
    if isinstance(label, np.generic):
        plain: Hashable = label.item()
        return plain
    return label


class LabelMap:
    """A bijection between two user labels and the signs +1 / -1.

    Parameters
    ----------
    mapping
        Exactly two labels, one mapped to ``1`` and the other to ``-1``.

    Examples
    --------
    >>> labels = LabelMap({"poisonous": 1, "edible": -1})
    >>> labels.encode("edible"), labels.decode(1.0), labels.decode(0.0)
    (-1.0, 'poisonous', 'poisonous')
    """

    def __init__(self, mapping: Mapping[Hashable, int]) -> None:
        signs = sorted(int(sign) for sign in mapping.values())
        if len(mapping) != 2 or signs != [-1, 1]:
            raise ValueError(f"a LabelMap needs one label mapped to 1 and one to -1, got {mapping}")
        plain = {_plain(label): float(sign) for label, sign in mapping.items()}
        self._to_sign = plain
        self._positive = next(label for label, sign in plain.items() if sign > 0)
        self._negative = next(label for label, sign in plain.items() if sign < 0)

    @classmethod
    def boolean(cls) -> LabelMap:
        """``True`` → +1, ``False`` → -1 (river's convention for binary targets)."""
        return cls({True: 1, False: -1})

    @property
    def positive(self) -> Hashable:
        """The label predicted when w·x̃ ≥ 0."""
        return self._positive

    @property
    def negative(self) -> Hashable:
        """The label predicted when w·x̃ < 0."""
        return self._negative

    @property
    def labels(self) -> tuple[Hashable, Hashable]:
        """``(positive, negative)``."""
        return (self._positive, self._negative)

    def encode(self, label: Hashable, *, index: int | None = None) -> float:
        """The sign of ``label``; :class:`LabelError` if it is neither label."""
        try:
            return self._to_sign[label]
        except (KeyError, TypeError):
            raise LabelError(
                label, f"expected {self._positive!r} or {self._negative!r}", index=index
            ) from None

    def encode_many(self, labels: Iterable[Hashable]) -> NDArray[np.float64]:
        """Signs of many labels as a float64 array."""
        return np.array(
            [self.encode(label, index=i) for i, label in enumerate(labels)], dtype=np.float64
        )

    def decode(self, sign: float) -> Hashable:
        """The label for a sign or score, with sign(0) = +1."""
        return self._positive if sign >= 0 else self._negative

    def to_state(self) -> dict[str, Any]:
        """Plain data for :func:`learning.dump_state`."""
        return {"positive": self._positive, "negative": self._negative}

    @classmethod
    def from_state(cls, meta: Mapping[str, Any]) -> LabelMap:
        """Inverse of :meth:`to_state`."""
        return cls({meta["positive"]: 1, meta["negative"]: -1})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LabelMap) and self.labels == other.labels

    def __hash__(self) -> int:
        return hash(self.labels)

    def __repr__(self) -> str:
        return f"LabelMap({{{self._positive!r}: 1, {self._negative!r}: -1}})"


class ClassIndex:
    """Class labels in index order, declared up front or discovered as they appear.

    Parameters
    ----------
    classes
        The classes, in index order. ``None`` starts empty and adds each new label when asked to
        grow; a declared list never grows.

    Examples
    --------
    >>> index = ClassIndex()
    >>> index.encode_many(["b", "a", "b"], grow=True).tolist(), index.labels
    ([0, 1, 0], ('b', 'a'))
    """

    def __init__(self, classes: Sequence[Hashable] | None = None) -> None:
        self._declared = classes is not None
        self._labels: list[Hashable] = []
        self._positions: dict[Hashable, int] = {}
        for label in classes or ():
            self._add(_plain(label))
        if classes is not None and len(self._labels) != len(classes):
            raise ValueError(f"declared classes contain duplicates: {list(classes)}")

    @property
    def declared(self) -> bool:
        """Whether the classes were declared up front (then they never grow)."""
        return self._declared

    @property
    def labels(self) -> tuple[Hashable, ...]:
        """Labels in index order."""
        return tuple(self._labels)

    def __len__(self) -> int:
        return len(self._labels)

    def _add(self, label: Hashable) -> int:
        position = len(self._labels)
        self._labels.append(label)
        self._positions[label] = position
        return position

    def encode(self, label: Hashable, *, grow: bool = False, index: int | None = None) -> int:
        """Index of ``label``; adds it when ``grow`` and the classes were not declared."""
        label = _plain(label)
        try:
            return self._positions[label]
        except TypeError:
            raise LabelError(label, "labels must be hashable", index=index) from None
        except KeyError:
            if grow and not self._declared:
                logger.info("new class %r gets index %d", label, len(self._labels))
                return self._add(label)
            known = "declared" if self._declared else "seen so far"
            raise LabelError(label, f"classes {known} are {self._labels}", index=index) from None

    def encode_many(self, labels: Iterable[Hashable], *, grow: bool = False) -> NDArray[np.int64]:
        """Indices of many labels as an int64 array (validated before anything is added)."""
        labels = list(labels)
        if not grow or self._declared:
            return np.array(
                [self.encode(label, index=i) for i, label in enumerate(labels)], dtype=np.int64
            )
        for i, label in enumerate(labels):
            try:
                hash(label)
            except TypeError:
                raise LabelError(label, "labels must be hashable", index=i) from None
        return np.array([self.encode(label, grow=True) for label in labels], dtype=np.int64)

    def decode(self, position: int) -> Hashable:
        """The label at ``position``."""
        return self._labels[position]

    def to_state(self) -> dict[str, Any]:
        """Plain data for :func:`learning.dump_state`."""
        return {"declared": self._declared, "labels": list(self._labels)}

    @classmethod
    def from_state(cls, meta: Mapping[str, Any]) -> ClassIndex:
        """Inverse of :meth:`to_state`."""
        labels = list(meta["labels"])
        if meta["declared"]:
            return cls(labels)
        index = cls()
        for label in labels:
            index._add(label)
        return index

    def __repr__(self) -> str:
        return f"ClassIndex({self._labels!r}, declared={self._declared})"
