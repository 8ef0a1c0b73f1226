"""The dashboard router: the page, its static files and ``GET /stats/history``."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.http.dashboard import STATIC_MEDIA_TYPES, router
from service.observability.history import StatsHistory

SVG_NAMESPACE = "http://www.w3.org/2000/svg"


class _LinkCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: list[str] = []
        self.stats: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for attribute in ("src", "href"):
            if values.get(attribute):
                self.links.append(str(values[attribute]))
        if values.get("id"):
            self.ids.append(str(values["id"]))
        if values.get("data-stat"):
            self.stats.append(str(values["data-stat"]))


@pytest.fixture
def history() -> StatsHistory:
    return StatsHistory(capacity=16)


@pytest.fixture
def client(history: StatsHistory) -> TestClient:
    app = FastAPI()
    app.state.history = history
    app.include_router(router)
    return TestClient(app)


def page_links(client: TestClient) -> _LinkCollector:
    collector = _LinkCollector()
    collector.feed(client.get("/").text)
    return collector


def test_page_is_html_and_forbids_other_origins(client: TestClient) -> None:
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    policy = response.headers["content-security-policy"]
    assert "default-src 'none'" in policy
    assert "connect-src 'self'" in policy
    assert "script-src 'self'" in policy


def test_page_links_only_its_own_files(client: TestClient) -> None:
    links = page_links(client).links
    assert links, "the page links its script and style"
    for link in links:
        assert "//" not in link and ":" not in link, f"{link} points at another origin"
    assets = [link for link in links if link.startswith("static/")]
    assert len(assets) == 3, "script, style and icon"
    for link in assets:
        assert client.get(f"/{link}").status_code == 200, link


def test_static_files_name_no_other_origin(client: TestClient) -> None:
    for name in STATIC_MEDIA_TYPES:
        body = client.get(f"/static/{name}").text
        urls = set(re.findall(r"https?://[^\s\"')]+", body)) - {SVG_NAMESPACE}
        assert urls == set(), f"{name} names {urls}"


def test_page_exposes_the_numbers_the_e2e_test_reads(client: TestClient) -> None:
    collector = page_links(client)
    for stat in ("seen", "mistakes", "events_per_second", "invalid", "lag", "model_version"):
        assert stat in collector.stats
    assert "radius" in collector.stats
    assert {"chart", "chart-svg", "refs", "legend"} <= set(collector.ids)


@pytest.mark.parametrize(("name", "media_type"), sorted(STATIC_MEDIA_TYPES.items()))
def test_static_files_have_their_media_type(client: TestClient, name: str, media_type: str) -> None:
    response = client.get(f"/static/{name}")
    assert response.status_code == 200
    assert response.headers["content-type"] == media_type
    assert response.content


@pytest.mark.parametrize("name", ["index.html", "..%2Fhistory.py", "missing.js", "%2e%2e"])
def test_other_static_names_are_not_found(client: TestClient, name: str) -> None:
    assert client.get(f"/static/{name}").status_code == 404


def test_history_endpoint_serves_the_ring_buffer(client: TestClient, history: StatsHistory) -> None:
    assert client.get("/stats/history").json() == {"capacity": 16, "points": []}
    history.record({"seen": 10, "mistakes": 4, "bounds": [{"name": "u", "bound": 25.0}]}, now=5.0)
    history.record({"seen": 20, "mistakes": 5, "bounds": [{"name": "u", "bound": None}]}, now=6.0)
    assert client.get("/stats/history").json() == {
        "capacity": 16,
        "points": [
            {"t": 5.0, "seen": 10, "mistakes": 4, "bounds": {"u": 25.0}},
            {"t": 6.0, "seen": 20, "mistakes": 5, "bounds": {"u": None}},
        ],
    }


def test_history_endpoint_is_documented(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    assert "/stats/history" in schema["paths"]
    assert "/" not in schema["paths"]
    assert "HistoryModel" in schema["components"]["schemas"]


def test_an_app_without_a_history_fails_loudly() -> None:
    app = FastAPI()
    app.include_router(router)
    with pytest.raises(RuntimeError, match=r"app\.state\.history"):
        TestClient(app).get("/stats/history")


def test_page_asks_for_a_token_and_sends_it_as_a_bearer_header(client: TestClient) -> None:
    """The form the page shows on a 401/403, and the header it sends (the token-protected
    page is exercised in Chromium by ``tests/e2e/test_dashboard_token.py``)."""
    collector = page_links(client)
    assert {"token-form", "token-input", "token-reason"} <= set(collector.ids)
    script = client.get("/static/dashboard.js").text
    assert "headers.Authorization = `Bearer ${state.token}`" in script
    assert "sessionStorage.setItem(TOKEN_KEY" in script
    assert "localStorage.setItem(TOKEN_KEY" not in script, "the token lives for the tab only"
