"""The dense encoder: a fixed number of numbers per event, as a sequence or a 1-D array."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from learning.encoders._common import (
    PLAIN_NUMBER_TYPES,
    EncoderBase,
    FeatureName,
    check_values,
    numeric_value,
)
from learning.errors import FeatureError

logger = logging.getLogger(__name__)


class DenseEncoder(EncoderBase):
    """A fixed number of numeric features given as a sequence or 1-D array.

    Dense events stay dense (``sparse`` is False): every coordinate is present in every event.

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
        check_values(values)
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
        elif set(map(type, features)) <= PLAIN_NUMBER_TYPES:
            try:
                values = np.array(features, dtype=np.float64)
            except OverflowError:
                values = np.array([numeric_value(i, v) for i, v in enumerate(features)])
        else:
            values = np.array([numeric_value(i, v) for i, v in enumerate(features)])
        check_values(values[None, :])
        return values

    def to_state(self) -> dict[str, Any]:
        return {"kind": self.kind, "n_features": self.n_features, "bias": self.bias}

    def __repr__(self) -> str:
        return f"DenseEncoder({self.n_features}, bias={self.bias})"
