"""OpenAPI documentation of the API bodies.

These models describe what the handlers send; the handlers themselves serialise with orjson and
never validate their own output through pydantic (that would cost more than the prediction).
The request schema of ``POST /predict`` is built from the settings, so the documented shape is
exactly what the model accepts (dimension, feature names, limits).
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from learning import PREDICTORS
from learning.encoders import MAX_ABS_FEATURE
from service.settings import Settings

logger = logging.getLogger(__name__)

LABEL_SCHEMA: dict[str, Any] = {
    "description": "A label of the model: a label-map key (binary) or a class (multiclass).",
    "anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}, {"type": "null"}],
}
SCORE_SCHEMA: dict[str, Any] = {
    "description": (
        "w.x for last, the averaged weights' w.x for averaged, the vote share for voted "
        "(multiclass: of the predicted class); null if it overflows float64."
    ),
    "anyOf": [{"type": "number"}, {"type": "null"}],
}


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Health(BaseModel):
    """Liveness."""

    status: str = Field(description='Always "ok".')


class Ready(BaseModel):
    """Readiness."""

    status: str = Field(description='Always "ready" (a 503 problem otherwise).')


class BoundEntry(_Open):
    """The bound of one reference separator."""

    name: str = Field(description="Reference name from the config.")
    gamma: float | None = Field(description="The gamma that minimises the bound.")
    k: int | None = Field(description="Events so far with margin below gamma under the reference.")
    bound: float | None = Field(description="(R/gamma)^2 + k(1 + 2R/gamma).")


class PartitionEntry(_Open):
    """Offsets and lag of one assigned partition."""

    topic: str
    partition: int
    next_offset: int | None = Field(default=None, description="Next offset to apply.")
    lag: int | None = Field(default=None, description="Records not yet applied.")


class Stats(_Open):
    """Learning statistics (also the source of the Prometheus metrics)."""

    seen: int = Field(description="Events learned.")
    mistakes: int = Field(description="Perceptron mistakes (updates).")
    prequential_mistakes: dict[str, int] = Field(
        description="Mistakes of each predictor, predicting before learning."
    )
    radius: float | None = Field(description="R: the largest norm of an augmented vector seen.")
    bounds: list[BoundEntry] = Field(description="One entry per reference separator.")
    invalid: dict[str, int] = Field(description="Invalid (dead-lettered) events by reason code.")
    partitions: list[PartitionEntry] = Field(description="Per assigned partition.")
    model_version: int = Field(description="Number of updates applied to the weights.")
    ready: bool = Field(description="What /readyz says.")


class ModelDescription(_Open):
    """The model as it is now."""

    variant: str = Field(description='"binary" or "multiclass".')
    model_version: int = Field(description="Number of updates applied to the weights.")
    weights: dict[str, Any] = Field(
        description=(
            "Weights of the last and averaged predictors in coordinate order (bias first); "
            "multiclass: one vector per class."
        )
    )


def json_response(model: type[BaseModel], description: str) -> dict[str, Any]:
    """An OpenAPI ``responses`` entry with a JSON body documented by ``model``."""
    return {"description": description, "model": model}


def predict_responses() -> dict[str, Any]:
    """The 200 response of ``POST /predict``: one prediction or a batch."""
    one = {
        "type": "object",
        "required": ["label", "score", "model_version", "predictor"],
        "properties": {
            "label": LABEL_SCHEMA,
            "score": SCORE_SCHEMA,
            "model_version": {"type": "integer"},
            "predictor": {"type": "string", "enum": list(PREDICTORS)},
        },
    }
    batch = {
        "type": "object",
        "required": ["predictions", "model_version", "predictor"],
        "properties": {
            "predictions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["label", "score"],
                    "properties": {"label": LABEL_SCHEMA, "score": SCORE_SCHEMA},
                },
            },
            "model_version": {"type": "integer"},
            "predictor": {"type": "string", "enum": list(PREDICTORS)},
        },
    }
    return {
        "description": "The prediction (features) or predictions in order (instances).",
        "content": {"application/json": {"schema": {"oneOf": [one, batch]}}},
    }


def features_schema(settings: Settings) -> dict[str, Any]:
    """JSON schema of one instance's ``features`` under the configured encoding."""
    model = settings.model
    number = {"type": "number", "minimum": -MAX_ABS_FEATURE, "maximum": MAX_ABS_FEATURE}
    if model.encoding == "dense":
        return {
            "type": "array",
            "items": number,
            "minItems": model.dim,
            "maxItems": model.dim,
            "description": (
                f"Exactly {model.dim} numbers within ±{MAX_ABS_FEATURE:g}, in feature order."
            ),
        }
    if model.encoding == "schema":
        return {
            "type": "object",
            "properties": dict.fromkeys(model.feature_names, number),
            "additionalProperties": False,
            "minProperties": 1,
            "maxProperties": model.max_features_per_event,
            "description": "Feature name to finite number; absent features are 0.",
        }
    return {
        "type": "object",
        "additionalProperties": number,
        "minProperties": 1,
        "maxProperties": model.max_features_per_event,
        "description": "Feature name to finite number; absent features are 0.",
    }


def predict_request_body(settings: Settings) -> dict[str, Any]:
    """The OpenAPI ``requestBody`` of ``POST /predict``."""
    features = features_schema(settings)
    predictor = {
        "type": "string",
        "enum": list(PREDICTORS),
        "description": f"Which predictor answers (default {settings.model.predictor}).",
    }
    one = {
        "title": "One instance",
        "type": "object",
        "required": ["features"],
        "properties": {"features": features, "predictor": predictor},
        "additionalProperties": False,
    }
    batch = {
        "title": "A batch of instances",
        "type": "object",
        "required": ["instances"],
        "properties": {
            "instances": {
                "type": "array",
                "minItems": 1,
                "maxItems": settings.http.max_batch_size,
                "items": {
                    "type": "object",
                    "required": ["features"],
                    "properties": {"features": features},
                    "additionalProperties": False,
                },
            },
            "predictor": predictor,
        },
        "additionalProperties": False,
    }
    example = [0.5] * settings.model.dim if settings.model.encoding == "dense" else {"x": 1.0}
    return {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"oneOf": [one, batch]},
                "example": {"features": example},
            }
        },
    }
