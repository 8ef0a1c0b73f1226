"""The live dashboard: the page at ``GET /``, its static files and ``GET /stats/history``.

The page is plain HTML, CSS and hand-drawn SVG shipped in ``service/static``; it needs no build
step and fetches nothing but this service's own ``stats`` and ``stats/history`` (its Content
Security Policy makes the browser refuse anything else). The history comes from the
:class:`~service.observability.history.StatsHistory` that ``create_app`` puts on
``app.state.history``; a :class:`~service.observability.history.HistoryRecorder` fills it from the
engine's stats once a second::

    app.state.history = StatsHistory()
    recorder = HistoryRecorder(app.state.history, lambda: engine.snapshot.stats)
    recorder.start()  # and recorder.stop() on shutdown
    app.include_router(dashboard.router)
"""

from __future__ import annotations

import logging
from functools import cache
from importlib import resources
from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, Field

from service.observability.history import StatsHistory

logger = logging.getLogger(__name__)

STATIC_DIR = "static"
PAGE_FILE = "index.html"
STATIC_MEDIA_TYPES = {
    "dashboard.css": "text/css; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
"""The only files served under ``/static``; anything else is a 404."""

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""The browser itself refuses to load anything from another origin."""

PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
}

router = APIRouter()


class HistoryPointModel(BaseModel):
    """One sample of the learning curve."""

    t: float = Field(description="Unix time of the sample, in seconds.")
    seen: int = Field(description="Events learned so far.")
    mistakes: int = Field(description="Cumulative perceptron mistakes so far.")
    bounds: dict[str, float | None] = Field(
        description="Mistake bound of each reference separator (null while undefined)."
    )


class HistoryModel(BaseModel):
    """The bounded learning-curve history behind the dashboard chart."""

    capacity: int = Field(description="The most points the history ever holds.")
    points: list[HistoryPointModel] = Field(
        description="Oldest first; recent points at full resolution, older ones thinned."
    )


def get_history(request: Request) -> StatsHistory:
    """The history ``create_app`` stored on ``app.state.history``."""
    history = getattr(request.app.state, "history", None)
    if not isinstance(history, StatsHistory):
        raise RuntimeError("create_app must set app.state.history to a StatsHistory")
    return history


HistoryDependency = Annotated[StatsHistory, Depends(get_history)]


@cache
def _static_bytes(name: str) -> bytes:
    return (resources.files("service") / STATIC_DIR / name).read_bytes()


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def dashboard_page() -> HTMLResponse:
    """The dashboard page."""
    return HTMLResponse(_static_bytes(PAGE_FILE), headers=PAGE_HEADERS)


@router.get("/static/{name}", include_in_schema=False)
def static_file(name: str) -> Response:
    """One of the dashboard's own static files."""
    media_type = STATIC_MEDIA_TYPES.get(name)
    if media_type is None:
        raise HTTPException(status_code=404, detail=f"no static file named {name!r}")
    return Response(_static_bytes(name), media_type=media_type, headers=PAGE_HEADERS)


@router.get(
    "/stats/history",
    response_model=HistoryModel,
    response_class=JSONResponse,
    summary="Learning-curve history",
    description=(
        "Cumulative mistakes and each reference's mistake bound over the events seen, sampled "
        "about once a second into a bounded ring buffer whose older points are thinned."
    ),
)
def stats_history(history: HistoryDependency) -> Response:
    """The ``/stats/history`` body, serialised directly (the model above documents it)."""
    return Response(
        orjson.dumps(history.to_json()),
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )
