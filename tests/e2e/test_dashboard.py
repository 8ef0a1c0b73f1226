"""The dashboard in a real headless Chromium, fed by the real service and a real stream.

``novikoff serve`` consumes a synthetic stream that ``novikoff produce`` publishes to the broker
fixture; the page must draw a nonzero mistake count, and once the stream has drained every number
it shows must equal ``GET /stats``. Screenshots (laptop and phone widths) go to test-artifacts/.

Driver: Chrome DevTools Protocol over Chromium's own websocket (``tests/support/chromium.py``, with
the ``websocket-client`` package). It needs nothing but Debian's ``chromium``, whereas Selenium
would add a second system package (``chromium-driver``) that must match the browser's version
exactly, plus a larger client library; CDP also reports the page's JavaScript exceptions and
console errors, which the test asserts are empty.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.settings import load_settings
from service.topics import ensure_topics
from tests.support.chromium import Chromium, Page, chromium_binary
from tests.support.running_service import RunningService, Stream, produce

pytestmark = pytest.mark.e2e

STREAM = Stream(dim=4, seed=5, count=4_000, margin=0.1, noise=0.0, malformed=0.02, rate=500)
"""Separable with a clear margin, so the chart shows the mistakes levelling off under Novikoff's
bound; a few malformed records so the invalid counts are not all zero; published over ~8 s so
the once-a-second history draws a curve of several points."""
MIN_CHART_POINTS = 5
LAPTOP = (1280, 900)
PHONE = (390, 844)
CHART_TIMEOUT_S = 60.0
MATCH_TIMEOUT_S = 45.0
REFRESH_WAIT_S = 1.5
DISPLAY_DIGITS = 4
"""The page shows non-integers to four significant digits."""

READ_PAGE = """(() => {
  const value = (node) => node.dataset.value === "" ? null : Number(node.dataset.value);
  const stats = {};
  const texts = {};
  for (const node of document.querySelectorAll("[data-stat]")) {
    stats[node.dataset.stat] = value(node);
    texts[node.dataset.stat] = node.textContent;
  }
  const refs = {};
  for (const row of document.querySelectorAll("#refs tr[data-ref]")) {
    const cells = {};
    for (const cell of row.querySelectorAll("[data-field]")) {
      cells[cell.dataset.field] = { value: value(cell), text: cell.textContent };
    }
    refs[row.dataset.ref] = cells;
  }
  const invalid = {};
  for (const node of document.querySelectorAll("#invalid-reasons [data-reason]")) {
    invalid[node.dataset.reason] = value(node);
  }
  const chart = document.querySelector("#chart").dataset;
  const svg = document.querySelector("#chart-svg");
  return {
    stats, texts, refs, invalid,
    chart: {
      seen: Number(chart.seen), mistakes: Number(chart.mistakes), points: Number(chart.points),
    },
    mistakesPath: (svg.querySelector(".mistakes-line") || {}).getAttribute?.("d") || "",
    boundPaths: Array.from(svg.querySelectorAll(".bound-line")).map((p) => p.dataset.ref),
    connection: document.body.dataset.connection,
  };
})()"""


@pytest.fixture(scope="module")
def browser(artifacts_dir: Path) -> Iterator[Chromium]:
    binary = chromium_binary()
    assert binary is not None, "chromium is not installed (`make system-deps` installs it)"
    with Chromium(binary, log_path=artifacts_dir / "chromium.log") as running:
        yield running


@pytest.fixture
def service(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path, artifacts_dir: Path
) -> Iterator[RunningService]:
    log = artifacts_dir / "e2e-dashboard-novikoff.log"
    with RunningService(tmp_path, kafka_bootstrap, topic_name, STREAM, log) as running:
        yield running


STAT_KEYS = (
    "seen",
    "mistakes",
    "events_per_second",
    "invalid",
    "lag",
    "model_version",
    "radius",
    "prequential.last",
    "prequential.averaged",
    "prequential.voted",
)


def expected_from(stats: dict[str, Any]) -> dict[str, Any]:
    """What the page must show for a ``/stats`` body."""
    return {
        "seen": stats["seen"],
        "mistakes": stats["mistakes"],
        "events_per_second": stats["events_per_second"],
        "invalid": sum(stats["invalid"].values()),
        "lag": stats["lag"],
        "model_version": stats["model_version"],
        "radius": stats["radius"],
        "prequential.last": stats["prequential_mistakes"]["last"],
        "prequential.averaged": stats["prequential_mistakes"]["averaged"],
        "prequential.voted": stats["prequential_mistakes"]["voted"],
    }


def shown_on(view: dict[str, Any]) -> dict[str, Any]:
    """The page's raw values of the numbers :func:`expected_from` names."""
    return {key: view["stats"].get(key) for key in STAT_KEYS}


