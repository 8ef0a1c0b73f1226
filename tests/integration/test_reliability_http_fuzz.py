"""HTTP fuzzing: schemathesis with all its checks, and raw hostile bodies, against the real server.

The service runs as ``novikoff serve`` on a real broker. schemathesis (CLI; phases examples,
coverage and fuzzing; every built-in check plus :mod:`tests.support.problem_check`) must find no
issue: no 5xx, responses that match the OpenAPI document, negative data refused, and every 4xx an
``application/problem+json`` body whose ``status`` is the response's. The custom check is shown
to be loaded by the same run failing on an app whose 4xx are plain JSON. A second, schema-blind
fuzzer posts arbitrary bytes and arbitrary JSON to ``POST /predict``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from service.http.server import HttpServer
from service.settings import load_settings
from service.topics import ensure_topics
from tests.support.faults import ConfiguredStream, FaultyService
from tests.support.ledger import EventPlan, publish, record_figures

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MAX_EXAMPLES = 300
SCHEMATHESIS_TIMEOUT_S = 400.0
CLIENT_ERRORS = range(400, 500)
ACCEPTED_STATUSES = {200, 400, 413, 415, 422}
FEATURES = 4
RAW_BODY_EXAMPLES = 400
PHASES = ("examples", "coverage", "fuzzing")
"""schemathesis's stateful phase is not run: it chains operations through OpenAPI links, and
no operation here creates anything another could use (schemathesis reports it not applicable)."""
PHASE_PASSED = "✅"
"""How schemathesis's summary marks a phase that ran and passed (skipped ones get ⏭)."""
PROBLEM_CHECK_MODULE = "tests.support.problem_check"
CUSTOM_CHECK = "client_errors_are_problem_details"
SERVER_STOP_S = 5.0


@pytest.fixture(scope="module")
def live_service(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FaultyService]:
    """A service that has learned a little, so predictions are not all from a zero model."""
    workdir = tmp_path_factory.mktemp("fuzz")
    topic = f"fuzz-{os.urandom(5).hex()}"
    settings_ = load_settings(kafka={"bootstrap_servers": kafka_bootstrap})
    ensure_topics(settings_.kafka, [topic, f"{topic}.dlq"])
    stream = ConfiguredStream(dim=FEATURES, seed=8)
    publish(kafka_bootstrap, topic, EventPlan(stream.synthetic()).valid(500))
    service = FaultyService(
        workdir=workdir,
        bootstrap=kafka_bootstrap,
        topic=topic,
        stream=stream,
        log_path=workdir / "serve.log",
    )
    try:
        service.start()
        service.wait_for("learned", lambda s: s["seen"] == 500, 60.0)
        yield service
    finally:
        service.stop()


def schemathesis_command() -> list[str]:
    script = Path(sys.executable).with_name("st")
    return [str(script)] if script.exists() else [sys.executable, "-m", "schemathesis.cli"]


