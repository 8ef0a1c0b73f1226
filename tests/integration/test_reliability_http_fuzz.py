"""HTTP fuzzing: schemathesis with all its checks, and raw hostile bodies, against the real server.

The service runs as ``novikoff serve`` on a real broker. schemathesis (CLI, every phase, every
built-in check plus :mod:`tests.support.problem_check`) must find no issue: no 5xx, responses
that match the OpenAPI document, negative data refused, and every 4xx an
``application/problem+json`` body whose ``status`` is the response's. A second, schema-blind
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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


def test_schemathesis_finds_nothing_with_every_check(
    live_service: FaultyService, tmp_path: Path, artifacts_dir: Path
) -> None:
    seed = random.SystemRandom().randrange(2**31)
    har = tmp_path / "schemathesis.har"
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "tests.support.problem_check",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    result = subprocess.run(
        [
            *schemathesis_command(),
            "run",
            f"{live_service.base_url}/openapi.json",
            "--checks",
            "all",
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "--max-examples",
            str(MAX_EXAMPLES),
            "--seed",
            str(seed),
            "--report",
            "har",
            "--report-har-path",
            str(har),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,  # schemathesis keeps a cache in its working directory
        timeout=SCHEMATHESIS_TIMEOUT_S,
        check=False,
    )
    output = result.stdout + result.stderr
    (artifacts_dir / "schemathesis.txt").write_text(output, encoding="utf-8")
    assert result.returncode == 0, output[-6000:]
    assert "No issues found" in output, output[-6000:]
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
    max_examples=400,
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
