"""``POST /predict`` bodies with object-valued features become CSR batches, refused exactly as
the consumer refuses the same feature objects."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import pytest

from consumers.decoding.events import EventDecoder, Record
from learning import (
    CSRBatch,
    DenseEncoder,
    HashingEncoder,
    LabelMap,
    SchemaEncoder,
    VocabularyEncoder,
)
from learning.encoders import SparseEncoder
from service.http.predict import PredictHandler, PredictLimits
from service.http.problems import Problem

LABELS = LabelMap({"1": 1, "-1": -1})
LIMIT = 4
GOOD = {"a": 1.5, "b": -2}
OTHER = {"c": 3, "日本": 0.25}


def encoders() -> list[Callable[[], SparseEncoder]]:
    def vocabulary() -> VocabularyEncoder:
        encoder = VocabularyEncoder(max_features_per_event=LIMIT)
        encoder.encode({"a": 1, "b": 1, "c": 1}, grow=True)
        return encoder

    return [
        lambda: HashingEncoder(6, max_features_per_event=LIMIT),
        lambda: HashingEncoder(6, hash="blake2b", max_features_per_event=LIMIT),
        lambda: SchemaEncoder(["a", "b", "c", "日本"], max_features_per_event=LIMIT),
        vocabulary,
    ]


def handler(encoder: SparseEncoder) -> PredictHandler:
    def no_prediction() -> Any:
        raise AssertionError("reading a body never predicts")

    return PredictHandler(
        no_prediction, encoder, PredictLimits(max_body_bytes=1 << 20, max_batch_size=8), "last"
    )


def consumer(encoder: SparseEncoder, features: list[Any]) -> Any:
    """What the consumer makes of the same feature objects: (X, reasons)."""
    values = [orjson.dumps({"features": f, "label": 1}) for f in features]
    batch = EventDecoder(encoder, LABELS).decode_batch(
        [Record("t", 0, i, value) for i, value in enumerate(values)]
    )
    return batch.X, [r.reason for r in batch.rejections]


@pytest.mark.parametrize("make", encoders())
def test_object_bodies_become_the_consumers_csr_rows(make: Callable[[], SparseEncoder]) -> None:
    expected, reasons = consumer(make(), [GOOD, OTHER])
    assert reasons == [] and isinstance(expected, CSRBatch)
    one = handler(make()).read(orjson.dumps({"features": OTHER, "predictor": "voted"}))
    assert isinstance(one.X, CSRBatch) and (one.predictor, one.batch) == ("voted", False)
    assert one.X.to_dense().tobytes() == expected.to_dense()[1:].tobytes()
    body = orjson.dumps({"instances": [{"features": GOOD}, {"features": OTHER}]})
    many = handler(make()).read(body)
    assert isinstance(many.X, CSRBatch) and (many.predictor, many.batch) == ("last", True)
    many.X.validate()
    for name in ("indptr", "indices", "values"):
        assert getattr(many.X, name).tobytes() == getattr(expected, name).tobytes()
    assert many.X.dimension == expected.dimension


def test_prediction_never_grows_the_vocabulary() -> None:
    encoder = VocabularyEncoder()
    encoder.encode({"a": 1}, grow=True)
    request = handler(encoder).read(orjson.dumps({"features": {"a": 2, "new": 5}}))
    assert isinstance(request.X, CSRBatch) and request.X.to_dense().tolist() == [[1.0, 2.0]]
    assert encoder.vocabulary == ("a",)


BAD_FEATURES = [
    {"a": 2e100},
    {},
    {"a": "x"},
    {"a": None},
    {"a": True},
    {"a": 1, "b": 1, "c": 1, "日本": 1, "e": 1},
    [1, 2],
    "a",
    {"zz": 1},
]


def _refusal(encoder: SparseEncoder, body: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(Problem) as caught:
        handler(encoder).read(orjson.dumps(body))
    assert caught.value.status == 422
    error = caught.value.errors[0]
    return error.pointer, error.code


@pytest.mark.parametrize("features", BAD_FEATURES)
@pytest.mark.parametrize("make", encoders())
def test_http_refuses_what_the_consumer_refuses_with_the_same_code(
    make: Callable[[], SparseEncoder], features: Any
) -> None:
    _, reasons = consumer(make(), [GOOD, features])
    if not reasons:  # control: a name the vocabulary does not know is fine for both
        assert features == {"zz": 1} and isinstance(make(), HashingEncoder | VocabularyEncoder)
        request = handler(make()).read(orjson.dumps({"features": features}))
        assert isinstance(request.X, CSRBatch)
        return
    (reason,) = reasons
    assert _refusal(make(), {"features": features}) == ("/features", reason)
    batch = {"instances": [{"features": GOOD}, {"features": features}]}
    assert _refusal(make(), batch) == ("/instances/1/features", reason)


def test_a_dense_model_still_reads_dense_bodies() -> None:
    dense = PredictHandler(
        lambda: None,  # type: ignore[arg-type,return-value]
        DenseEncoder(2),
        PredictLimits(max_body_bytes=1 << 20, max_batch_size=8),
        "last",
    )
    request = dense.read(b'{"instances": [{"features": [1, 2]}, {"features": [3, 4.5]}]}')
    assert isinstance(request.X, np.ndarray)
    assert request.X.tolist() == [[1.0, 1.0, 2.0], [1.0, 3.0, 4.5]]


def test_a_body_never_becomes_a_dense_row_at_2_to_the_24_buckets() -> None:
    encoder = HashingEncoder(24)
    body = orjson.dumps({"instances": [{"features": {f"w{i}": 1.0, "x": 2}} for i in range(8)]})
    read = handler(encoder)
    read.read(body)  # first use warms up the body scanners
    tracemalloc.start()
    try:
        request = read.read(body)
        single = read.read(orjson.dumps({"features": {"w": 1}}))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(request.X, CSRBatch) and request.X.n_rows == 8
    assert isinstance(single.X, CSRBatch) and single.X.n_rows == 1
    assert peak < encoder.dimension * 8 / 10  # a dense row is 134 MB
