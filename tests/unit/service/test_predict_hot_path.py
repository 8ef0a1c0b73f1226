"""What ``POST /predict`` runs per request: the exact scans only when a cheap count cannot decide.

A full duplicate-key parse (:func:`~consumers.decoding.events.duplicate_key`, the standard
library's parser with a hook) and the compiled nesting scan once ran on every body and cost
``predict_c16_vs_fastapi_baseline`` its bar. These tests count the calls of both on a plain body
(none) and, as the control, on bodies that need them (one each, and the same refusals as before).
Counts, not times: they fail the same way on a busy machine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from consumers.decoding import events
from consumers.decoding.events import MAX_NESTING_DEPTH
from learning import DenseEncoder, LabelMap, Perceptron
from service.http import predict
from service.http.predict import PredictHandler, PredictLimits
from service.http.problems import Problem

WIDTH = 2
PLAIN = [
    b'{"features": [0.5, -1]}',
    b'{"features": [0.5, -1], "predictor": "last"}',
]
NEEDS_DUPLICATE_CHECK = [
    (b'{"features": [0.5, -1], "features": [1, 1]}', "duplicate_key"),
    (b'{"features": [0.5, -1], "predictor": "last", "predictor": "voted"}', "duplicate_key"),
    (b'{"features": [0.5, -1], "note": "a \\"quoted\\" word"}', "unknown_field"),
]


class Counted:
    """``function`` with a count of its calls."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.calls = 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        return self.function(*args)


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> dict[str, Counted]:
    counted = {
        "duplicate_key": Counted(events.duplicate_key),
        "nesting_depth": Counted(events.nesting_depth),
    }
    for name, wrapper in counted.items():
        monkeypatch.setattr(predict, name, wrapper)  # where the request path looks them up
    return counted


@pytest.fixture
def handler() -> PredictHandler:
    model = Perceptron(label_map=LabelMap({1: 1, -1: -1}), encoder=DenseEncoder(WIDTH))
    return PredictHandler(
        snapshot=model.snapshot,
        encoder=model.encoder,
        limits=PredictLimits(max_body_bytes=4096, max_batch_size=8),
        default_predictor="averaged",
    )


@pytest.mark.parametrize("body", PLAIN)
def test_a_plain_body_runs_neither_exact_scan(
    handler: PredictHandler, scans: dict[str, Counted], body: bytes
) -> None:
    answer = orjson.loads(handler.respond(body))
    assert set(answer) == {"label", "score", "model_version", "predictor"}
    assert {name: counted.calls for name, counted in scans.items()} == {
        "duplicate_key": 0,
        "nesting_depth": 0,
    }


@pytest.mark.parametrize(("body", "code"), NEEDS_DUPLICATE_CHECK)
def test_control_a_body_the_count_cannot_clear_gets_the_full_duplicate_check(
    handler: PredictHandler, scans: dict[str, Counted], body: bytes, code: str
) -> None:
    with pytest.raises(Problem) as refused:
        handler.respond(body)
    assert refused.value.errors[0].code == code
    assert scans["duplicate_key"].calls == 1


def test_control_a_body_with_many_brackets_gets_the_nesting_scan(
    handler: PredictHandler, scans: dict[str, Counted]
) -> None:
    deep = b"[" * MAX_NESTING_DEPTH + b"0.5" + b"]" * MAX_NESTING_DEPTH
    with pytest.raises(Problem) as refused:
        handler.respond(b'{"features": ' + deep + b"}")
    assert refused.value.errors[0].code == "too_deep"
    assert scans["nesting_depth"].calls == 1
