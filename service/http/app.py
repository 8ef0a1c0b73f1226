"""The HTTP API: predictions, model, stats, health, readiness and metrics.

``create_app`` wires the routes to one engine (the model and its immutable snapshots), one
consumer runner (readiness, lag) and one :class:`~service.observability.metrics.Metrics`.
``POST /predict`` is answered before FastAPI's routing and middleware (see :class:`NovikoffApp`);
its route is still declared so that ``/docs`` documents it and so that any other method on it gets
a 405 problem.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Protocol, TypeVar

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel
from starlette.types import Message, Receive, Scope, Send

from consumers.faults import ConsumerFault
from learning import Predictor
from learning.encoders import Encoder
from service.http import schemas
from service.http.auth.guard import AccessGuard, install_access_control, send_problem
from service.http.dashboard import router as dashboard_router
from service.http.predict import PredictHandler, PredictLimits, is_json_media_type
from service.http.problems import (
    PROBLEM_MEDIA_TYPE,
    Problem,
    install_problem_handlers,
    problem_responses,
)
from service.observability.history import HistoryRecorder, StatsHistory
from service.observability.metrics import UNMATCHED_ROUTE, Metrics
from service.settings import Settings

logger = logging.getLogger(__name__)

PREDICT_PATH = "/predict"
JSON_MEDIA_TYPE = "application/json"
NOT_READY = 503

_Endpoint = TypeVar("_Endpoint", bound=Callable[..., Any])


class SnapshotView(Protocol):
    """What the API reads from the engine's immutable snapshot."""

    @property
    def predictor(self) -> Predictor: ...

    @property
    def stats(self) -> Mapping[str, Any]: ...

    @property
    def model(self) -> Mapping[str, Any]: ...


class EngineView(Protocol):
    """What the API needs from the engine."""

    @property
    def snapshot(self) -> SnapshotView: ...

    @property
    def encoder(self) -> Encoder: ...

    @property
    def restore_report(self) -> object | None: ...


class RunnerView(Protocol):
    """What the API needs from the consumer runner."""

    @property
    def connected(self) -> bool: ...

    @property
    def not_ready_reason(self) -> str | None: ...

    @property
    def fault(self) -> ConsumerFault | None: ...


class NovikoffApp(FastAPI):
    """FastAPI with ``POST /predict`` answered first, and every request timed.

    The prediction path reads the body with the size limit, hands the bytes to
    :class:`~service.http.predict.PredictHandler` and writes the bytes back; it never builds a
    Request, a pydantic model or a Response object.
    """

    predict_handler: PredictHandler | None = None
    metrics: Metrics | None = None
    access_guard: AccessGuard | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        start = time.perf_counter()
        handler = self.predict_handler
        refusal = self.access_guard.refusal(scope) if self.access_guard is not None else None
        if refusal is not None:
            # Only protected routes are refused, and their paths are their route templates.
            status, route = await send_problem(refusal, send), str(scope["path"])
        elif handler is not None and scope["path"] == PREDICT_PATH and scope["method"] == "POST":
            status = await _answer_predict(handler, scope, receive, send)
            route = PREDICT_PATH
        else:
            status, route = await self._answer_routed(scope, receive, send)
        if self.metrics is not None and status:
            self.metrics.observe_request(
                route, scope["method"], status, time.perf_counter() - start
            )

    async def _answer_routed(self, scope: Scope, receive: Receive, send: Send) -> tuple[int, str]:
        status = 0

        async def send_and_watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        await super().__call__(scope, receive, send_and_watch)
        matched = scope.get("route")
        route = (
            getattr(matched, "path", UNMATCHED_ROUTE) if matched is not None else UNMATCHED_ROUTE
        )
        return status, str(route)


