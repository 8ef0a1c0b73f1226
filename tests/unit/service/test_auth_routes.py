"""Access control on the real app: every route with no token, a wrong one, one of the wrong scope
and a right one; closing the probes; lockout; what never shows a token; the OpenAPI scheme."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from service.http.app import create_app
from service.http.auth.guard import (
    PUBLIC_ROUTES,
    ROUTE_SCOPES,
    UnclassifiedRouteError,
    check_routes_classified,
    route_paths,
)
from service.http.auth.tokens import TokenConfigError, digest
from service.observability.metrics import Metrics
from service.settings import PROBE_PATHS, TOKENS_ENV_VAR, Settings, load_settings
from tests.unit.service.engines import PLA_EVENTS, FakeRunner, trained_engine

PROBLEM = "application/problem+json"
READ = secrets.token_urlsafe(32)
PREDICT = secrets.token_urlsafe(32)
METRICS = secrets.token_urlsafe(32)
WRONG = secrets.token_urlsafe(32)
TOKENS = f"read:{READ}\npredict:{PREDICT} metrics:{METRICS}"
FAILURE_LIMIT = 3
PREDICT_BODY = {"features": [3.0]}

# (method, path, the scope it needs when closed, a token of another scope)
PROTECTED = [
    ("POST", "/predict", PREDICT, READ),
    ("GET", "/model", READ, PREDICT),
    ("GET", "/stats", READ, PREDICT),
    ("GET", "/stats/history", READ, METRICS),
]
PROBES = [("GET", path, METRICS, READ) for path in PROBE_PATHS]
PUBLIC = ["/", "/static/dashboard.js", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"]


def settings_with(**http: Any) -> Settings:
    return load_settings(
        model={"dim": 1},
        bound={"references": [{"name": "u", "weights": [0.0, -1.0]}]},
        http={"auth": "token", "auth_failure_limit": FAILURE_LIMIT, **http},
    )


@pytest.fixture(autouse=True)
def tokens_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKENS_ENV_VAR, TOKENS)


def make_client(
    settings: Settings, tmp_path: Path, address: str = "testclient"
) -> tuple[TestClient, CollectorRegistry]:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    engine = trained_engine(settings, PLA_EVENTS, tmp_path, metrics)
    app = create_app(settings, engine, FakeRunner(connected=True), metrics)
    return TestClient(app, client=(address, 50_000)), registry


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    test_client, _ = make_client(settings_with(), tmp_path)
    with test_client:
        yield test_client


@pytest.fixture
def closed_client(tmp_path: Path) -> Iterator[TestClient]:
    test_client, _ = make_client(settings_with(open_paths=[]), tmp_path)
    with test_client:
        yield test_client


def call(client: TestClient, method: str, path: str, token: str | None) -> Any:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    if method == "POST":
        return client.post(path, json=PREDICT_BODY, headers=headers)
    return client.get(path, headers=headers)


def assert_refused(response: Any, status: int, scope: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ") and f'scope="{scope}"' in challenge
    return body


def scope_name(token: str) -> str:
    return {READ: "read", PREDICT: "predict", METRICS: "metrics"}[token]


def check_route(client: TestClient, method: str, path: str, right: str, other: str) -> None:
    needed = scope_name(right)
    assert_refused(call(client, method, path, None), 401, needed)
    body = assert_refused(call(client, method, path, WRONG), 401, needed)
    assert 'error="invalid_token"' in call(client, method, path, WRONG).headers["www-authenticate"]
    assert WRONG not in str(body)
    forbidden = assert_refused(call(client, method, path, other), 403, needed)
    assert needed in forbidden["detail"]
    assert call(client, method, path, right).status_code == 200


@pytest.mark.parametrize(("method", "path", "right", "other"), PROTECTED)
def test_a_protected_route_needs_a_token_of_its_scope(
    client: TestClient, method: str, path: str, right: str, other: str
) -> None:
    check_route(client, method, path, right, other)


@pytest.mark.parametrize(("method", "path", "right", "other"), PROBES)
def test_probes_are_open_by_default(
    client: TestClient, method: str, path: str, right: str, other: str
) -> None:
    for token in (None, WRONG, other, right):
        assert call(client, method, path, token).status_code == 200


@pytest.mark.parametrize(("method", "path", "right", "other"), PROBES + PROTECTED)
def test_closed_probes_need_the_metrics_scope(
    closed_client: TestClient, method: str, path: str, right: str, other: str
) -> None:
    check_route(closed_client, method, path, right, other)


@pytest.mark.parametrize("path", PUBLIC)
def test_pages_without_data_stay_open(closed_client: TestClient, path: str) -> None:
    for token in (None, WRONG, READ):
        assert call(closed_client, "GET", path, token).status_code == 200


def test_the_tables_cover_every_route_and_the_tests_cover_the_tables(client: TestClient) -> None:
    paths = set(route_paths(client.app.routes))  # type: ignore[attr-defined]
    assert paths == set(ROUTE_SCOPES) | PUBLIC_ROUTES
    tested = {path for _, path, _, _ in PROTECTED + PROBES}
    assert tested == set(ROUTE_SCOPES)
    assert {"/static/{name}" if p.startswith("/static/") else p for p in PUBLIC} == PUBLIC_ROUTES


def test_an_unclassified_route_is_refused_at_build() -> None:
    app = FastAPI()

    @app.post("/model/reset")
    def reset() -> None: ...

    with pytest.raises(UnclassifiedRouteError, match="/model/reset"):
        check_routes_classified(app.routes)
    check_routes_classified([route for route in app.routes if route.path != "/model/reset"])  # type: ignore[attr-defined]


def test_with_auth_none_every_route_is_open(tmp_path: Path) -> None:
    test_client, _ = make_client(settings_with(auth="none", open_paths=[]), tmp_path)
    with test_client:
        for method, path, _, _ in PROTECTED + PROBES:
            assert call(test_client, method, path, None).status_code == 200


def test_the_scheme_is_case_insensitive_and_other_schemes_are_no_token(client: TestClient) -> None:
    assert client.get("/model", headers={"Authorization": f"bearer {READ}"}).status_code == 200
    response = client.get("/model", headers={"Authorization": f"Basic {READ}"})
    assert_refused(response, 401, "read")
    assert "invalid_token" not in response.headers["www-authenticate"]


# -- lockout --------------------------------------------------------------------------------------


def test_an_address_failing_too_often_is_locked_out(tmp_path: Path) -> None:
    test_client, registry = make_client(settings_with(), tmp_path)
    other_client = TestClient(test_client.app, client=("10.0.0.9", 50_000))
    with test_client:
        for _ in range(FAILURE_LIMIT):
            assert_refused(call(test_client, "GET", "/model", WRONG), 401, "read")
        locked = call(test_client, "GET", "/model", READ)
        assert locked.status_code == 429, locked.text
        assert locked.headers["content-type"] == PROBLEM
        assert int(locked.headers["retry-after"]) >= 1
        assert call(test_client, "POST", "/predict", PREDICT).status_code == 429
        assert call(test_client, "GET", "/healthz", None).status_code == 200
        assert call(other_client, "GET", "/model", READ).status_code == 200
        failures = "novikoff_http_auth_failures_total"
        assert registry.get_sample_value(failures, {"outcome": "invalid"}) == FAILURE_LIMIT
        assert registry.get_sample_value(failures, {"outcome": "locked_out"}) == 2
        assert registry.get_sample_value("novikoff_http_auth_lockouts_total") == 1
        metrics_text = test_client.get("/metrics").text
        assert 'novikoff_http_auth_failures_total{outcome="missing"} 0.0' in metrics_text


def test_rotation_through_the_tokens_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two tokens valid, then one withdrawn by rewriting the file (re-read on change)."""
    monkeypatch.delenv(TOKENS_ENV_VAR)
    old, new = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    token_file = tmp_path / "tokens"
    token_file.write_text(f"read:{old}\n")
    settings = settings_with(tokens_file=str(token_file), tokens_reload_seconds=0)
    test_client, _ = make_client(settings, tmp_path)
    with test_client:
        assert call(test_client, "GET", "/model", old).status_code == 200
        assert call(test_client, "GET", "/model", new).status_code == 401
        token_file.write_text(f"read:{old}\nread:{new}\n")
        assert call(test_client, "GET", "/model", old).status_code == 200
        assert call(test_client, "GET", "/model", new).status_code == 200
        token_file.write_text(f"read:{new}\n")
        assert_refused(call(test_client, "GET", "/model", old), 401, "read")
        assert call(test_client, "GET", "/model", new).status_code == 200


