"""The dashboard in headless Chromium against an API that needs tokens.

The page asks for a token when ``/stats`` answers 401, says so when the token lacks the ``read``
scope (403), shows the numbers once a ``read`` token is entered, and keeps the token for the tab
(a reload goes straight to the numbers). The app runs in this process on a trained engine.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from service.http.app import create_app
from service.http.server import HttpServer
from service.observability.metrics import Metrics
from service.settings import TOKENS_ENV_VAR, load_settings
from tests.support.chromium import Chromium, chromium_binary
from tests.unit.service.engines import PLA_EVENTS, FakeRunner, trained_engine

pytestmark = pytest.mark.e2e

READ = secrets.token_urlsafe(32)
PREDICT = secrets.token_urlsafe(32)
WAIT_S = 20.0
STOP_S = 5.0
REFUSED_STATUSES = ("401", "403")

FORM_SHOWN = "!document.querySelector('#token-form').hidden"
REASON = "document.querySelector('#token-reason').textContent"
SEEN = "document.querySelector('#seen').dataset.value"


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HttpServer]:
    monkeypatch.setenv(TOKENS_ENV_VAR, f"read:{READ} predict:{PREDICT}")
    settings = load_settings(model={"dim": 1}, http={"port": 0, "auth": "token"})
    metrics = Metrics(CollectorRegistry())
    engine = trained_engine(settings, PLA_EVENTS, tmp_path, metrics)
    app = create_app(settings, engine, FakeRunner(connected=True), metrics)
    running = HttpServer(app, "127.0.0.1", 0, graceful_timeout_s=1.0)
    running.start()
    try:
        yield running
    finally:
        assert running.stop(STOP_S)


def submit(token: str) -> str:
    return (
        f"document.querySelector('#token-input').value = {token!r};"
        "document.querySelector('#token-form').requestSubmit(); true"
    )


def test_the_dashboard_asks_for_a_token_and_then_shows_the_stats(
    server: HttpServer, artifacts_dir: Path
) -> None:
    binary = chromium_binary()
    assert binary is not None, "chromium is not installed (`make system-deps` installs it)"
    seen = httpx.get(
        f"{server.url}/stats", headers={"Authorization": f"Bearer {READ}"}, timeout=STOP_S
    ).json()["seen"]
    assert seen == len(PLA_EVENTS)
    with Chromium(binary, log_path=artifacts_dir / "chromium-token.log") as browser:
        page = browser.new_page()
        page.navigate(f"{server.url}/")
        page.wait_for(FORM_SHOWN, WAIT_S)
        assert "needs a token" in page.evaluate(REASON)
        assert page.evaluate("document.body.dataset.connection") == "token"
        assert page.evaluate(SEEN) == "", "no number is shown without a token"
        page.screenshot(artifacts_dir / "dashboard-token-form.png")

        page.evaluate(submit(PREDICT))
        page.wait_for(f"{FORM_SHOWN} && {REASON}.includes('lacks the read scope')", WAIT_S)

        page.evaluate(submit(READ))
        page.wait_for(f"document.body.dataset.connection === 'live' && {SEEN} === '{seen}'", WAIT_S)
        assert page.evaluate(FORM_SHOWN) is False
        page.screenshot(artifacts_dir / "dashboard-token.png")

        page.navigate(f"{server.url}/")
        page.wait_for(f"{SEEN} === '{seen}'", WAIT_S)
        assert page.evaluate(FORM_SHOWN) is False, "the tab kept its token across a reload"

        assert page.exceptions == []
        unexpected = [
            error
            for error in page.console_errors
            if not any(f"status of {status}" in error for status in REFUSED_STATUSES)
        ]
        assert unexpected == [], page.console_errors