async def _answer_predict(
    handler: PredictHandler, scope: Scope, receive: Receive, send: Send
) -> int:
    """Answer one ``POST /predict``; return the status sent (0 if the client went away)."""
    try:
        body = await _read_json_body(scope, receive, handler.limits.max_body_bytes)
        if body is None:
            return 0
        status, payload, media_type = 200, handler.respond(body), JSON_MEDIA_TYPE
    except Problem as problem:
        status, payload, media_type = problem.status, problem.encode(), PROBLEM_MEDIA_TYPE
    except Exception:
        logger.exception("unexpected error answering POST /predict")
        failure = Problem(500, "internal-error", "the server failed; this is a bug")
        status, payload, media_type = 500, failure.encode(), PROBLEM_MEDIA_TYPE
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", media_type.encode()),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
    return status


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


async def _read_json_body(scope: Scope, receive: Receive, limit: int) -> bytes | None:
    """The request body, refusing a wrong media type or a body over ``limit`` before reading it.

    Returns None when the client disconnects.
    """
    if not is_json_media_type(_header(scope, b"content-type")):
        raise Problem(
            415,
            "unsupported-media-type",
            "send the body as JSON with the header Content-Type: application/json",
        )
    declared = _header(scope, b"content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_large(limit: int) -> Problem:
    return Problem(
        413,
        "content-too-large",
        f"the body is larger than {limit} bytes; split the instances over several requests",
    )


def _json(content: object, status: int = 200) -> Response:
    return Response(
        orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY),
        status_code=status,
        media_type=JSON_MEDIA_TYPE,
    )


def _stats(engine: EngineView, runner: RunnerView) -> dict[str, Any]:
    """The ``/stats`` document: the snapshot's statistics and the readiness."""
    ready, _ = _readiness(engine, runner)
    return {**engine.snapshot.stats, "ready": ready}


def _readiness(engine: EngineView, runner: RunnerView) -> tuple[bool, str | None]:
    if engine.restore_report is None:
        return False, "the model has not been loaded from the checkpoint directory yet"
    if not runner.connected:
        return False, runner.not_ready_reason or "the consumer is not connected to Kafka"
    return True, None


def create_app(
    settings: Settings,
    engine: EngineView,
    runner: RunnerView,
    metrics: Metrics,
    history: StatsHistory | None = None,
) -> FastAPI:
    """The FastAPI application of the service.

    Parameters
    ----------
    settings
        The process settings (limits, default predictor).
    engine
        Holds the model; every read goes through its current immutable snapshot.
    runner
        The consumer, for readiness.
    metrics
        Exposed at ``/metrics``; HTTP latencies are recorded here.
    history
        The dashboard's learning-curve history; a fresh one when omitted. The app records
        into it while it runs.
    """
    history = history if history is not None else StatsHistory()
    recorder = HistoryRecorder(history, lambda: _stats(engine, runner))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Everything allocated so far (libraries, compiled kernels, the model) lives as long as
        # the process; freezing it keeps the collector from rescanning it on every full
        # collection, which otherwise stalls requests for tens of milliseconds.
        gc.collect()
        gc.freeze()
        recorder.start()
        try:
            yield
        finally:
            recorder.stop()

    app = NovikoffApp(
        title="novikoff",
        summary="Online perceptron learning from Kafka, with live mistake bounds.",
        version="0.1.0",
        lifespan=lifespan,
        default_response_class=Response,
    )
    app.state.history = history
    app.state.settings = settings
    app.state.engine = engine
    app.state.runner = runner
    app.metrics = metrics
    app.predict_handler = PredictHandler(
        snapshot=lambda: engine.snapshot.predictor,
        encoder=engine.encoder,
        limits=PredictLimits(
            max_body_bytes=settings.http.max_body_bytes,
            max_batch_size=settings.http.max_batch_size,
        ),
        default_predictor=settings.model.predictor,
    )
    install_problem_handlers(app)
    _add_predict_route(app, settings)
    _add_read_routes(app, engine, runner, metrics)
    _include_dashboard(app)
    app.access_guard = install_access_control(app, settings.http, metrics)
    return app