def test_missing_and_forbidden_do_not_count_towards_lockout(client: TestClient) -> None:
    for _ in range(FAILURE_LIMIT + 1):
        assert call(client, "GET", "/model", None).status_code == 401
        assert call(client, "GET", "/model", PREDICT).status_code == 403
    assert call(client, "GET", "/model", READ).status_code == 200


# -- never shown ----------------------------------------------------------------------------------


def test_tokens_and_digests_are_never_shown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token_file = tmp_path / "tokens"
    file_token = secrets.token_urlsafe(32)
    token_file.write_text(f"read:{file_token}\n")
    settings = settings_with(tokens_file=str(token_file))
    caplog.set_level(logging.DEBUG)
    test_client, _ = make_client(settings, tmp_path)
    with test_client:
        shown = [
            repr(settings),
            str(settings.model_dump()),
            repr(test_client.app.access_guard),  # type: ignore[attr-defined]
            test_client.get("/stats", headers={"Authorization": f"Bearer {READ}"}).text,
            test_client.get("/model", headers={"Authorization": f"Bearer {file_token}"}).text,
            test_client.get("/metrics").text,
            test_client.get("/openapi.json").text,
            call(test_client, "GET", "/model", WRONG).text,
        ]
    shown.append(caplog.text)
    assert "4 tokens" in shown[2], shown[2]
    secrets_used = (READ, PREDICT, METRICS, WRONG, file_token)
    assert not shows_a_secret(shown, secrets_used)
    # Controls: the check finds a token, or its digest, wherever one is shown.
    assert shows_a_secret([*shown, f"header was Bearer {file_token}"], secrets_used)
    assert shows_a_secret([*shown, f"digest={digest(PREDICT).hex()}"], secrets_used)


