"""Errors raised by the learning core.

Every error carries a stable machine-readable ``code`` next to its human-readable message, so
callers (the consumer's dead-letter queue, the HTTP layer) can count and route them without
parsing text.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

FEATURE_ERROR_CODES = frozenset(
    {
        "wrong_dimension",
        "wrong_type",
        "non_numeric",
        "boolean_feature",
        "non_finite",
        "too_large",
        "empty_features",
        "unknown_feature",
        "too_many_features",
        "bad_feature_name",
    }
)
"""Stable codes carried by :class:`FeatureError`."""


class FeatureError(ValueError):
    """An event's features cannot be encoded.

    Parameters
    ----------
    code
        One of :data:`FEATURE_ERROR_CODES`.
    message
        What is wrong, for a person.
    index
        Position of the offending row when the error comes from a batch, else ``None``.

    Examples
    --------
    >>> error = FeatureError("non_finite", "feature 'a' is nan")
    >>> error.code, str(error)
    ('non_finite', "non_finite: feature 'a' is nan")
    """

    def __init__(self, code: str, message: str, *, index: int | None = None) -> None:
        if code not in FEATURE_ERROR_CODES:
            raise ValueError(f"unknown feature error code {code!r}")
        where = f" (row {index})" if index is not None else ""
        super().__init__(f"{code}: {message}{where}")
        self.code = code
        self.message = message
        self.index = index

    def at_index(self, index: int) -> FeatureError:
        """Return the same error located at row ``index`` of a batch."""
        return FeatureError(self.code, self.message, index=index)


class LabelError(ValueError):
    """A label is not known to the model (code ``unknown_label``).

    Examples
    --------
    >>> LabelError("maybe", "labels are True, False").code
    'unknown_label'
    """

    code = "unknown_label"

    def __init__(self, label: object, message: str, *, index: int | None = None) -> None:
        where = f" (row {index})" if index is not None else ""
        super().__init__(f"unknown_label: {label!r}: {message}{where}")
        self.label = label
        self.message = message
        self.index = index


class StateError(ValueError):
    """Saved state cannot be loaded: wrong format, version, checksum, shape or content."""
