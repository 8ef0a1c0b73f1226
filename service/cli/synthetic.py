"""Synthetic labelled streams with a known reference separator, and the demo's malformed events.

A stream is reproducible from its seed: the reference ``u`` (bias first), every feature vector,
every label flip and every malformed record. The margin is enforced by rejection sampling on the
clean labels, so ``u`` separates the clean stream with normalised margin at least ``margin``;
label noise then flips a fraction of labels, which the non-separable bound accounts for.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import orjson

logger = logging.getLogger(__name__)

FEATURE_LOW = -1.0
FEATURE_HIGH = 1.0
BIAS_SCALE = 0.2
"""The reference's bias is drawn from [-BIAS_SCALE, BIAS_SCALE] (features lie in [-1, 1])."""

CHUNK_SIZE = 4_096
MAX_REJECTION_ROUNDS = 10_000

MALFORMED_KINDS = (
    "not_json",
    "not_object",
    "missing_label",
    "missing_features",
    "wrong_dimension",
    "non_numeric",
    "non_finite",
    "boolean_feature",
)


@dataclass(frozen=True)
class SyntheticStream:
    """A binary stream in ``dim`` dimensions labelled by a random reference separator.

    Parameters
    ----------
    dim
        Number of features (the bias is not a feature).
    margin
        Minimum normalised margin ``|u . x~| / ||u||`` of every clean point.
    noise
        Probability of flipping each label after sampling.
    seed
        Seeds the reference, the points, the flips and the malformed records.
    malformed
        Fraction of records that are malformed (for dead-letter demos and tests).
    bias
        Whether ``u`` has a bias coordinate (placed first, like the model's).

    Examples
    --------
    >>> stream = SyntheticStream(dim=3, margin=0.05, noise=0.0, seed=1)
    >>> X, y = stream.arrays(100)
    >>> bool(np.all(y * (stream.augment(X) @ stream.reference) > 0))
    True
    """

    dim: int
    margin: float = 0.1
    noise: float = 0.0
    seed: int = 0
    malformed: float = 0.0
    bias: bool = True
    reference: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.dim < 1:
            raise ValueError(f"dim must be at least 1, got {self.dim}")
        if not 0.0 <= self.noise < 1.0 or not 0.0 <= self.malformed < 1.0:
            raise ValueError("noise and malformed are fractions in [0, 1)")
        if not 0.0 <= self.margin < 1.0:
            raise ValueError(f"margin must be in [0, 1), got {self.margin}")
        rng = np.random.default_rng([self.seed, 0])
        direction = rng.normal(size=self.dim)
        direction /= np.linalg.norm(direction)
        if self.bias:
            reference = np.concatenate(([rng.uniform(-BIAS_SCALE, BIAS_SCALE)], direction))
        else:
            reference = direction
        reference.setflags(write=False)
        object.__setattr__(self, "reference", reference)

    def augment(self, X: np.ndarray) -> np.ndarray:
        """``X`` with the bias column first when the stream has one."""
        if not self.bias:
            return X
        return np.hstack([np.ones((X.shape[0], 1)), X])

    def arrays(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The first ``count`` valid events as ``(X, y)`` (malformed records excluded)."""
        rows, labels = [], []
        for x, y in self._points(count):
            rows.append(x)
            labels.append(y)
        X = np.array(rows, dtype=np.float64).reshape(count, self.dim)
        return X, np.array(labels, dtype=np.float64)

    def records(self, count: int, id_prefix: str = "syn") -> Iterator[tuple[str, bytes]]:
        """``count`` records as ``(event id, JSON value)``; a ``malformed`` share is broken.

        The valid records are exactly ``arrays()``'s events, in the same order.
        """
        rng = np.random.default_rng([self.seed, 2])
        points = self._points(None)
        for index in range(count):
            event_id = f"{id_prefix}-{self.seed}-{index}"
            if self.malformed and rng.random() < self.malformed:
                kind = MALFORMED_KINDS[int(rng.integers(len(MALFORMED_KINDS)))]
                yield event_id, malformed_record(kind, event_id, self.dim)
                continue
            x, y = next(points)
            yield event_id, event_json(event_id, x.tolist(), int(y))

    def _points(self, count: int | None) -> Iterator[tuple[np.ndarray, float]]:
        rng = np.random.default_rng([self.seed, 1])
        norm = float(np.linalg.norm(self.reference))
        produced = 0
        while count is None or produced < count:
            X = self._with_margin(rng, norm)
            clean = np.where(self.augment(X) @ self.reference >= 0.0, 1.0, -1.0)
            flips = rng.random(len(X)) < self.noise
            labels = np.where(flips, -clean, clean)
            for x, y in zip(X, labels, strict=True):
                if count is not None and produced == count:
                    return
                produced += 1
                yield x, float(y)

    def _with_margin(self, rng: np.random.Generator, norm: float) -> np.ndarray:
        for _ in range(MAX_REJECTION_ROUNDS):
            X = rng.uniform(FEATURE_LOW, FEATURE_HIGH, size=(CHUNK_SIZE, self.dim))
            margins = np.abs(self.augment(X) @ self.reference) / norm
            kept: np.ndarray = X[margins >= self.margin]
            if len(kept):
                return kept
        raise ValueError(f"margin {self.margin} is too large for dimension {self.dim}")


def event_json(event_id: str, features: object, label: object) -> bytes:
    """One event value in the wire format."""
    return orjson.dumps({"id": event_id, "features": features, "label": label})


def malformed_record(kind: str, event_id: str, dim: int) -> bytes:
    """A record the consumer must dead-letter; ``kind`` names its defect."""
    good = [0.5] * dim
    if kind == "not_json":
        return b'{"id": "' + event_id.encode() + b'", "features": [0.5,'
    if kind == "not_object":
        return b"[1, 2, 3]"
    if kind == "missing_label":
        return orjson.dumps({"id": event_id, "features": good})
    if kind == "missing_features":
        return orjson.dumps({"id": event_id, "label": 1})
    if kind == "wrong_dimension":
        return event_json(event_id, [*good, 0.5], 1)
    if kind == "non_numeric":
        return event_json(event_id, ["a", *good[1:]], 1)
    if kind == "boolean_feature":
        return event_json(event_id, [True, *good[1:]], 1)
    if kind == "non_finite":
        # orjson refuses NaN, so this one is written by hand, as a careless producer might.
        numbers = ", ".join(["NaN", *map(str, good[1:])])
        return f'{{"id": "{event_id}", "features": [{numbers}], "label": 1}}'.encode()
    raise ValueError(f"unknown malformed kind {kind!r}; one of {', '.join(MALFORMED_KINDS)}")
