"""The HTTP API with a real learner behind it: predictions, problems, limits, readiness."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from consumers.decoding.events import (
    MAX_NESTING_DEPTH,
    EventDecoder,
    InvalidEventError,
    parse_event_json,
)
from consumers.faults import unknown_topic
from learning import DenseEncoder, LabelMap
from service.http.app import create_app
from service.observability.metrics import Metrics
from service.settings import Settings, load_settings
from tests.unit.service.engines import PLA_EVENTS, FakeRunner, trained_engine

PROBLEM = "application/problem+json"


def pla_settings(**http: Any) -> Settings:
    return load_settings(
        model={"dim": 1},
        bound={"references": [{"name": "u", "weights": [0.0, -1.0]}]},
        http={"max_body_bytes": 4096, "max_batch_size": 8, **http},
    )


@pytest.fixture
def runner() -> FakeRunner:
    return FakeRunner(connected=True)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def client(runner: FakeRunner, registry: CollectorRegistry, tmp_path: Path) -> Iterator[TestClient]:
    settings = pla_settings()
    metrics = Metrics(registry)
    engine = trained_engine(settings, PLA_EVENTS, tmp_path, metrics)
    app = create_app(settings, engine, runner, metrics)
    with TestClient(app) as test_client:
        yield test_client


def assert_problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["type"].startswith("urn:novikoff:problem:")
    assert body["title"] and body["detail"]
    return body


# -- predictions -----------------------------------------------------------------------------


def test_single_prediction_uses_the_pla_weights(client: TestClient) -> None:
    # After the PLA notes' two events the last weights are (bias 0, w -2.25).
    response = client.post("/predict", json={"features": [3.0], "predictor": "last"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "label": "-1",
        "score": -6.75,
        "model_version": 2,
        "predictor": "last",
    }


def test_default_predictor_is_the_configured_one(client: TestClient) -> None:
    body = client.post("/predict", json={"features": [3.0]}).json()
    assert body["predictor"] == "averaged"


@pytest.mark.parametrize("predictor", ["last", "averaged", "voted"])
def test_batch_prediction_matches_the_snapshot(client: TestClient, predictor: str) -> None:
    features = [[3.0], [-3.0], [0.0], [1e-3]]
    response = client.post(
        "/predict",
        json={"instances": [{"features": f} for f in features], "predictor": predictor},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    snapshot = client.app.state.engine.snapshot.predictor  # type: ignore[attr-defined]
    X = np.hstack([np.ones((4, 1)), np.array(features)])
    labels, scores = snapshot.predict_batch(X, predictor)
    assert [p["label"] for p in body["predictions"]] == labels
    assert [p["score"] for p in body["predictions"]] == scores.tolist()
    assert body["model_version"] == snapshot.version


@pytest.mark.parametrize("value", [18446744073709551615, -9223372036854775808, 1e100, -1e100])
def test_extreme_but_valid_numbers_are_accepted(client: TestClient, value: float) -> None:
    response = client.post("/predict", json={"features": [value], "predictor": "last"})
    assert response.status_code == 200, response.text
    assert response.json()["score"] == -2.25 * float(value)


@pytest.mark.parametrize(
    "body", [b'{"features": [1e101]}', b'{"instances": [{"features": [-2e100]}]}']
)
def test_numbers_beyond_the_feature_range_are_refused(client: TestClient, body: bytes) -> None:
    response = client.post("/predict", content=body, headers={"content-type": "application/json"})
    assert assert_problem(response, 422)["errors"][0]["code"] == "too_large"


def test_single_and_batch_agree(client: TestClient) -> None:
    one = client.post("/predict", json={"features": [0.7]}).json()
    many = client.post("/predict", json={"instances": [{"features": [0.7]}]}).json()
    assert many["predictions"][0] == {"label": one["label"], "score": one["score"]}


def test_routed_predict_path_answers_like_the_fast_path(
    runner: FakeRunner, registry: CollectorRegistry, tmp_path: Path
) -> None:
    settings = pla_settings()
    engine = trained_engine(settings, PLA_EVENTS, tmp_path)
    app = create_app(settings, engine, runner, Metrics(registry))
    request = {"instances": [{"features": [0.7]}, {"features": [-2]}], "predictor": "voted"}
    with TestClient(app) as test_client:
        fast = test_client.post("/predict", json=request)
        app.predict_handler = None  # type: ignore[attr-defined]
        routed = test_client.post("/predict", json=request)
        bad = test_client.post("/predict", json={"features": [True]})
    assert routed.status_code == fast.status_code == 200
    assert routed.json() == fast.json()
    assert_problem(bad, 422)


# -- problems --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "code", "pointer"),
    [
        ({"features": [1.0, 2.0]}, "wrong_dimension", "/features"),
        ({"features": ["a"]}, "non_numeric", "/features"),
        ({"features": [True]}, "boolean_feature", "/features"),
        ({"features": []}, "empty_features", "/features"),
        ({"features": {"a": 1}}, "wrong_type", "/features"),
        ({"features": None}, "wrong_type", "/features"),
        ({"features": [1.0], "predictor": "best"}, "unknown_predictor", "/predictor"),
        ({"features": [1.0], "extra": 1}, "unknown_field", "/extra"),
        ({}, "features_or_instances", ""),
        ({"features": [1.0], "instances": []}, "features_or_instances", ""),
        ({"instances": []}, "empty_batch", "/instances"),
        ({"instances": {"features": [1]}}, "wrong_type", "/instances"),
        ({"instances": [1]}, "wrong_type", "/instances/0"),
        ({"instances": [{}]}, "missing_features", "/instances/0"),
        ({"instances": [{"features": [1], "label": 1}]}, "unknown_field", "/instances/0"),
        (
            {"instances": [{"features": [1]}, {"features": [1, 2]}]},
            "wrong_dimension",
            "/instances/1/features",
        ),
    ],
)
def test_invalid_requests_are_422_problems_pointing_at_the_fault(
    client: TestClient, body: Any, code: str, pointer: str
) -> None:
    problem = assert_problem(client.post("/predict", json=body), 422)
    assert problem["errors"][0]["code"] == code
    assert problem["errors"][0]["pointer"] == pointer


@pytest.mark.parametrize("body", [b"[1, 2]", b'"text"', b"3", b"null"])
def test_a_body_that_is_not_an_object_is_a_422(client: TestClient, body: bytes) -> None:
    response = client.post("/predict", content=body, headers={"content-type": "application/json"})
    assert assert_problem(response, 422)["errors"][0]["code"] == "wrong_type"


@pytest.mark.parametrize(
    "body",
    [
        b"{",
        b"",
        b"\xff\xfe",
        b'{"features": [1,]}',
    ],
)
def test_malformed_json_is_a_400(client: TestClient, body: bytes) -> None:
    response = client.post("/predict", content=body, headers={"content-type": "application/json"})
    assert_problem(response, 400)


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_wrong_content_type_is_a_415(client: TestClient, content_type: str | None) -> None:
    headers = {"content-type": content_type} if content_type else {}
    response = client.post("/predict", content=b'{"features": [1]}', headers=headers)
    assert_problem(response, 415)


def test_json_with_charset_and_suffix_types_are_accepted(client: TestClient) -> None:
    for content_type in ("application/json; charset=utf-8", "application/vnd.novikoff+json"):
        body = b'{"features": [1]}'
        response = client.post("/predict", content=body, headers={"content-type": content_type})
        assert response.status_code == 200, content_type


def test_unknown_path_is_a_404_problem(client: TestClient) -> None:
    assert "no resource at /nope" in assert_problem(client.get("/nope"), 404)["detail"]


def test_wrong_method_is_a_405_problem_with_allow(client: TestClient) -> None:
    response = client.get("/predict")
    assert_problem(response, 405)
    assert response.headers["allow"] == "POST"
    assert_problem(client.delete("/stats"), 405)


# -- limits ----------------------------------------------------------------------------------


def test_declared_oversized_body_is_refused_before_reading(client: TestClient) -> None:
    body = orjson.dumps({"instances": [{"features": [1.0]}] * 1000})
    assert len(body) > 4096
    problem = assert_problem(
        client.post("/predict", content=body, headers={"content-type": "application/json"}), 413
    )
    assert "4096 bytes" in problem["detail"]


def test_streamed_oversized_body_is_refused(client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"instances": ['
        for _ in range(1000):
            yield b'{"features": [1.0]},'
        yield b'{"features": [1.0]}]}'

    response = client.post(
        "/predict", content=chunks(), headers={"content-type": "application/json"}
    )
    assert_problem(response, 413)


def test_batch_over_the_limit_is_refused(client: TestClient) -> None:
    body = {"instances": [{"features": [1.0]}] * 9}
    problem = assert_problem(client.post("/predict", json=body), 422)
    assert problem["errors"][0]["code"] == "batch_too_large"
    assert client.post("/predict", json={"instances": body["instances"][:8]}).status_code == 200


def test_too_many_features_are_refused(
    runner: FakeRunner, registry: CollectorRegistry, tmp_path: Path
) -> None:
    settings = load_settings(
        model={"encoding": "hashing", "hashing_bits": 4, "max_features_per_event": 3}
    )
    engine = trained_engine(settings, [], tmp_path)
    with TestClient(create_app(settings, engine, runner, Metrics(registry))) as test_client:
        ok = test_client.post("/predict", json={"features": {"a": 1, "b": 2, "c": 3}})
        too_many = test_client.post("/predict", json={"features": {"a": 1, "b": 2, "c": 3, "d": 4}})
    assert ok.status_code == 200
    assert assert_problem(too_many, 422)["errors"][0]["code"] == "too_many_features"


# -- reads -----------------------------------------------------------------------------------


def test_model_and_stats_come_from_the_snapshot(client: TestClient) -> None:
    snapshot = client.app.state.engine.snapshot  # type: ignore[attr-defined]
    model = client.get("/model").json()
    stats = client.get("/stats").json()
    assert model["weights"]["last"] == [0.0, -2.25]
    assert stats["mistakes"] == 2
    assert stats["seen"] == 2
    assert stats["ready"] is True
    assert stats["bounds"][0]["name"] == "u"
    assert stats["mistakes"] == snapshot.stats["mistakes"]


def test_health_and_readiness(client: TestClient, runner: FakeRunner) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 200
    runner.connected = False
    runner.not_ready_reason = "cannot reach the broker at 127.0.0.1:9"
    problem = assert_problem(client.get("/readyz"), 503)
    assert "cannot reach the broker" in problem["detail"]
    assert client.get("/stats").json()["ready"] is False
    assert client.get("/healthz").status_code == 200


def test_readiness_names_a_consumer_fault_its_cause_and_fix(
    client: TestClient, runner: FakeRunner
) -> None:
    fault = unknown_topic("events", "127.0.0.1:9092", 10.0)
    runner.connected = False
    runner.not_ready_reason = fault.reason
    runner.fault = fault
    problem = assert_problem(client.get("/readyz"), 503)
    assert problem["detail"] == f"not ready: {fault.reason}"
    assert "create it" in problem["detail"]
    assert problem["consumer_error"] == {
        "kind": "unknown_topic",
        "cause": fault.cause,
        "fix": fault.fix,
    }
    assert client.post("/predict", json={"features": [1.0]}).status_code == 200
    # Control: a plain disconnection carries no consumer_error.
    runner.fault = None
    runner.not_ready_reason = "joining the consumer group (rebalance in progress)"
    assert "consumer_error" not in assert_problem(client.get("/readyz"), 503)


def test_metrics_endpoint_serves_the_registry(
    client: TestClient, registry: CollectorRegistry
) -> None:
    client.post("/predict", json={"features": [1.0]})
    client.get("/nope")
    text = client.get("/metrics").text
    assert "novikoff_http_request_duration_seconds_count" in text
    labels = {"route": "/predict", "method": "POST", "status": "200"}
    assert registry.get_sample_value("novikoff_http_request_duration_seconds_count", labels) == 1
    unmatched = {"route": "unmatched", "method": "GET", "status": "404"}
    assert registry.get_sample_value("novikoff_http_request_duration_seconds_count", unmatched) == 1


def test_openapi_documents_every_endpoint(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    for path in (
        "/predict",
        "/model",
        "/stats",
        "/stats/history",
        "/healthz",
        "/readyz",
        "/metrics",
    ):
        assert path in spec["paths"], path
    predict = spec["paths"]["/predict"]["post"]
    schema = predict["requestBody"]["content"]["application/json"]["schema"]
    features = schema["oneOf"][0]["properties"]["features"]
    assert features["minItems"] == features["maxItems"] == 1
    assert {"400", "413", "415", "422"} <= set(predict["responses"])
    assert client.get("/docs").status_code == 200


# -- duplicate keys: refused like the consumer refuses them ----------------------------------

DENSE_DUPLICATES = [
    b'{"features": [1.0], "features": [2.0]}',
    b'{"instances": [{"features": [1.0], "features": [2.0]}]}',
    b'{"instances": [{"features": [1.0]}], "instances": [{"features": [2.0]}]}',
    b'{"features": [1.0], "predictor": "last", "predictor": "voted"}',
]


@pytest.mark.parametrize("body", DENSE_DUPLICATES)
def test_a_duplicate_key_anywhere_is_refused_with_the_consumers_code(
    client: TestClient, body: bytes
) -> None:
    response = client.post("/predict", content=body, headers={"content-type": "application/json"})
    problem = assert_problem(response, 422)
    assert problem["errors"][0]["code"] == "duplicate_key"
    # Control: the same body with the repeated key renamed away is a valid request.
    once = body.replace(b', "features": [2.0]', b"").replace(b', "predictor": "voted"', b"")
    once = once.replace(b', "instances": [{"features": [2.0]}]', b"")
    fine = client.post("/predict", content=once, headers={"content-type": "application/json"})
    assert fine.status_code == 200, (once, fine.text)


def test_a_duplicate_name_inside_an_object_of_features_is_refused(
    runner: FakeRunner, registry: CollectorRegistry, tmp_path: Path
) -> None:
    settings = load_settings(model={"encoding": "hashing", "hashing_bits": 4})
    engine = trained_engine(settings, [], tmp_path)
    body = b'{"instances": [{"features": {"a": 1, "b": 2, "a": 3}}]}'
    with TestClient(create_app(settings, engine, runner, Metrics(registry))) as test_client:
        refused = test_client.post(
            "/predict", content=body, headers={"content-type": "application/json"}
        )
        fine = test_client.post(
            "/predict",
            content=body.replace(b', "a": 3', b""),
            headers={"content-type": "application/json"},
        )
    assert assert_problem(refused, 422)["errors"][0]["code"] == "duplicate_key"
    assert fine.status_code == 200


@pytest.mark.parametrize("body", [*DENSE_DUPLICATES[:1], b'{"features": {"a": 1, "a": 2}}'])
def test_the_consumer_refuses_the_same_bodies_with_the_same_code(body: bytes) -> None:
    with pytest.raises(InvalidEventError) as refused:
        parse_event_json(body)
    assert refused.value.reason == "duplicate_key"


# -- non-finite numbers: refused like the consumer refuses them -------------------------------

NON_FINITE_BODIES = [
    (b'{"features": [NaN]}', "/features"),
    (b'{"features": [Infinity]}', "/features"),
    (b'{"features": [1e999]}', "/features"),
    (b'{"instances": [{"features": [-Infinity]}]}', "/instances/0/features"),
]


@pytest.mark.parametrize(("body", "pointer"), NON_FINITE_BODIES)
def test_a_non_finite_number_is_refused_with_the_consumers_code(
    client: TestClient, body: bytes, pointer: str
) -> None:
    response = client.post("/predict", content=body, headers={"content-type": "application/json"})
    problem = assert_problem(response, 422)
    assert [(e["code"], e["pointer"]) for e in problem["errors"]] == [("non_finite", pointer)]
    if body.startswith(b'{"features"'):  # the consumer reads the same bytes as an event
        with pytest.raises(InvalidEventError) as refused:
            EventDecoder(DenseEncoder(1), LabelMap({"1": 1, "-1": -1})).inspect(
                body.replace(b'{"features"', b'{"label": "1", "features"')
            )
        assert refused.value.reason == "non_finite"
    # Control: the same body with a finite number is a valid request.
    finite = body.replace(b"-Infinity", b"1.5").replace(b"Infinity", b"1.5")
    finite = finite.replace(b"NaN", b"1.5").replace(b"1e999", b"1.5")
    assert (
        client.post(
            "/predict", content=finite, headers={"content-type": "application/json"}
        ).status_code
        == 200
    )


def test_bytes_that_are_not_json_stay_a_400(client: TestClient) -> None:
    for body in (b'{"features": [nan]}', b'{"features": [1.0]', b'{"features": ["\xff"]}'):
        response = client.post(
            "/predict", content=body, headers={"content-type": "application/json"}
        )
        assert assert_problem(response, 400)["type"].endswith("malformed-json"), body


def test_a_body_nested_deeper_than_the_consumer_accepts_is_too_deep(client: TestClient) -> None:
    deep = MAX_NESTING_DEPTH  # the body's object is one more level
    body = b'{"features": ' + b"[" * deep + b"1.0" + b"]" * deep + b"}"
    response = client.post("/predict", content=body, headers={"content-type": "application/json"})
    assert assert_problem(response, 422)["errors"][0]["code"] == "too_deep"
    with pytest.raises(InvalidEventError) as refused:
        parse_event_json(body)
    assert refused.value.reason == "too_deep"
    # Control: one level less is parsed, and refused only for its shape (nested lists).
    shallow = b'{"features": ' + b"[" * (deep - 1) + b"1.0" + b"]" * (deep - 1) + b"}"
    answer = client.post("/predict", content=shallow, headers={"content-type": "application/json"})
    assert assert_problem(answer, 422)["errors"][0]["code"] != "too_deep"
    readme = " ".join((Path(__file__).parents[3] / "README.md").read_text("utf-8").split())
    assert f"nesting beyond {MAX_NESTING_DEPTH} levels `too_deep`" in readme
