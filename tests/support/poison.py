"""Poison records: every way an event can be wrong, each with the reason code it must get.

The catalogue targets a dense binary model of :data:`POISON_DIM` features with the default label
map (``"1"`` → +1, ``"-1"`` → -1). Every kind is a record value (or ``None`` for a tombstone) and
the reason code the consumer must put in the dead-letter header ``novikoff.reason``.
"""

from __future__ import annotations

from dataclasses import dataclass

POISON_DIM = 4
GOOD_FEATURES = b"[0.1, 0.2, 0.3, 0.4]"
NESTING_LEVELS = 100_000
"""Far deeper than any recursive JSON parser can go: a naive decoder would overflow its stack."""
NEAR_LIMIT_BYTES = 1_000_000
"""Just under Kafka's default ``message.max.bytes`` (1,048,588) and kafka-python's default
``max_request_size`` (1,048,576): the largest record a default cluster accepts."""
NEAR_LIMIT_FEATURE = b"0.125"


@dataclass(frozen=True)
class PoisonKind:
    """One way of being wrong: a record value and the reason code it must be dead-lettered with."""

    name: str
    value: bytes | None
    reason: str


def _event(body: bytes) -> bytes:
    return b"{" + body + b"}"


def _features(features: bytes, rest: bytes = b', "label": 1') -> bytes:
    return _event(b'"features": ' + features + rest)


def _near_limit_features() -> bytes:
    """A ~1 MB event whose features array is far too long (so it must be refused)."""
    count = NEAR_LIMIT_BYTES // (len(NEAR_LIMIT_FEATURE) + 1)
    return _features(b"[" + b",".join([NEAR_LIMIT_FEATURE] * count) + b"]")


def poison_catalogue() -> tuple[PoisonKind, ...]:
    """Every poison kind the reliability tests mix into a valid stream."""
    deep = b"[" * NESTING_LEVELS + b"]" * NESTING_LEVELS
    return (
        PoisonKind(
            "not_utf8", _features(GOOD_FEATURES, b', "label": 1, "id": "\xff\xfe"'), "not_utf8"
        ),
        PoisonKind("not_json", b'{"features": [0.1, 0.2,', "not_json"),
        PoisonKind("trailing_garbage", _features(GOOD_FEATURES) + b" x", "not_json"),
        PoisonKind("tombstone", None, "not_json"),
        PoisonKind("json_array", b"[0.1, 0.2, 0.3, 0.4]", "not_object"),
        PoisonKind("json_string", b'"features"', "not_object"),
        PoisonKind("json_number", b"42", "not_object"),
        PoisonKind("json_null", b"null", "not_object"),
        PoisonKind("missing_features", _event(b'"label": 1'), "missing_features"),
        PoisonKind("missing_label", _event(b'"features": ' + GOOD_FEATURES), "missing_label"),
        PoisonKind(
            "label_outside_map", _features(GOOD_FEATURES, b', "label": "maybe"'), "unknown_label"
        ),
        PoisonKind(
            "label_integer_outside_map", _features(GOOD_FEATURES, b', "label": 2'), "unknown_label"
        ),
        PoisonKind("label_null", _features(GOOD_FEATURES, b', "label": null'), "unknown_label"),
        PoisonKind("too_few_features", _features(b"[0.1, 0.2, 0.3]"), "wrong_dimension"),
        PoisonKind("too_many_features", _features(b"[0.1, 0.2, 0.3, 0.4, 0.5]"), "wrong_dimension"),
        PoisonKind("non_numeric_feature", _features(b'["a", 0.2, 0.3, 0.4]'), "non_numeric"),
        PoisonKind("numeric_string_feature", _features(b'["0.1", 0.2, 0.3, 0.4]'), "non_numeric"),
        PoisonKind("boolean_feature", _features(b"[true, 0.2, 0.3, 0.4]"), "boolean_feature"),
        PoisonKind("nan", _features(b"[0.1, NaN, 0.3, 0.4]"), "non_finite"),
        PoisonKind("infinity", _features(b"[0.1, 0.2, Infinity, 0.4]"), "non_finite"),
        PoisonKind("minus_infinity", _features(b"[0.1, 0.2, 0.3, -Infinity]"), "non_finite"),
        PoisonKind("overflow_1e999", _features(b"[1e999, 0.2, 0.3, 0.4]"), "non_finite"),
        PoisonKind("beyond_1e100", _features(b"[1e101, 0.2, 0.3, 0.4]"), "too_large"),
        PoisonKind("empty_features", _features(b"[]"), "empty_features"),
        PoisonKind("features_object_for_dense", _features(b'{"a": 1}'), "wrong_type"),
        PoisonKind("near_size_limit", _near_limit_features(), "wrong_dimension"),
        PoisonKind("deeply_nested", _features(deep), "too_deep"),
        PoisonKind(
            "duplicate_key", _features(GOOD_FEATURES, b', "label": 1, "label": -1'), "duplicate_key"
        ),
        PoisonKind(
            "unknown_extra_field",
            _features(GOOD_FEATURES, b', "label": 1, "lable": 1'),
            "unknown_field",
        ),
        PoisonKind("id_not_string", _features(GOOD_FEATURES, b', "label": 1, "id": 7'), "bad_id"),
        PoisonKind(
            "bad_timestamp", _features(GOOD_FEATURES, b', "label": 1, "ts": "noon"'), "bad_ts"
        ),
    )
