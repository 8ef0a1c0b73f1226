"""The compiled ``POST /predict`` batch reader: exact where it answers, silent elsewhere."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learning.encoders import MAX_ABS_FEATURE
from service.http._fastbody import parse_dense_instances

WIDTH = 3


def read(body: bytes, *, bias: bool = True, max_instances: int = 100) -> np.ndarray | None:
    parsed = parse_dense_instances(
        body, n_features=WIDTH, bias=bias, max_abs=MAX_ABS_FEATURE, max_instances=max_instances
    )
    return None if parsed is None else parsed.X


def expected(body: bytes, bias: bool = True) -> np.ndarray:
    rows = [instance["features"] for instance in orjson.loads(body)["instances"]]
    X = np.array(rows, dtype=np.float64)
    return np.hstack([np.ones((len(rows), 1)), X]) if bias else X


finite = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e100, max_value=1e100)
number_text = st.one_of(
    finite.map(repr),
    st.integers(min_value=-(10**18), max_value=10**18).map(str),
    st.tuples(st.integers(-999, 999), st.integers(0, 999_999), st.integers(-300, 300)).map(
        lambda t: f"{t[0]}.{t[1]}e{t[2]}"
    ),
)
space = st.sampled_from(["", " ", "\n", "\t ", "\r\n"])


@st.composite
def batch_bodies(draw: st.DrawFn) -> bytes:
    rows = draw(st.lists(st.lists(number_text, min_size=WIDTH, max_size=WIDTH), min_size=1))
    gap = draw(space)
    instances = f",{gap}".join(
        f'{{{gap}"features"{gap}:{gap}[{gap}{f",{gap}".join(row)}{gap}]{gap}}}' for row in rows
    )
    members = [f'"instances"{gap}:{gap}[{gap}{instances}{gap}]']
    if draw(st.booleans()):
        members.insert(draw(st.integers(0, 1)), f'"predictor"{gap}:{gap}"last"')
    return f"{gap}{{{gap}{f',{gap}'.join(members)}{gap}}}{gap}".encode()


@settings(max_examples=300, deadline=None)
@given(batch_bodies(), st.booleans())
def test_accepted_bodies_read_exactly_like_orjson(body: bytes, bias: bool) -> None:
    X = read(body, bias=bias)
    reference = expected(body, bias)
    if not (np.abs(reference) <= MAX_ABS_FEATURE).all():
        assert X is None
        return
    # The reader may leave a number it cannot convert exactly to the general path, never guess.
    if X is not None:
        assert X.tobytes() == reference.tobytes()


def test_the_predictor_is_returned_unchecked() -> None:
    body = b'{"predictor": "voted", "instances": [{"features": [1, 2, 3]}]}'
    parsed = parse_dense_instances(
        body, n_features=WIDTH, bias=False, max_abs=MAX_ABS_FEATURE, max_instances=10
    )
    assert parsed is not None
    assert parsed.predictor == "voted"
    assert parsed.X.tolist() == [[1.0, 2.0, 3.0]]


def test_negative_zero_keeps_its_sign_like_orjson() -> None:
    X = read(b'{"instances": [{"features": [-0.0, -0, 0e5]}]}', bias=False)
    assert X is not None
    assert [math.copysign(1.0, v) for v in X[0]] == [-1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"[]",
        b'{"instances": []}',
        b'{"instances": [{"features": [1, 2]}]}',
        b'{"instances": [{"features": [1, 2, 3, 4]}]}',
        b'{"instances": [{"features": [1, 2, true]}]}',
        b'{"instances": [{"features": [1, 2, null]}]}',
        b'{"instances": [{"features": [1, 2, "3"]}]}',
        b'{"instances": [{"features": [1, 2, [3]]}]}',
        b'{"instances": [{"features": [1, 2, NaN]}]}',
        b'{"instances": [{"features": [1, 2, 1e999]}]}',
        b'{"instances": [{"features": [1, 2, 1e101]}]}',
        b'{"instances": [{"features": [1, 2, 01]}]}',
        b'{"instances": [{"features": [1, 2, 3], "features": [1, 2, 3]}]}',
        b'{"instances": [{"features": [1, 2, 3], "x": 1}]}',
        b'{"instances": [{"features": [1, 2, 3]}], "instances": [{"features": [1, 2, 3]}]}',
        b'{"instances": [{"features": [1, 2, 3]}], "features": [1, 2, 3]}',
        b'{"instances": [{"features": [1, 2, 3]}], "predictor": 1}',
        b'{"instances": [{"features": [1, 2, 3]}], "predictor": "l\\u0061st"}',
        b'{"instances": [{"features": [1, 2, 3]}], "predictor": "a", "predictor": "b"}',
        b'{"instances": [{"features": [1, 2, 3]}]} x',
        b'{"instances": [{"features": [1, 2, 3]}],}',
        b'{"instances": [{"features": [1, 2, 3]},]}',
        b'{"instances": [{"features": [1, 2, 3]}]',
        b'{"instances": [{"features": [1, 2, 3]}], "predictor": "last',
        b'{"instances": [{"features": [1, 2, 3]}], "predictor"',
        b'{"inst\\u0061nces": [{"features": [1, 2, 3]}]}',
        '{"instances": [{"features": [1, 2, 3]}], "predictor": "lást"}'.encode(),
    ],
)
def test_anything_else_is_left_to_the_general_path(body: bytes) -> None:
    assert read(body) is None


def test_more_instances_than_the_limit_are_left_to_the_general_path() -> None:
    body = orjson.dumps({"instances": [{"features": [1, 2, 3]}] * 3})
    assert read(body, max_instances=3) is not None
    assert read(body, max_instances=2) is None


normal = st.floats(min_value=-1e100, max_value=1e100, allow_subnormal=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(normal, min_size=WIDTH, max_size=WIDTH), min_size=1, max_size=50))
def test_serialised_floats_are_always_read_by_the_fast_path(rows: list[list[float]]) -> None:
    body = orjson.dumps({"instances": [{"features": row} for row in rows]})
    X = read(body, bias=False)
    assert X is not None
    assert X.tobytes() == np.array(rows, dtype=np.float64).tobytes()
