"""From settings to learning objects: encoder, label map, learner, bound references.

The service and ``novikoff fit`` build their learners here, so both learn with the same
hyperparameters and produce bit-identical weights on the same events.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from pathlib import Path

import numpy as np
import orjson

from learning import (
    BoundTracker,
    DenseEncoder,
    HashingEncoder,
    LabelMap,
    MulticlassPerceptron,
    Perceptron,
    Reference,
    SchemaEncoder,
    VocabularyEncoder,
)
from learning.encoders import Encoder
from service.settings import BoundSettings, ModelSettings, ReferenceSettings, Settings

logger = logging.getLogger(__name__)

MAX_REFERENCE_FILE_BYTES = 16 * 1024 * 1024
BOOLEAN_LABELS = {"true": True, "false": False}

Learner = Perceptron | MulticlassPerceptron


class ReferenceError(ValueError):
    """A reference separator cannot be loaded; the message names the file and the fix."""


def build_encoder(model: ModelSettings) -> Encoder:
    """The encoder named by ``model.encoding``."""
    limit = model.max_features_per_event
    if model.encoding == "schema":
        return SchemaEncoder(
            list(model.feature_names), bias=model.bias, max_features_per_event=limit
        )
    if model.encoding == "hashing":
        return HashingEncoder(
            model.hashing_bits, bias=model.bias, hash=model.hashing, max_features_per_event=limit
        )
    if model.encoding == "vocabulary":
        return VocabularyEncoder(
            bias=model.bias, max_features=model.vocabulary_size, max_features_per_event=limit
        )
    return DenseEncoder(model.dim, bias=model.bias)


def event_label(text: str) -> Hashable:
    """The event label a label-map key stands for.

    TOML keys are strings. ``"true"`` and ``"false"`` stand for the JSON booleans; every other
    key is the label itself (the consumer's decoder also matches an integer key such as ``"-1"``
    with the JSON number ``-1``).

    Examples
    --------
    >>> event_label("true"), event_label("-1"), event_label("edible")
    (True, '-1', 'edible')
    """
    return BOOLEAN_LABELS.get(text, text)


def build_label_map(labels: Mapping[str, int]) -> LabelMap:
    """The binary label map of the settings (see :func:`event_label`)."""
    return LabelMap({event_label(key): sign for key, sign in labels.items()})


def build_learner(model: ModelSettings) -> Learner:
    """A fresh learner with the settings' hyperparameters."""
    encoder = build_encoder(model)
    if model.variant == "multiclass":
        return MulticlassPerceptron(
            classes=list(model.classes) or None,
            encoder=encoder,
            predictor=model.predictor,
            max_voters=model.max_voters,
            prequential_voted=model.prequential_voted,
            seed=model.seed,
        )
    return Perceptron(
        label_map=build_label_map(model.labels),
        encoder=encoder,
        predictor=model.predictor,
        max_voters=model.max_voters,
        prequential_voted=model.prequential_voted,
    )


def build_tracker(settings: Settings, dimension: int) -> BoundTracker:
    """The bound tracker with every configured reference loaded and checked.

    Raises
    ------
    ReferenceError
        When a reference cannot be loaded (see :func:`reference_weights`).
    """
    multiclass = settings.model.variant == "multiclass"
    rows = len(settings.model.classes) if multiclass else None
    references = [
        Reference(ref.name, reference_weights(ref, settings.bound, dimension, rows))
        for ref in settings.bound.references
    ]
    grid = None if settings.bound.gamma_grid is None else list(settings.bound.gamma_grid)
    return BoundTracker(
        references,
        gamma_grid=grid,
        multiclass=multiclass,
        margin_window=settings.bound.margin_window,
    )


def reference_weights(
    reference: ReferenceSettings, bound: BoundSettings, dimension: int, rows: int | None = None
) -> np.ndarray:
    """The weights of a reference, inline or read from a file inside ``bound.reference_dir``.

    Parameters
    ----------
    reference, bound
        The reference's settings and the bound section (for ``reference_dir``).
    dimension
        The model's number of coordinates, bias included.
    rows
        Multiclass: the number of classes (0 when discovered); None for a binary model.

    Raises
    ------
    ReferenceError
        When the file escapes the directory, cannot be read, does not hold finite numbers of the
        model's shape, or holds only zeros.
    """
    if reference.weights is not None:
        values: object = [list(w) if isinstance(w, tuple) else w for w in reference.weights]
    else:
        assert reference.path is not None  # the settings guarantee one of the two
        values = _read_reference_file(bound.reference_dir, reference.path, reference.name)
    try:
        weights = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        weights = np.empty(0)
    if weights.dtype != np.float64 or _has_non_numbers(values):
        raise ReferenceError(f"reference {reference.name!r}: weights must be numbers")
    expected: tuple[int, ...] = (
        (dimension,) if rows is None else (rows or weights.shape[0], dimension)
    )
    if weights.shape != expected:
        shape = "a vector" if rows is None else "a matrix (one row per class)"
        raise ReferenceError(
            f"reference {reference.name!r} has shape {weights.shape}; the model needs {shape} "
            f"of shape {expected} (bias first when model.bias is true)"
        )
    if not np.isfinite(weights).all() or not weights.any():
        raise ReferenceError(f"reference {reference.name!r}: weights must be finite and not all 0")
    return weights


def _has_non_numbers(values: object) -> bool:
    if isinstance(values, list):
        return any(_has_non_numbers(value) for value in values)
    return isinstance(values, bool) or not isinstance(values, int | float)


def _read_reference_file(directory: Path, relative: Path, name: str) -> object:
    root = directory.resolve()
    path = (root / relative).resolve()
    if not path.is_relative_to(root):
        raise ReferenceError(
            f"reference {name!r}: {relative} resolves outside bound.reference_dir ({root})"
        )
    try:
        size = path.stat().st_size
        if size > MAX_REFERENCE_FILE_BYTES:
            raise ReferenceError(f"reference {name!r}: {path} is larger than 16 MiB")
        return orjson.loads(path.read_bytes())
    except OSError as exc:
        raise ReferenceError(f"reference {name!r}: cannot read {path}: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise ReferenceError(f"reference {name!r}: {path} is not JSON: {exc}") from None