def read_matching_view(
    page: Page, service: RunningService
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The page's numbers and a ``/stats`` they equal, read while the service is at rest."""
    deadline = time.monotonic() + MATCH_TIMEOUT_S
    last: tuple[dict[str, Any], dict[str, Any]] | None = None
    while time.monotonic() < deadline:
        before = service.stats()
        view = page.evaluate(READ_PAGE)
        after = service.stats()
        last = (view, after)
        if before == after and shown_on(view) == expected_from(after):
            return view, after
        time.sleep(REFRESH_WAIT_S)
    assert last is not None
    view, stats = last
    raise AssertionError(
        f"the page never showed /stats:\npage  {json.dumps(shown_on(view))}\n"
        f"stats {json.dumps(expected_from(stats))}"
    )


def assert_text_shows(text: str, value: float) -> None:
    """The displayed text is the value, formatted for people (grouping, 4 significant digits)."""
    shown = float(text.replace(",", ""))
    if float(value).is_integer() or abs(value) >= 10**DISPLAY_DIGITS:
        assert shown == pytest.approx(value, abs=0.5), (text, value)
    else:
        assert shown == pytest.approx(value, rel=10 ** (1 - DISPLAY_DIGITS)), (text, value)


def test_dashboard_shows_the_live_stats(
    browser: Chromium, service: RunningService, kafka_bootstrap: str, artifacts_dir: Path
) -> None:
    page = browser.new_page()
    page.set_viewport(*LAPTOP)
    page.navigate(f"{service.base_url}/")

    produce(kafka_bootstrap, service.topic, STREAM, artifacts_dir / "e2e-dashboard-produce.log")
    page.wait_for("Number(document.querySelector('#chart').dataset.mistakes) > 0", CHART_TIMEOUT_S)
    drained = service.wait_drained(STREAM.count)
    assert drained["mistakes"] > 0
    view, stats = read_matching_view(page, service)

    for key, value in expected_from(stats).items():
        if key != "events_per_second":
            assert_text_shows(view["texts"][key], value)
    assert view["texts"]["ready"] == "ready"
    assert view["invalid"] == stats["invalid"]
    assert stats["invalid"], "the stream has malformed records"

    assert set(view["refs"]) == {ref["name"] for ref in stats["bounds"]}
    for ref in stats["bounds"]:
        cells = view["refs"][ref["name"]]
        for field in ("gamma", "k", "bound"):
            assert cells[field]["value"] == ref[field], (ref["name"], field)
            assert_text_shows(cells[field]["text"], ref[field])
    assert sorted(view["boundPaths"]) == sorted(ref["name"] for ref in stats["bounds"])

    assert view["chart"]["mistakes"] == stats["mistakes"]
    assert view["chart"]["seen"] == stats["seen"]
    assert view["chart"]["points"] >= MIN_CHART_POINTS
    assert view["mistakesPath"].count("L") >= 1, "the mistakes curve is drawn"
    assert view["connection"] == "live"

    page.screenshot(artifacts_dir / "dashboard-laptop.png")
    page.set_viewport(*PHONE, mobile=True)
    time.sleep(REFRESH_WAIT_S)
    overflow = page.evaluate("document.documentElement.scrollWidth > window.innerWidth")
    assert overflow is False, "the phone layout must not scroll sideways"
    page.screenshot(artifacts_dir / "dashboard-phone.png")

    assert page.exceptions == []
    assert page.console_errors == []


MIXING_PARTITIONS = 2
MIXING_ROUND_EVENTS = 400
READ_MIXING = """(() => {
  const card = document.querySelector("#mixing-card");
  const value = (node) => node.dataset.value === "" ? null : Number(node.dataset.value);
  const summary = {};
  for (const node of card.querySelectorAll("[data-mixing]")) {
    summary[node.dataset.mixing] = value(node);
  }
  const refs = {};
  for (const row of card.querySelectorAll("#mixing-refs tr[data-ref]")) {
    const cells = {};
    for (const cell of row.querySelectorAll("[data-field]")) {
      cells[cell.dataset.field] = { value: value(cell), text: cell.textContent };
    }
    refs[row.dataset.ref] = { cells, violated: row.dataset.violated };
  }
  return { hidden: card.hidden, summary, refs };
})()"""


def test_the_distributed_bound_card_shows_mixing_mode_and_hides_otherwise(
    browser: Chromium,
    kafka_bootstrap: str,
    topic_name: str,
    tmp_path: Path,
    artifacts_dir: Path,
    service: RunningService,
) -> None:
    """In mixing mode the page shows the round, P and each reference's distributed bound exactly
    as ``/stats`` ``mixing`` has them; without mixing (the ``service`` fixture) the card stays
    hidden (the control)."""
    plain = browser.new_page()
    plain.navigate(f"{service.base_url}/")
    plain.wait_for("document.body.dataset.connection === 'live'", CHART_TIMEOUT_S)
    assert plain.evaluate(READ_MIXING)["hidden"] is True

    mixing_topic = f"{topic_name}-mixing"
    kafka = load_settings(kafka={"bootstrap_servers": kafka_bootstrap}).kafka
    ensure_topics(kafka, [mixing_topic, f"{mixing_topic}.dlq"], partitions=MIXING_PARTITIONS)
    log = artifacts_dir / "e2e-dashboard-mixing-novikoff.log"
    (tmp_path / "mixing").mkdir()
    env = {"NOVIKOFF_MIXING__ROUND_EVENTS": str(MIXING_ROUND_EVENTS)}
    with RunningService(
        tmp_path / "mixing", kafka_bootstrap, mixing_topic, STREAM, log, extra_env=env
    ) as mixing:
        page = browser.new_page()
        page.set_viewport(*LAPTOP)
        page.navigate(f"{mixing.base_url}/")
        produce(kafka_bootstrap, mixing_topic, STREAM, artifacts_dir / "e2e-mixing-produce.log")
        deadline = time.monotonic() + MATCH_TIMEOUT_S
        section: dict[str, Any] = {}
        view: dict[str, Any] = {}
        while time.monotonic() < deadline:
            before = mixing.stats().get("mixing") or {}
            view = page.evaluate(READ_MIXING)
            after = mixing.stats().get("mixing") or {}
            settled = after.get("round", 0) >= 2 and before == after
            if settled and view["summary"].get("round") == after["round"]:
                section = after
                break
            time.sleep(REFRESH_WAIT_S)
        assert section, f"the page never showed a settled mixed round >= 2: {view}"
        assert view["hidden"] is False
        assert view["summary"] == {
            "round": section["round"],
            "partitions": MIXING_PARTITIONS,
            "mistakes": section["mistakes"],
        }
        assert set(view["refs"]) == {status["name"] for status in section["bound"]} == {"u"}
        for status in section["bound"]:
            shown = view["refs"][status["name"]]
            assert shown["violated"] == "false" and status["violated"] is False
            for field in ("k_mixed", "total_bound"):
                assert shown["cells"][field]["value"] == status[field], field
                assert_text_shows(shown["cells"][field]["text"], status[field])
            ratio = status["total_mistakes"] / status["total_bound"]
            assert shown["cells"]["ratio"]["value"] == pytest.approx(ratio, rel=1e-12)
        page.screenshot(artifacts_dir / "dashboard-mixing.png")
        assert page.exceptions == [] and page.console_errors == []
