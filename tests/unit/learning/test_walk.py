"""The walk of an event dict (learning.encoders._walk): the C extension and its Python twin keep
one contract, and a murmur3 hashing learner learns the same whichever serves it."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learning import HashingEncoder, Perceptron, _one, dump_state
from learning.encoders import _walk
from learning.encoders._walk import NAMES_FULL, NOT_WALKED, PYTHON_WALKER, Walker, walker

ENTRY = _walk.ENTRY_BYTES
LIMIT = 8

names = st.one_of(
    st.text(max_size=12),  # any code point: non-ASCII, NUL, lone surrogates
    st.integers(-3, 3),
    st.booleans(),
)
values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**1030), 2**1030),  # beyond float64 at both ends
    st.booleans(),
    st.none(),
    st.just(np.float64(1.5)),
)
events = st.dictionaries(names, values, max_size=LIMIT + 2)


def buffers(names_bytes: int, entries: int = LIMIT) -> tuple[bytearray, bytearray, bytearray]:
    return bytearray(names_bytes), bytearray(entries * ENTRY), bytearray(entries * ENTRY)


def walked(walk: Walker, event: Any, names_bytes: int = 16) -> tuple[int, bytes, bytes, bytes]:
    """The final result of ``pack`` (retried with more room after NAMES_FULL) and what it wrote."""
    while True:
        room = buffers(names_bytes)
        count = walk.pack(event, LIMIT, *room)
        if count != NAMES_FULL:
            break
        names_bytes *= 2
    if count < 0:
        return count, b"", b"", b""
    used = struct.unpack_from("q", room[1], (count - 1) * ENTRY)[0]
    return (
        count,
        bytes(room[0][:used]),
        bytes(room[1][: count * ENTRY]),
        bytes(room[2][: count * ENTRY]),
    )


def compiled() -> Walker:
    walk = walker()
    assert walk.compiled, "the C extension learning.encoders._dictwalk was not built"
    return walk


@settings(max_examples=400, deadline=None)
@given(events)
def test_the_c_walk_and_the_python_walk_agree(event: dict[Any, Any]) -> None:
    assert walked(compiled(), event) == walked(PYTHON_WALKER, event)


def test_walks_of_different_events_differ() -> None:
    # Control of the comparison above: what it compares tells events apart, both ways.
    for walk in (compiled(), PYTHON_WALKER):
        results = {walked(walk, event) for event in ({"a": 1.0}, {"a": 2.0}, {"b": 1.0}, {"a": 1})}
        assert len(results) == 3  # {"a": 1} is {"a": 1.0} as float64
        assert walked(walk, {"a": None})[0] == NOT_WALKED


def plain(event: dict[Any, Any]) -> bool:
    return (
        0 < len(event) <= LIMIT
        and all(type(name) is str for name in event)
        and all(type(value) in (int, float) for value in event.values())
    )


@settings(max_examples=300, deadline=None)
@given(events)
def test_a_walk_writes_the_names_as_utf8_and_the_values_as_float64(event: dict[Any, Any]) -> None:
    count, name_bytes, ends, packed = walked(compiled(), event)
    expected: list[bytes] | None = None
    floats: list[float] = []
    if plain(event):
        try:
            expected = [name.encode("utf-8") for name in event]
            floats = [float(value) for value in event.values()]
        except (UnicodeEncodeError, OverflowError):
            expected = None
    if expected is None:
        assert count == NOT_WALKED
        return
    assert count == len(event)
    assert name_bytes == b"".join(expected)
    assert list(struct.unpack(f"{count}q", ends)) == np.cumsum([len(e) for e in expected]).tolist()
    assert packed == struct.pack(f"{count}d", *floats)


@settings(max_examples=300, deadline=None)
@given(events, events)
def test_same_tells_the_walked_event_from_any_other(
    first: dict[Any, Any], other: dict[Any, Any]
) -> None:
    for walk in (compiled(), PYTHON_WALKER):
        room = buffers(4096)
        count = walk.pack(first, LIMIT, *room)
        if count < 0:
            assert not walk.same(first, max(count, 1), *room) or count > 0
            continue
        assert walk.same(first, count, *room)
        assert walk.same(dict(first), count, *room)
        identical = walked(PYTHON_WALKER, other) == walked(PYTHON_WALKER, first)
        assert walk.same(other, count, *room) == identical


@pytest.mark.parametrize(
    "walk", [pytest.param(None, id="c"), pytest.param(PYTHON_WALKER, id="python")]
)
def test_same_refuses_what_equality_accepts(walk: Walker | None) -> None:
    walk = walk or compiled()
    room = buffers(64)
    count = walk.pack({"a": 1.0, "b": 0.0, "c": 2}, LIMIT, *room)
    assert walk.same({"a": 1.0, "b": 0.0, "c": 2}, count, *room)  # control: an equal dict
    assert walk.same({"a": 1, "b": 0.0, "c": 2.0}, count, *room)  # the same float64 values
    assert {"a": True, "b": 0.0, "c": 2} == {"a": 1.0, "b": 0.0, "c": 2}
    assert not walk.same({"a": True, "b": 0.0, "c": 2}, count, *room)
    assert not walk.same({"a": 1.0, "b": -0.0, "c": 2}, count, *room)  # -0.0 == 0.0
    assert not walk.same({"b": 0.0, "a": 1.0, "c": 2}, count, *room)  # another order
    assert not walk.same({"a": 1.0, "b": 0.0}, count, *room)


def test_the_extension_returns_the_contracts_codes() -> None:
    from learning.encoders import _dictwalk  # noqa: PLC0415 - the extension itself

    assert (_dictwalk.NOT_WALKED, _dictwalk.NAMES_FULL) == (NOT_WALKED, NAMES_FULL)
    assert NOT_WALKED != NAMES_FULL  # control: the two codes tell the cases apart
    assert compiled().pack({"a": None}, LIMIT, *buffers(8)) == NOT_WALKED


def test_a_name_too_long_for_the_buffer_asks_for_room() -> None:
    for walk in (compiled(), PYTHON_WALKER):
        event = {"a" * 40: 1.0}
        assert walk.pack(event, LIMIT, *buffers(39)) == NAMES_FULL
        assert walk.pack(event, LIMIT, *buffers(40)) == 1
        assert walk.pack(event, 0, *buffers(40)) == NOT_WALKED  # beyond the limit


def test_the_walk_takes_exactly_a_dict() -> None:
    class Sub(dict[str, float]):
        pass

    for walk in (compiled(), PYTHON_WALKER):
        assert walk.pack({"a": 1.0}, LIMIT, *buffers(8)) == 1  # control
        assert walk.pack(Sub(a=1.0), LIMIT, *buffers(8)) == NOT_WALKED
        assert walk.pack({}, LIMIT, *buffers(8)) == NOT_WALKED


@pytest.fixture
def python_walk(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Learners made in the test walk their events in Python (as without a C compiler)."""
    monkeypatch.setattr(_one, "walker", lambda: PYTHON_WALKER)
    yield


