"""The wire format's names and limits: fields, reason codes, bounds, and the refusal error."""

from __future__ import annotations

import logging
from operator import attrgetter, itemgetter, methodcaller

from learning.errors import FEATURE_ERROR_CODES

logger = logging.getLogger(__name__)

NOT_UTF8 = "not_utf8"
NOT_JSON = "not_json"
NOT_OBJECT = "not_object"
DUPLICATE_KEY = "duplicate_key"
TOO_DEEP = "too_deep"
MISSING_FEATURES = "missing_features"
MISSING_LABEL = "missing_label"
UNKNOWN_LABEL = "unknown_label"
UNKNOWN_FIELD = "unknown_field"
BAD_ID = "bad_id"
BAD_TS = "bad_ts"
WRONG_TYPE = "wrong_type"

EVENT_REASONS = (
    NOT_UTF8,
    NOT_JSON,
    NOT_OBJECT,
    DUPLICATE_KEY,
    TOO_DEEP,
    MISSING_FEATURES,
    MISSING_LABEL,
    UNKNOWN_LABEL,
    UNKNOWN_FIELD,
    BAD_ID,
    BAD_TS,
)
REASON_CODES: tuple[str, ...] = EVENT_REASONS + tuple(sorted(FEATURE_ERROR_CODES))
"""Every reason code a rejection can carry (stable: dashboards and alerts key on them)."""

FEATURES = "features"
LABEL = "label"
ID = "id"
TS = "ts"
ALLOWED_FIELDS = frozenset({FEATURES, LABEL, ID, TS})
REQUIRED_FIELDS = 2

MAX_ID_LENGTH = 256
MAX_DOUBLE_DIGITS = 309
MAX_NESTING_DEPTH = 32
MAX_MESSAGE_CHARS = 300
MAX_MATRIX_ELEMENTS = 8_000_000
"""Upper bound on rows times dimension of one decoded dense matrix (64 MB of float64), and on
rows times the per-event feature bound of one sparse batch."""

# Marker bytes (see consumers.decoding.scan) that the fixed field names account for per event:
# "features" holds one 'u', "label" two 'l'; "id" and "ts" hold none.
FIXED_FIELD_MARKERS = 3
QUOTES_PER_STRING = 2

_LABEL_TYPES = frozenset({str, int})
_NUMBER_TYPES = frozenset({int, float})
_LIST_TYPE = frozenset({list})
_DICT_TYPE = frozenset({dict})

_get_value = attrgetter("value")
_get_offset = attrgetter("offset")
_get_partition_key = attrgetter("topic", "partition")
_get_features = itemgetter(FEATURES)
_get_label = itemgetter(LABEL)
_MISSING = object()
_get_id = methodcaller("get", ID, _MISSING)
_get_ts = methodcaller("get", TS, _MISSING)


class InvalidEventError(Exception):
    """Raised by the precise path: the record is refused for ``reason`` (a reason code)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 3] + "..."