def _add_predict_route(app: NovikoffApp, settings: Settings) -> None:
    handler = app.predict_handler
    assert handler is not None

    @app.post(
        PREDICT_PATH,
        summary="Predict labels",
        description=(
            "Predict the label of one instance (`features`) or of a batch (`instances`) with the "
            "current model snapshot. `predictor` picks `last`, `averaged` or `voted` (default: "
            f"`{settings.model.predictor}`). Limits: {settings.http.max_body_bytes} bytes per "
            f"body, {settings.http.max_batch_size} instances per batch, "
            f"{settings.model.max_features_per_event} features per instance."
        ),
        openapi_extra={"requestBody": schemas.predict_request_body(settings)},
        responses={
            200: schemas.predict_responses(),
            **problem_responses(400, 413, 415, 422),
        },
        response_model=None,
    )
    async def predict(request: Request) -> Response:
        # Normally answered by NovikoffApp before routing; kept equivalent for other mountings.
        body = await _read_json_body(request.scope, request.receive, handler.limits.max_body_bytes)
        return Response(handler.respond(body or b""), media_type=JSON_MEDIA_TYPE)


def _json_route(
    app: FastAPI,
    path: str,
    summary: str,
    description: str,
    answer: tuple[type[BaseModel], str],
    *problems: int,
) -> Callable[[_Endpoint], _Endpoint]:
    """``GET path`` answering JSON documented by ``answer`` (schema, description) and problems."""
    schema, answer_description = answer
    return app.get(
        path,
        summary=summary,
        description=description,
        responses={
            200: schemas.json_response(schema, answer_description),
            **problem_responses(*problems),
        },
        response_model=None,
    )


def _add_read_routes(
    app: FastAPI, engine: EngineView, runner: RunnerView, metrics: Metrics
) -> None:
    @_json_route(
        app,
        "/model",
        "The model",
        "Variant, classes, coordinate names, bias, model version, counters, and the weights of "
        "the `last` and `averaged` predictors in coordinate order (bias first); the voted "
        "predictor reports its number of voters.",
        (schemas.ModelDescription, "The model."),
    )
    def model() -> Response:
        return _json(engine.snapshot.model)

    @_json_route(
        app,
        "/stats",
        "Learning statistics",
        "Events learned, mistakes, prequential mistakes of each predictor, the radius R, the "
        "mistake bound of each reference separator, invalid events by reason, and per-partition "
        "offsets and lag.",
        (schemas.Stats, "The statistics."),
    )
    def stats() -> Response:
        return _json(_stats(engine, runner))

    @_json_route(
        app,
        "/healthz",
        "Liveness",
        "200 while the process is serving.",
        (schemas.Health, "Alive."),
    )
    def healthz() -> Response:
        return _json({"status": "ok"})

    @_json_route(
        app,
        "/readyz",
        "Readiness",
        "200 when the model is loaded and the consumer is connected to Kafka; otherwise 503 with "
        "a problem body whose `detail` gives the reason; when the consumer meets an error "
        "retrying cannot fix (codec, authorization, unknown topic), `consumer_error` gives its "
        "kind, cause and fix.",
        (schemas.Ready, "Ready."),
        NOT_READY,
    )
    def readyz() -> Response:
        ready, reason = _readiness(engine, runner)
        metrics.set_ready(ready)
        if not ready:
            fault = runner.fault if engine.restore_report is not None else None
            extensions = {"consumer_error": fault.as_dict()} if fault is not None else None
            return Problem(
                NOT_READY, "not-ready", f"not ready: {reason}", extensions=extensions
            ).response()
        return _json({"status": "ready"})

    @app.get(
        "/metrics",
        summary="Prometheus metrics",
        description="Every novikoff_* metric in the Prometheus text format.",
        responses={200: {"description": "Metrics.", "content": {CONTENT_TYPE_LATEST: {}}}},
        response_model=None,
    )
    def prometheus_metrics() -> Response:
        ready, _ = _readiness(engine, runner)
        metrics.set_ready(ready)
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


def _include_dashboard(app: FastAPI) -> None:
    """The dashboard page and ``/stats/history`` (``service.http.dashboard``)."""
    app.include_router(dashboard_router)
