"""``POST /predict`` without a framework in the way: bytes in, bytes out.

The request body is parsed by orjson and checked by hand (no pydantic on the hot path); features
go through the consumer's :func:`~consumers.decoding.events.validate_features` (dense) or
:func:`~consumers.decoding.events.validate_sparse_features` and the encoder's
``encode_sparse_batch`` (object-valued features, which become a :class:`~learning.sparse.CSRBatch`
as in the consumer, never a dense row), so HTTP refuses exactly what the consumer refuses, with the
same codes, the per-event feature bound (``too_many_features``) included. A batch of dense instances
is first read by a compiled reader straight into the feature matrix (:mod:`service.http._fastbody`,
exact or silent); otherwise it is parsed by orjson, checked and converted in bulk, and only when the
bulk check fails are rows inspected one by one to say which ones are wrong. Predictions read one
immutable model snapshot per request.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import orjson
from numpy.typing import NDArray

from consumers.decoding.events import (
    DUPLICATE_KEY,
    MAX_NESTING_DEPTH,
    NOT_JSON,
    NOT_UTF8,
    InvalidEventError,
    Matrix,
    duplicate_key,
    nesting_depth,
    parse_event_json,
    stack_rows,
    validate_features,
    validate_sparse_features,
)
from consumers.decoding.scan import count_markers
from learning import PREDICTORS, DenseEncoder, FeatureError, Predictor
from learning.encoders import MAX_ABS_FEATURE, Encoder, as_sparse
from service.http._fastbody import DenseInstances, parse_dense_instances
from service.http.problems import FieldError, Problem

logger = logging.getLogger(__name__)

REQUEST_FIELDS = frozenset({"features", "instances", "predictor"})
INSTANCE_FIELDS = frozenset({"features"})
NUMBER_TYPES = frozenset({int, float})
BATCH_KEY = b'"instances"'
MARKER_CHARACTERS = ("u", "l")
MAX_REPORTED_ERRORS = 10
MAX_LISTED_CHARACTERS = 200
"""Longest list of unknown field names quoted in an error message."""
MAX_SHOWN_CHARACTERS = 60
"""Longest rendering of a refused value quoted in an error message."""
ELLIPSIS = "..."
SYNTAX_REASONS = frozenset({NOT_JSON, NOT_UTF8})
"""Consumer reason codes that mean the bytes are not JSON at all: HTTP 400, not 422."""
JSON_MEDIA_TYPES = ("application/json",)
JSON_SUFFIX = "+json"


@dataclass(frozen=True)
class PredictLimits:
    """The request limits of ``POST /predict`` (the features per instance are bounded by the
    encoder's ``max_features_per_event``, as in the consumer)."""

    max_body_bytes: int
    max_batch_size: int


@dataclass(frozen=True)
class PredictRequest:
    """A valid request body: the instances' x̃ (CSR for object-valued encoders), the predictor
    and whether the body was a batch (``instances``) or one instance (``features``)."""

    X: Matrix
    predictor: str
    batch: bool


def is_json_media_type(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` header names JSON (parameters such as charset are ignored)."""
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media in JSON_MEDIA_TYPES or (
        media.startswith("application/") and media.endswith(JSON_SUFFIX)
    )


class PredictHandler:
    """Answers a ``POST /predict`` body with the JSON bytes of the predictions.

    Parameters
    ----------
    snapshot
        Returns the current immutable predictor; called once per request.
    encoder
        The model's feature encoder (never grown here).
    limits
        Batch size and feature count limits (the body size is enforced by the caller).
    default_predictor
        The predictor used when a request names none.
    """

    def __init__(
        self,
        snapshot: Callable[[], Predictor],
        encoder: Encoder,
        limits: PredictLimits,
        default_predictor: str,
    ) -> None:
        self._snapshot = snapshot
        self._encoder = encoder
        self._limits = limits
        self._default_predictor = default_predictor
        self._dense_width = encoder.n_features if isinstance(encoder, DenseEncoder) else None
        self._sparse = as_sparse(encoder)

    @property
    def limits(self) -> PredictLimits:
        """The limits this handler enforces."""
        return self._limits

    def respond(self, body: bytes) -> bytes:
        """The response body for a request body.

        Raises
        ------
        Problem
            400 for a body that is not JSON, 422 for one that is not a valid request.
        """
        request = self.read(body)
        if request.batch:
            return self._batch_response(request.X, request.predictor)
        predictor = self._snapshot()
        labels, scores = _predict(predictor, request.X, request.predictor, batch=False)
        return orjson.dumps(
            {
                "label": labels[0],
                "score": scores[0],
                "model_version": predictor.version,
                "predictor": request.predictor,
            }
        )

    def read(self, body: bytes) -> PredictRequest:
        """The request a body makes, validated and encoded (no prediction yet).

        Raises
        ------
        Problem
            400 for a body that is not JSON, 422 for one that is not a valid request.
        """
        fast = self._read_dense_batch(body)
        if fast is not None:
            named: dict[str, Any] = {} if fast.predictor is None else {"predictor": fast.predictor}
            return PredictRequest(fast.X, self._predictor_name(named), batch=True)
        request = _parse(body)
        predictor_name = self._predictor_name(request)
        if "features" in request:
            X = self._encode_one(request["features"], "/features")
            return PredictRequest(X, predictor_name, batch=False)
        X = self._encode_instances(request["instances"], body, request.get("predictor"))
        return PredictRequest(X, predictor_name, batch=True)

    def _read_dense_batch(self, body: bytes) -> DenseInstances | None:
        """The batch of a dense model read by the compiled reader, or None (general path)."""
        # A substring search costs far less than a compiled call that would give up anyway.
        if self._dense_width is None or BATCH_KEY not in body:
            return None
        return parse_dense_instances(
            body,
            n_features=self._dense_width,
            bias=self._encoder.bias,
            max_abs=MAX_ABS_FEATURE,
            max_instances=self._limits.max_batch_size,
        )

    def _batch_response(self, X: Matrix, predictor_name: str) -> bytes:
        predictor = self._snapshot()
        labels, scores = _predict(predictor, X, predictor_name, batch=True)
        predictions = [
            {"label": label, "score": score} for label, score in zip(labels, scores, strict=True)
        ]
        return orjson.dumps(
            {
                "predictions": predictions,
                "model_version": predictor.version,
                "predictor": predictor_name,
            }
        )

    def _predictor_name(self, request: Mapping[str, Any]) -> str:
        name = request.get("predictor", self._default_predictor)
        if name not in PREDICTORS or type(name) is not str:
            raise _invalid(
                "/predictor",
                "unknown_predictor",
                f"predictor must be one of {', '.join(PREDICTORS)}, got {_show(name)}",
            )
        return str(name)

    # -- features -----------------------------------------------------------------------------

    def _encode_one(self, features: object, pointer: str) -> Matrix:
        """x̃ of one instance as a (1, dimension) matrix (one CSR row when object-valued)."""
        if self._sparse is not None:
            try:
                return validate_sparse_features(features, self._sparse)
            except FeatureError as exc:
                raise _invalid(pointer, exc.code, exc.message) from None
        width = self._dense_width
        if (
            width is not None
            and type(features) is list
            and len(features) == width
            and set(map(type, features)) <= NUMBER_TYPES
            # A finite sum means no value is NaN or infinite (they would propagate).
            and math.isfinite(sum(features))
            and min(features) >= -MAX_ABS_FEATURE
            and max(features) <= MAX_ABS_FEATURE
        ):
            row = [1.0, *features] if self._encoder.bias else features
            return np.array([row], dtype=np.float64)
        try:
            vector = validate_features(features, self._encoder)
        except FeatureError as exc:
            raise _invalid(pointer, exc.code, exc.message) from None
        return vector.reshape(1, -1)

    def _encode_instances(self, instances: object, body: bytes, predictor: object) -> Matrix:
        if type(instances) is not list:
            raise _invalid(
                "/instances", "wrong_type", f"instances must be an array, got {_kind(instances)}"
            )
        count = len(instances)
        if count == 0:
            raise _invalid("/instances", "empty_batch", "instances must hold at least one instance")
        if count > self._limits.max_batch_size:
            raise _invalid(
                "/instances",
                "batch_too_large",
                f"{count} instances; the limit is {self._limits.max_batch_size} per request",
            )
        rows = _features_of(instances)
        if rows is not None and self._sparse is not None:
            try:
                return self._sparse.encode_sparse_batch(rows)
            except FeatureError:
                pass  # the row path says which instances are wrong
        width = self._dense_width
        if (
            rows is not None
            and width is not None
            and set(map(type, rows)) == {list}
            and set(map(len, rows)) == {width}
            and only_numbers_in_features(body, len(rows), predictor)
        ):
            X = self._dense_matrix(chain.from_iterable(rows), len(rows), width)
            if X is not None:
                return X
        return self._encode_rows(instances)

    def _dense_matrix(
        self, numbers: Iterable[Any], count: int, width: int
    ) -> NDArray[np.float64] | None:
        """x̃ of ``count`` rows of ``width`` plain numbers; None if a number is out of range.

        The caller has established that ``numbers`` holds ints and floats only (no booleans).
        The range is the encoders' (finite, within ``MAX_ABS_FEATURE``), so this path accepts
        exactly what :func:`~consumers.decoding.events.validate_features` accepts.
        """
        try:
            flat = np.fromiter(numbers, np.float64, count * width)
        except (OverflowError, TypeError, ValueError):
            return None
        if not (np.abs(flat) <= MAX_ABS_FEATURE).all():
            return None
        values = flat.reshape(count, width)
        if not self._encoder.bias:
            return values
        X = np.empty((count, width + 1), dtype=np.float64)
        X[:, 0] = 1.0
        X[:, 1:] = values
        return X

    def _encode_rows(self, instances: list[Any]) -> Matrix:
        """One row at a time, collecting what is wrong with each bad instance."""
        rows: list[Matrix] = []
        errors: list[FieldError] = []
        for index, instance in enumerate(instances):
            pointer = f"/instances/{index}"
            error = _instance_error(instance, pointer)
            if error is None:
                try:
                    rows.append(self._encode_features(instance["features"]))
                    continue
                except FeatureError as exc:
                    error = FieldError(pointer + "/features", exc.code, exc.message)
            errors.append(error)
            if len(errors) == MAX_REPORTED_ERRORS:
                break
        if errors:
            raise _invalid_many(errors)
        return stack_rows(rows, self._encoder.dimension)

    def _encode_features(self, features: object) -> Matrix:
        """One instance's x̃ as one row, or the encoder's :class:`FeatureError`."""
        if self._sparse is not None:
            return validate_sparse_features(features, self._sparse)
        return validate_features(features, self._encoder).reshape(1, -1)


def only_numbers_in_features(body: bytes, instances: int, predictor: object) -> bool:
    """Whether a parsed batch body holds no string, boolean or null besides its own keys.

    Called once the body has parsed as ``{"instances": [{"features": [...]}, ...]}`` with an
    optional string ``predictor``. JSON numbers never contain ``"``, ``u``, ``l`` or ``\\``, while
    every string carries two quotes, ``true`` and ``null`` a ``u``, ``false`` and ``null`` an
    ``l``, and every escape a backslash. So when the body holds exactly the markers of its keys
    (``"instances"``, one ``"features"`` per instance, ``"predictor"`` and its value) the feature
    arrays hold nothing but numbers. Counting four bytes over the raw body is several times
    cheaper than checking the type of every decoded number.

    Examples
    --------
    >>> only_numbers_in_features(b'{"instances": [{"features": [1, 2.5]}]}', 1, None)
    True
    >>> only_numbers_in_features(b'{"instances": [{"features": [1, true]}]}', 1, None)
    False
    """
    found = count_markers([body])
    # "instances": 2 quotes; each "features": 2 quotes and one "u".
    expected = 2 + 3 * instances
    if isinstance(predictor, str):
        expected += 4 + sum(predictor.count(marker) for marker in MARKER_CHARACTERS)
    return found == expected


def may_nest_too_deep(body: bytes) -> bool:
    """Whether ``body`` holds enough opening brackets to nest deeper than the consumer accepts.

    Every level of nesting opens with ``[`` or ``{``, so a body with at most
    ``MAX_NESTING_DEPTH`` of them (counted anywhere, strings included) cannot be too deep; two
    byte counts cost far less than the compiled scan that gives the exact depth.

    Examples
    --------
    >>> may_nest_too_deep(b'{"features": [1, 2]}')
    False
    >>> may_nest_too_deep(b"[" * 40 + b"]" * 40)
    True
    """
    return body.count(b"[") + body.count(b"{") > MAX_NESTING_DEPTH


def may_repeat_a_key(body: bytes, parsed: object) -> bool:
    """Whether ``body``, which parsed as ``parsed``, may hold a key twice in one object.

    Every string token of JSON text (key or value) carries at least two ``"`` bytes, and a
    parsed object keeps one key per distinct name. So when ``parsed`` is an object and the body's
    ``"`` bytes number exactly two per key and per string value at its top level, the body has
    no other string token: no nested key and no repeated top-level key. Otherwise the exact
    check (:func:`~consumers.decoding.events.duplicate_key`, a full parse) must decide.

    Examples
    --------
    >>> body = b'{"features": [1], "predictor": "last"}'
    >>> may_repeat_a_key(body, orjson.loads(body))
    False
    >>> may_repeat_a_key(b'{"features": [1], "features": [2]}', {"features": [2]})
    True
    >>> may_repeat_a_key(b'{"features": {"a": 1}}', {"features": {"a": 1}})
    True
    """
    if type(parsed) is not dict:
        return True
    strings = len(parsed) + sum(type(value) is str for value in parsed.values())
    return body.count(b'"') != 2 * strings


def _parse(body: bytes) -> dict[str, Any]:
    if not body:
        raise Problem(
            400,
            "malformed-json",
            'the body is empty; send a JSON object such as {"features": [...]}',
        )
    try:
        request = orjson.loads(body)
    except orjson.JSONDecodeError:
        request = _parse_like_the_consumer(body)
    else:
        if may_nest_too_deep(body) and nesting_depth(body) > MAX_NESTING_DEPTH:
            _parse_like_the_consumer(body)  # refuses it as too_deep, as the consumer does
    repeated = duplicate_key(body.decode("utf-8")) if may_repeat_a_key(body, request) else None
    if repeated is not None:
        raise _invalid(
            "",
            DUPLICATE_KEY,
            f"key {repeated!r} appears more than once in an object; a second value would "
            "silently replace the first",
        )
    if type(request) is not dict:
        raise _invalid(
            "",
            "wrong_type",
            f'the body must be a JSON object like {{"features": [...]}}, got {_kind(request)}',
        )
    unknown = request.keys() - REQUEST_FIELDS
    if unknown:
        names = _listed(unknown)
        raise _invalid(
            "/" + sorted(unknown)[0],
            "unknown_field",
            f"unknown field(s) {names}; allowed: features or instances, and predictor",
        )
    has_features = "features" in request
    if has_features == ("instances" in request):
        raise _invalid(
            "",
            "features_or_instances",
            'send exactly one of "features" (one instance) or "instances" (a batch)',
        )
    return request


def _parse_like_the_consumer(body: bytes) -> Any:
    """What the consumer's exact parser makes of a body orjson refuses, or the same refusal.

    ``NaN``, ``Infinity`` and numbers beyond the float range are not JSON, yet the consumer reads
    them so that it can refuse the event as ``non_finite`` at the feature that holds them; HTTP
    gives the same answer for the same bytes. Anything else orjson refuses is malformed JSON, and
    a body nested deeper than the consumer accepts is refused as ``too_deep``.
    """
    try:
        return parse_event_json(body)
    except InvalidEventError as exc:
        if exc.reason in SYNTAX_REASONS:
            raise Problem(
                400,
                "malformed-json",
                f"the body is not valid JSON ({exc.message}); strings must be UTF-8",
            ) from None
        raise _invalid("", exc.reason, exc.message) from None


def _features_of(instances: list[Any]) -> list[Any] | None:
    """The features of every instance when each is exactly ``{"features": ...}``, else None."""
    if set(map(type, instances)) != {dict} or sum(map(len, instances)) != len(instances):
        return None
    try:
        return [instance["features"] for instance in instances]
    except KeyError:
        return None


def _instance_error(instance: object, pointer: str) -> FieldError | None:
    if type(instance) is not dict:
        return FieldError(
            pointer,
            "wrong_type",
            f'an instance must be an object {{"features": ...}}, got {_kind(instance)}',
        )
    if "features" not in instance:
        return FieldError(pointer, "missing_features", 'the instance has no "features"')
    unknown = instance.keys() - INSTANCE_FIELDS
    if unknown:
        return FieldError(
            pointer,
            "unknown_field",
            f"unknown field(s) {_listed(unknown)}",
        )
    return None


def _predict(
    predictor: Predictor, X: Matrix, name: str, batch: bool
) -> tuple[list[Any], list[float | None]]:
    # X is CSR for object-valued encoders: the predictors take it once the sparse learning core
    # is in (issue 14); ``name`` is one of PREDICTORS, checked by _predictor_name.
    try:
        codes, scores = predictor.predict_codes(X, name)  # type: ignore[arg-type]
    except FeatureError as exc:
        row = exc.index or 0
        pointer = f"/instances/{row}/features" if batch else "/features"
        raise _invalid(pointer, exc.code, exc.message) from None
    if not predictor.multiclass:
        positive, negative = predictor.labels
        return [positive if code >= 0 else negative for code in codes.tolist()], scores.tolist()
    labels: list[Any] = []
    best: list[float | None] = []
    for row, code in enumerate(codes.tolist()):
        if code < 0:
            labels.append(None)
            best.append(None)
        else:
            labels.append(predictor.labels[code])
            best.append(float(scores[row, code]))
    return labels, best


def _invalid(pointer: str, code: str, message: str) -> Problem:
    return _invalid_many([FieldError(pointer, code, message)])


def _invalid_many(errors: list[FieldError]) -> Problem:
    first = errors[0]
    where = first.pointer or "the body"
    more = f" (and {len(errors) - 1} more, see errors)" if len(errors) > 1 else ""
    return Problem(
        422,
        "invalid-request",
        f"{where}: {first.message}{more}. See /docs for the request schema.",
        errors,
    )


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _show(value: object) -> str:
    text = repr(value)
    if len(text) <= MAX_SHOWN_CHARACTERS:
        return text
    return text[: MAX_SHOWN_CHARACTERS - len(ELLIPSIS)] + ELLIPSIS


def _listed(names: Iterable[object]) -> str:
    return ", ".join(sorted(map(repr, names)))[:MAX_LISTED_CHARACTERS]
