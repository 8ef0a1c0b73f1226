"""RFC 9457 problem details: every client error is ``application/problem+json`` saying what to fix.

A problem body has ``type`` (a URN naming the kind of problem), ``title`` (the same for every
problem of that type), ``status`` (the HTTP status code, always equal to the response's), a
``detail`` for this occurrence and, where it helps, ``errors``: one entry per offending part of
the request with a JSON ``pointer`` into the body, a stable ``code`` and a ``message``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger(__name__)

PROBLEM_MEDIA_TYPE = "application/problem+json"
TYPE_PREFIX = "urn:novikoff:problem:"


@dataclass(frozen=True)
class FieldError:
    """One offending part of a request body."""

    pointer: str
    code: str
    message: str

    def to_json(self) -> dict[str, str]:
        """The entry in the problem's ``errors`` list."""
        return {"pointer": self.pointer, "code": self.code, "message": self.message}


class Problem(Exception):  # noqa: N818 - the RFC's own word for it
    """A client error, raised anywhere while answering and turned into a problem response.

    Parameters
    ----------
    status
        The HTTP status code (4xx for client errors).
    kind
        Short slug naming the problem type, e.g. ``"invalid-features"``.
    detail
        What is wrong with this request and how to fix it.
    errors
        Per-field errors, if any.
    headers
        Extra response headers (e.g. ``Allow`` for 405).
    extensions
        Extension members of the body (RFC 9457 section 3.2), e.g. ``consumer_error``.
    """

    def __init__(
        self,
        status: int,
        kind: str,
        detail: str,
        errors: Sequence[FieldError] = (),
        headers: Mapping[str, str] | None = None,
        *,
        extensions: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.kind = kind
        self.detail = detail
        self.errors = tuple(errors)
        self.headers = dict(headers or {})
        self.extensions = dict(extensions or {})

    def body(self) -> dict[str, Any]:
        """The JSON body of the problem."""
        content: dict[str, Any] = {
            "type": TYPE_PREFIX + self.kind,
            "title": _title(self.status),
            "status": self.status,
            "detail": self.detail,
        }
        if self.errors:
            content["errors"] = [error.to_json() for error in self.errors]
        # Extension members never replace the standard ones.
        content.update({k: v for k, v in self.extensions.items() if k not in content})
        return content

    def encode(self) -> bytes:
        """The serialised body."""
        return orjson.dumps(self.body())

    def response(self) -> Response:
        """The problem as a Starlette response."""
        return Response(
            self.encode(),
            status_code=self.status,
            media_type=PROBLEM_MEDIA_TYPE,
            headers=self.headers,
        )


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


class FieldErrorModel(BaseModel):
    """One offending part of the request."""

    pointer: str = Field(description='JSON pointer into the request body, e.g. "/features/2".')
    code: str = Field(description="Stable machine-readable code, e.g. non_finite.")
    message: str = Field(description="What is wrong and what is expected.")


class ConsumerErrorModel(BaseModel):
    """A consumer error that needs a person."""

    kind: str = Field(description="codec, authorization or unknown_topic.")
    cause: str = Field(description="What happened, naming the topic, group or codec.")
    fix: str = Field(description="What to do about it.")


class ProblemModel(BaseModel):
    """RFC 9457 problem details."""

    type: str = Field(description="URN naming the kind of problem.")
    title: str = Field(description="Short summary of the problem type (the HTTP reason phrase).")
    status: int = Field(description="The HTTP status code of this response.")
    detail: str = Field(description="What is wrong with this request and how to fix it.")
    errors: list[FieldErrorModel] | None = Field(
        default=None, description="Per-field errors, when the request body is at fault."
    )
    consumer_error: ConsumerErrorModel | None = Field(
        default=None,
        description="On a 503 from /readyz: the consumer error retrying cannot fix, if any.",
    )


def add_problem_schemas(app: FastAPI) -> None:
    """Put ``ProblemModel`` (referenced by :func:`problem_responses`) in the OpenAPI components."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        spec = generate()
        schemas = spec.setdefault("components", {}).setdefault("schemas", {})
        if "ProblemModel" not in schemas:
            problem = ProblemModel.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(problem.pop("$defs", {}))
            schemas["ProblemModel"] = problem
        return spec

    app.openapi = openapi  # type: ignore[method-assign]


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries documenting problem bodies for ``statuses``."""
    schema = {"$ref": "#/components/schemas/ProblemModel"}
    return {
        status: {
            "description": _title(status),
            "content": {PROBLEM_MEDIA_TYPE: {"schema": schema}},
        }
        for status in statuses
    }


KIND_BY_STATUS = {
    400: "bad-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    406: "not-acceptable",
    413: "content-too-large",
    415: "unsupported-media-type",
    422: "invalid-request",
    503: "not-ready",
}


def _http_exception_detail(exc: StarletteHTTPException, request: Request) -> str:
    if exc.status_code == HTTPStatus.NOT_FOUND and exc.detail == HTTPStatus.NOT_FOUND.phrase:
        return f"no resource at {request.url.path}; see /docs for the endpoints"
    if exc.status_code == HTTPStatus.METHOD_NOT_ALLOWED:
        allowed = (exc.headers or {}).get("Allow") or (exc.headers or {}).get("allow") or ""
        return f"{request.method} is not allowed on {request.url.path}; use {allowed}"
    return str(exc.detail)


def _pointer(loc: Sequence[int | str]) -> str:
    parts = [str(part) for part in loc]
    if parts and parts[0] in {"body", "query", "path", "header"}:
        where, parts = parts[0], parts[1:]
        prefix = "" if where == "body" else f"{where}:"
    else:
        prefix = ""
    escaped = (part.replace("~", "~0").replace("/", "~1") for part in parts)
    return prefix + "/" + "/".join(escaped) if parts else prefix + ""


def install_problem_handlers(app: FastAPI) -> None:
    """Turn every error FastAPI or Starlette raises into a problem response."""

    async def on_problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Problem)
        return exc.response()

    async def on_http_exception(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        status = exc.status_code
        kind = KIND_BY_STATUS.get(status, "http-error")
        headers = dict(exc.headers or {})
        return Problem(
            status, kind, _http_exception_detail(exc, request), headers=headers
        ).response()

    async def on_validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = [
            FieldError(_pointer(err.get("loc", ())), str(err.get("type", "invalid")), err["msg"])
            for err in exc.errors()
        ]
        detail = "the request does not match the documented schema (see /docs): " + "; ".join(
            f"{error.pointer or '/'}: {error.message}" for error in errors[:5]
        )
        return Problem(422, "invalid-request", detail, errors).response()

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        logger.exception("unexpected error answering %s %s", request.method, request.url.path)
        return Problem(500, "internal-error", "the server failed; this is a bug").response()

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(StarletteHTTPException, on_http_exception)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(Exception, on_unexpected)
    add_problem_schemas(app)