def run_schemathesis(
    base_url: str, workdir: Path, seed: int, *, hooks: bool = True
) -> subprocess.CompletedProcess[str]:
    """The schemathesis CLI on ``base_url``'s OpenAPI document: the listed phases, every
    built-in check and, with ``hooks``, :mod:`tests.support.problem_check`."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    if hooks:
        env["SCHEMATHESIS_HOOKS"] = PROBLEM_CHECK_MODULE
    else:
        env.pop("SCHEMATHESIS_HOOKS", None)
    return subprocess.run(
        [
            *schemathesis_command(),
            "run",
            f"{base_url}/openapi.json",
            "--checks",
            "all",
            "--phases",
            ",".join(PHASES),
            "--max-examples",
            str(MAX_EXAMPLES),
            "--seed",
            str(seed),
            "--report",
            "har",
            "--report-har-path",
            str(workdir / "schemathesis.har"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=workdir,  # schemathesis keeps a cache in its working directory
        timeout=SCHEMATHESIS_TIMEOUT_S,
        check=False,
    )


def test_schemathesis_finds_nothing_with_every_check(
    live_service: FaultyService, tmp_path: Path, artifacts_dir: Path
) -> None:
    seed = random.SystemRandom().randrange(2**31)
    result = run_schemathesis(live_service.base_url, tmp_path, seed)
    output = result.stdout + result.stderr
    (artifacts_dir / "schemathesis.txt").write_text(output, encoding="utf-8")
    assert result.returncode == 0, output[-6000:]
    assert "No issues found" in output, output[-6000:]
    for phase in PHASES:
        assert f"{PHASE_PASSED} {phase.capitalize()}" in output, f"{phase} did not run"
    har = tmp_path / "schemathesis.har"
    statuses = Counter(
        int(entry["response"]["status"]) for entry in json.loads(har.read_text())["log"]["entries"]
    )
    assert not [s for s in statuses if s >= 500], statuses
    assert any(s in CLIENT_ERRORS for s in statuses), "the fuzzer never reached a 4xx"
    assert live_service.alive
    generated = next(
        (line for line in output.splitlines() if "generated" in line and "passed" in line), ""
    )
    record_figures(
        artifacts_dir,
        "schemathesis",
        seed=seed,
        summary=generated.strip(),
        recorded_statuses=dict(sorted(statuses.items())),
    )


class Item(BaseModel):
    """The control app's body: strict, so schemathesis's negative data is refused."""

    model_config = ConfigDict(extra="forbid", strict=True)
    size: int


def plain_json_errors_app() -> FastAPI:
    """A FastAPI app that honours its own OpenAPI document but answers a bad body with FastAPI's
    usual 422 ``application/json``, not a problem+json: only the custom check can object."""
    app = FastAPI()

    @app.post("/items", responses={400: {"description": "the body is not JSON"}})
    def items(item: Item) -> dict[str, int]:
        return {"size": item.size}

    return app


def test_the_problem_check_is_loaded_and_fails_a_wrong_4xx(tmp_path: Path) -> None:
    """The same schemathesis run as above, against :func:`plain_json_errors_app`: it fails, and
    the failure is the custom check's. The control: without the hook, the same run on the same
    app finds no issue, so the custom check is the only thing that failed it."""
    server = HttpServer(plain_json_errors_app(), "127.0.0.1", 0, graceful_timeout_s=1.0)
    server.start()
    try:
        seed = random.SystemRandom().randrange(2**31)
        with_check = run_schemathesis(server.url, tmp_path, seed)
        output = with_check.stdout + with_check.stderr
        assert with_check.returncode != 0, output[-6000:]
        assert f"Custom check failed: `{CUSTOM_CHECK}`" in output, output[-6000:]
        assert "application/json', not application/problem+json" in output, output[-6000:]
        without = run_schemathesis(server.url, tmp_path, seed, hooks=False)
        output = without.stdout + without.stderr
        assert without.returncode == 0 and "No issues found" in output, output[-6000:]
    finally:
        server.stop(SERVER_STOP_S)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=6)
        | st.dictionaries(
            st.sampled_from(["features", "instances", "predictor", "x"]), children, max_size=4
        )
    ),
    max_leaves=30,
)
predict_like = st.fixed_dictionaries(
    {},
    optional={
        "features": st.one_of(
            st.lists(st.floats() | st.integers() | st.booleans() | st.none(), max_size=6),
            json_values,
        ),
        "instances": st.lists(st.fixed_dictionaries({"features": json_values}), max_size=4),
        "predictor": st.sampled_from(["last", "averaged", "voted", "best", ""]) | json_values,
    },
)


def raw_json(value: object) -> bytes:
    """JSON as a careless client writes it: NaN and Infinity included."""
    return json.dumps(value, allow_nan=True).encode()


@settings(
    max_examples=RAW_BODY_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    body=st.one_of(
        st.binary(max_size=200),
        predict_like.map(raw_json),
        json_values.map(raw_json),
        st.integers(1, 50_000).map(
            lambda depth: b'{"features": ' + b"[" * depth + b"]" * depth + b"}"
        ),
    ),
    content_type=st.sampled_from(
        [
            "application/json",
            "application/json; charset=utf-8",
            "text/plain",
            "application/problem+json",
        ]
    ),
)
def test_predict_answers_hostile_bodies_with_problems_never_5xx(
    live_service: FaultyService, body: bytes, content_type: str
) -> None:
    response = httpx.post(
        f"{live_service.base_url}/predict",
        content=body,
        headers={"content-type": content_type},
        timeout=10.0,
    )
    assert response.status_code in ACCEPTED_STATUSES, (
        response.status_code,
        response.text,
        body[:200],
    )
    if response.status_code != 200:
        assert response.headers["content-type"].startswith("application/problem+json")
        assert response.json()["status"] == response.status_code
