"""``POST /predict`` without a framework in the way: bytes in, bytes out.

The request body is parsed by orjson and checked by hand (no pydantic on the hot path); features
go through the consumer's :func:`~consumers.events.validate_features`, so HTTP refuses exactly
what the consumer refuses, with the same codes. A batch of dense instances is checked and
converted in bulk; only when the bulk check fails are rows inspected one by one to say which
ones are wrong. Predictions read one immutable model snapshot per request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import orjson
from numpy.typing import NDArray

from consumers.events import validate_features
from learning import DenseEncoder, FeatureError, Predictor
from learning.encoders import Encoder
from service.problems import FieldError, Problem

logger = logging.getLogger(__name__)

PREDICTORS = ("last", "averaged", "voted")
REQUEST_FIELDS = frozenset({"features", "instances", "predictor"})
INSTANCE_FIELDS = frozenset({"features"})
NUMBER_TYPES = frozenset({int, float})
MAX_REPORTED_ERRORS = 10
JSON_MEDIA_TYPES = ("application/json",)
JSON_SUFFIX = "+json"


@dataclass(frozen=True)
class PredictLimits:
    """The request limits of ``POST /predict``."""

    max_body_bytes: int
    max_batch_size: int
    max_features: int


def is_json_media_type(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` header names JSON (parameters such as charset are ignored)."""
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media in JSON_MEDIA_TYPES or (media.startswith("application/") and media.endswith(JSON_SUFFIX))


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
        request = _parse(body)
        predictor_name = self._predictor_name(request)
        predictor = self._snapshot()
        if "features" in request:
            X = self._encode_one(request["features"], "/features")
            labels, scores = _predict(predictor, X[None, :], predictor_name)
            return orjson.dumps(
                {
                    "label": labels[0],
                    "score": scores[0],
                    "model_version": predictor.version,
                    "predictor": predictor_name,
                }
            )
        X = self._encode_instances(request["instances"])
        labels, scores = _predict(predictor, X, predictor_name)
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

    def _encode_one(self, features: object, pointer: str) -> NDArray[np.float64]:
        error = self._feature_count_error(features, pointer)
        if error is not None:
            raise _invalid_many([error])
        try:
            return validate_features(features, self._encoder)
        except FeatureError as exc:
            raise _invalid(pointer, exc.code, exc.message) from None

    def _feature_count_error(self, features: object, pointer: str) -> FieldError | None:
        if isinstance(features, dict | list) and len(features) > self._limits.max_features:
            return FieldError(
                pointer,
                "too_many_features",
                f"{len(features)} features; the limit is {self._limits.max_features}",
            )
        return None

    def _encode_instances(self, instances: object) -> NDArray[np.float64]:
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
        if rows is not None and self._dense_width is not None:
            X = self._dense_bulk(rows, self._dense_width)
            if X is not None:
                return X
        return self._encode_rows(instances)

    def _dense_bulk(self, rows: list[Any], width: int) -> NDArray[np.float64] | None:
        """All rows at once when every row is a list of ``width`` plain numbers, else None."""
        if set(map(type, rows)) != {list} or set(map(len, rows)) != {width}:
            return None
        if not set(map(type, chain.from_iterable(rows))) <= NUMBER_TYPES:
            return None
        try:
            flat = np.fromiter(chain.from_iterable(rows), np.float64, len(rows) * width)
        except OverflowError:
            return None
        if not np.isfinite(flat).all():
            return None
        values = flat.reshape(len(rows), width)
        if not self._encoder.bias:
            return values
        X = np.empty((len(rows), width + 1), dtype=np.float64)
        X[:, 0] = 1.0
        X[:, 1:] = values
        return X

    def _encode_rows(self, instances: list[Any]) -> NDArray[np.float64]:
        """One row at a time, collecting what is wrong with each bad instance."""
        vectors: list[NDArray[np.float64]] = []
        errors: list[FieldError] = []
        for index, instance in enumerate(instances):
            pointer = f"/instances/{index}"
            error = _instance_error(instance, pointer)
            if error is None:
                error = self._feature_count_error(instance["features"], pointer + "/features")
            if error is None:
                try:
                    vectors.append(validate_features(instance["features"], self._encoder))
                    continue
                except FeatureError as exc:
                    error = FieldError(pointer + "/features", exc.code, exc.message)
            errors.append(error)
            if len(errors) == MAX_REPORTED_ERRORS:
                break
        if errors:
            raise _invalid_many(errors)
        width = max(vector.shape[0] for vector in vectors)
        X = np.zeros((len(vectors), width), dtype=np.float64)
        for row, vector in enumerate(vectors):
            X[row, : vector.shape[0]] = vector
        return X


def _parse(body: bytes) -> dict[str, Any]:
    if not body:
        raise Problem(
            400,
            "malformed-json",
            'the body is empty; send a JSON object such as {"features": [...]}',
        )
    try:
        request = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise Problem(
            400,
            "malformed-json",
            f"the body is not valid JSON ({exc}); numbers must be finite and strings UTF-8",
        ) from None
    if type(request) is not dict:
        raise _invalid(
            "", "wrong_type", f'the body must be a JSON object like {{"features": [...]}}, got {_kind(request)}'
        )
    unknown = request.keys() - REQUEST_FIELDS
    if unknown:
        names = ", ".join(sorted(map(repr, unknown)))[:200]
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
            pointer, "wrong_type", f'an instance must be an object {{"features": ...}}, got {_kind(instance)}'
        )
    if "features" not in instance:
        return FieldError(pointer, "missing_features", 'the instance has no "features"')
    unknown = instance.keys() - INSTANCE_FIELDS
    if unknown:
        return FieldError(
            pointer, "unknown_field", f"unknown field(s) {', '.join(sorted(map(repr, unknown)))[:200]}"
        )
    return None


def _predict(
    predictor: Predictor, X: NDArray[np.float64], name: str
) -> tuple[list[Any], list[float | None]]:
    codes, scores = predictor.predict_codes(X, name)  # type: ignore[arg-type]
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
    return text if len(text) <= 60 else text[:57] + "..."
