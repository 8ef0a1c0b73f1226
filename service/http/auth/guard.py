"""Who may call which route: the scope each route needs, and the check made before answering.

With ``http.auth = "token"`` every route in :data:`ROUTE_SCOPES` needs a bearer token holding its
scope, except the probe routes named in ``http.open_paths`` (all three by default). The routes in
:data:`PUBLIC_ROUTES` hold no data (the dashboard's page and code, the API documentation) and are
always open; the dashboard's numbers come from ``/stats`` and ``/stats/history``, which need
``read``. Every route of the app must be in one of the two tables:
:func:`install_access_control` refuses to build an app with an unclassified route, so a new
endpoint cannot appear unprotected by omission.

Answers: no token, 401; a wrong token, 401 and one failure counted against the client address;
a token without the route's scope, 403; an address that failed ``http.auth_failure_limit`` times
within ``http.auth_failure_window_seconds``, 429 on every protected route for
``http.auth_lockout_seconds``. All are problem+json; the 401s and 403 carry
``WWW-Authenticate: Bearer``.
"""

from __future__ import annotations

import ipaddress
import logging
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from fastapi import FastAPI
from starlette.routing import BaseRoute, Mount
from starlette.types import Scope as AsgiScope
from starlette.types import Send

from service.http.auth.lockout import FailureLimiter
from service.http.auth.tokens import Scope, TokenSource
from service.http.problems import PROBLEM_MEDIA_TYPE, Problem, problem_responses
from service.observability.metrics import Metrics
from service.settings import TOKENS_ENV_VAR, HttpSettings

logger = logging.getLogger(__name__)

ROUTE_SCOPES: Mapping[str, Scope] = {
    "/predict": "predict",
    "/model": "read",
    "/stats": "read",
    "/stats/history": "read",
    "/metrics": "metrics",
    "/healthz": "metrics",
    "/readyz": "metrics",
}
"""The scope each data-bearing route needs when ``http.auth = "token"``."""

PUBLIC_ROUTES = frozenset(
    {"/", "/static/{name}", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}
)
"""Routes that carry no data and are never protected."""

REALM = "novikoff"
BEARER_SCHEME_NAME = "bearer"
UNKNOWN_CLIENT = "unknown"
BEARER_PREFIX = "bearer "
AUTHORIZATION = b"authorization"
LOOPBACK_NAMES = frozenset({"localhost"})
REFUSAL_STATUSES = (401, 403, 429)


class UnclassifiedRouteError(RuntimeError):
    """A route is in neither :data:`ROUTE_SCOPES` nor :data:`PUBLIC_ROUTES`."""


def route_paths(routes: Iterable[BaseRoute], prefix: str = "") -> Iterator[str]:
    """The path template of every route, descending into included routers and mounts.

    A route of a kind with neither a path nor sub-routes yields its class name, which no table
    classifies, so an unforeseen kind of route fails closed.
    """
    for route in routes:
        path = getattr(route, "path", None)
        included = getattr(route, "original_router", None)
        if included is not None:
            context = getattr(route, "include_context", None)
            yield from route_paths(included.routes, prefix + getattr(context, "prefix", ""))
        elif isinstance(route, Mount):
            yield from route_paths(route.routes, prefix + route.path)
        elif isinstance(path, str):
            yield prefix + path
        else:
            yield f"<{type(route).__name__}>"


def check_routes_classified(routes: Iterable[BaseRoute]) -> None:
    """Raise :class:`UnclassifiedRouteError` naming any route no table classifies."""
    unknown = sorted(
        path
        for path in route_paths(routes)
        if path not in ROUTE_SCOPES and path not in PUBLIC_ROUTES
    )
    if unknown:
        raise UnclassifiedRouteError(
            f"routes {unknown} need an entry in service.http.auth.guard.ROUTE_SCOPES (the scope a "
            "token must hold) or PUBLIC_ROUTES (no data), and a test"
        )


class AccessGuard:
    """The check made before a request to a protected route is answered.

    Parameters
    ----------
    tokens
        The valid tokens.
    limiter
        Failed attempts per client address.
    open_paths
        Probe routes that need no token.
    metrics
        Counts refusals and lockouts.
    """

    def __init__(
        self,
        tokens: TokenSource,
        limiter: FailureLimiter,
        open_paths: tuple[str, ...],
        metrics: Metrics,
    ) -> None:
        self._tokens = tokens
        self._limiter = limiter
        self._metrics = metrics
        self.required: dict[str, Scope] = {
            path: scope for path, scope in ROUTE_SCOPES.items() if path not in open_paths
        }

    def __repr__(self) -> str:
        return f"AccessGuard({self._tokens!r}, protected={sorted(self.required)})"

    def refusal(self, scope: AsgiScope) -> Problem | None:
        """The problem to answer ``scope`` with, or None when it may proceed."""
        needed = self.required.get(scope["path"])
        if needed is None:
            return None
        client = scope.get("client")
        address = str(client[0]) if client else UNKNOWN_CLIENT
        wait = self._limiter.retry_after(address)
        if wait is not None:
            self._metrics.observe_auth_failure("locked_out")
            return _locked_out(wait)
        presented = _bearer_token(scope)
        if presented is None:
            self._metrics.observe_auth_failure("missing")
            return _challenge(needed, None, "send the header Authorization: Bearer <token>")
        scopes = self._tokens.table.scopes_of(presented)
        if scopes is None:
            self._metrics.observe_auth_failure("invalid")
            if self._limiter.record_failure(address):
                self._metrics.observe_lockout()
                logger.warning(
                    "client %s locked out for %.0fs after %d wrong tokens",
                    address,
                    self._limiter.lockout_s,
                    self._limiter.limit,
                )
            return _challenge(needed, "invalid_token", "the token is not valid")
        if needed not in scopes:
            self._metrics.observe_auth_failure("forbidden")
            return Problem(
                403,
                "insufficient-scope",
                f"this token lacks the scope {needed!r} that {scope['path']} needs",
                headers={"WWW-Authenticate": _bearer_challenge(needed, "insufficient_scope")},
            )
        return None