def stream(seed: int, n: int) -> list[tuple[dict[str, Any], bool]]:
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(30)] + ["é", "名前", "nul\x00byte", "x" * 5000]
    events = []
    for _ in range(n):
        chosen = rng.choice(len(words), size=int(rng.integers(1, 8)), replace=False)
        event: dict[str, Any] = {words[j]: float(rng.normal()) for j in chosen}
        if rng.random() < 0.2:
            event[words[int(chosen[0])]] = int(rng.integers(-3, 4))
        events.append((event, bool(rng.random() < 0.5)))
    return events


def learned_one(events: list[tuple[dict[str, Any], bool]]) -> Perceptron:
    model = Perceptron(encoder=HashingEncoder(4), max_voters=4)
    for event, label in events:
        model.predict_one(event)
        model.learn_one(event, label)
    return model


def learned_batch(events: list[tuple[dict[str, Any], bool]]) -> Perceptron:
    model = Perceptron(encoder=HashingEncoder(4), max_voters=4)
    rows = [event for event, _ in events]
    batch = model.encoder.encode_sparse_batch(rows)  # type: ignore[attr-defined]
    model.learn_batch(batch, model.encode_labels([label for _, label in events]))
    return model


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_walked_learning_equals_learn_batch(seed: int) -> None:
    events = stream(seed, 200)
    model = learned_one(events)
    assert _one.single_event(model).walker is walker()
    assert len(_one.single_event(model).names) > _one.NAMES_BYTES  # a long name grew the buffer
    assert dump_state(model) == dump_state(learned_batch(events))
    assert dump_state(model) != dump_state(learned_batch(events[1:]))  # control


@pytest.mark.usefixtures("python_walk")
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_python_walk_learns_the_same(seed: int) -> None:
    events = stream(seed, 200)
    model = learned_one(events)
    assert _one.single_event(model).walker is PYTHON_WALKER
    assert dump_state(model) == dump_state(learned_batch(events))
    assert dump_state(model) != dump_state(learned_batch(events[1:]))  # control