def shows_a_secret(texts: list[str], tokens: tuple[str, ...]) -> bool:
    forms = [
        form
        for token in tokens
        for form in (token, digest(token).hex(), digest(token).decode("latin-1"))
    ]
    return any(form in text for form in forms for text in texts)


def test_a_bad_token_entry_is_reported_without_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = secrets.token_urlsafe(32)
    monkeypatch.setenv(TOKENS_ENV_VAR, f"{secret}:read")  # scope and token swapped
    with pytest.raises(TokenConfigError) as raised:
        make_client(settings_with(), tmp_path)
    assert TOKENS_ENV_VAR in str(raised.value) and secret not in str(raised.value)


def test_token_auth_without_tokens_refuses_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKENS_ENV_VAR)
    with pytest.raises(TokenConfigError, match="at least one token"):
        make_client(settings_with(), tmp_path)


# -- OpenAPI and the warning ----------------------------------------------------------------------


def test_openapi_declares_the_bearer_scheme_on_protected_operations(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "A token from $NOVIKOFF_HTTP_TOKENS or http.tokens_file.",
    }
    assert spec["paths"]["/predict"]["post"]["security"] == [{"bearer": ["predict"]}]
    assert spec["paths"]["/model"]["get"]["security"] == [{"bearer": ["read"]}]
    assert spec["paths"]["/stats/history"]["get"]["security"] == [{"bearer": ["read"]}]
    assert "security" not in spec["paths"]["/healthz"]["get"]
    refusals = spec["paths"]["/model"]["get"]["responses"]
    assert {"401", "403", "429"} <= set(refusals)
    assert PROBLEM in refusals["401"]["content"]


def test_openapi_has_no_scheme_without_auth(tmp_path: Path) -> None:
    test_client, _ = make_client(settings_with(auth="none"), tmp_path)
    with test_client:
        spec = test_client.get("/openapi.json").json()
    assert "securitySchemes" not in spec["components"]
    assert "security" not in spec["paths"]["/model"]["get"]


@pytest.mark.parametrize(
    ("host", "auth", "warned"),
    [
        ("0.0.0.0", "none", True),
        ("10.1.2.3", "none", True),
        ("::", "none", True),
        ("0.0.0.0", "token", False),
        ("127.0.0.1", "none", False),
        ("::1", "none", False),
        ("localhost", "none", False),
    ],
)
def test_a_non_loopback_bind_without_auth_warns_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, host: str, auth: str, warned: bool
) -> None:
    caplog.set_level(logging.WARNING, logger="service.http.auth.guard")
    make_client(settings_with(host=host, auth=auth), tmp_path)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "auth" in r.message]
    assert bool(warnings) == warned, caplog.text
    if warned:
        assert host in warnings[0].getMessage()