def _bearer_token(scope: AsgiScope) -> str | None:
    for name, value in scope["headers"]:
        if name.lower() == AUTHORIZATION:
            text = bytes(value).decode("latin-1")
            if text[: len(BEARER_PREFIX)].lower() == BEARER_PREFIX:
                token = text[len(BEARER_PREFIX) :].strip()
                return token or None
            return None
    return None


def _bearer_challenge(needed: Scope, error: str | None) -> str:
    parts = [f'realm="{REALM}"', f'scope="{needed}"']
    if error is not None:
        parts.append(f'error="{error}"')
    return "Bearer " + ", ".join(parts)


def _challenge(needed: Scope, error: str | None, why: str) -> Problem:
    return Problem(
        401,
        "unauthorized",
        f"{why}; this route needs a token with the scope {needed!r}",
        headers={"WWW-Authenticate": _bearer_challenge(needed, error)},
    )


def _locked_out(wait_s: float) -> Problem:
    seconds = max(1, math.ceil(wait_s))
    return Problem(
        429,
        "too-many-wrong-tokens",
        f"too many wrong tokens from this address; try again in {seconds} s",
        headers={"Retry-After": str(seconds)},
    )


async def send_problem(problem: Problem, send: Send) -> int:
    """Answer with ``problem`` at the ASGI level; return its status."""
    payload = problem.encode()
    headers = [
        (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
        (b"content-length", str(len(payload)).encode()),
        *((name.lower().encode(), value.encode()) for name, value in problem.headers.items()),
    ]
    await send({"type": "http.response.start", "status": problem.status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
    return problem.status


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the API on this machine."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def warn_if_exposed(http: HttpSettings) -> None:
    """Log a WARNING when the API is reachable from other machines without tokens."""
    if http.auth == "none" and not is_loopback(http.host):
        logger.warning(
            'the HTTP API listens on %s with http.auth = "none": anyone who can reach the port '
            'can read the model and call /predict; set http.auth = "token" (tokens in $%s or '
            "http.tokens_file) or bind 127.0.0.1",
            http.host,
            TOKENS_ENV_VAR,
        )


def declare_bearer_security(app: FastAPI, required: Mapping[str, Scope]) -> None:
    """Declare the bearer scheme in the OpenAPI document, on every operation of ``required``."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        spec = generate()
        components = spec.setdefault("components", {})
        components.setdefault("securitySchemes", {})[BEARER_SCHEME_NAME] = {
            "type": "http",
            "scheme": "bearer",
            "description": "A token from $NOVIKOFF_HTTP_TOKENS or http.tokens_file.",
        }
        for path, operations in spec.get("paths", {}).items():
            needed = required.get(path)
            if needed is None:
                continue
            for operation in operations.values():
                operation["security"] = [{BEARER_SCHEME_NAME: [needed]}]
                responses = operation.setdefault("responses", {})
                for status, response in problem_responses(*REFUSAL_STATUSES).items():
                    responses.setdefault(str(status), response)
        return spec

    app.openapi = openapi  # type: ignore[method-assign]


def install_access_control(
    app: FastAPI, http: HttpSettings, metrics: Metrics
) -> AccessGuard | None:
    """Check the app's routes, warn if exposed, and build the guard ``http.auth`` asks for.

    Raises
    ------
    UnclassifiedRouteError
        When a route is in neither table.
    TokenConfigError
        When ``http.auth = "token"`` and the tokens cannot be read or there are none.
    """
    check_routes_classified(app.routes)
    warn_if_exposed(http)
    if http.auth == "none":
        return None
    guard = AccessGuard(
        TokenSource(http.tokens_file, http.tokens_reload_seconds),
        FailureLimiter(
            http.auth_failure_limit,
            http.auth_failure_window_seconds,
            http.auth_lockout_seconds,
            http.auth_max_tracked_clients,
        ),
        http.open_paths,
        metrics,
    )
    declare_bearer_security(app, guard.required)
    logger.info("HTTP API protected by bearer tokens: %s", ", ".join(sorted(guard.required)))
    return guard
