"""The compiled reader of hashed events: it takes the plain records itself, and every batch
decodes exactly as the orjson and precise tiers decode it (rows bit for bit, ids, reasons)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from consumers.decoding import events as events_module
from consumers.decoding.events import DecodedBatch, EventDecoder, Record
from learning import ClassIndex, CSRBatch, HashingEncoder, LabelMap

LABELS = LabelMap({"1": 1, "-1": -1})
LIMIT = 6
BITS = 2
"""Few buckets: names often share a column, so sums and the repeated-name check are exercised."""


def event(features: str, rest: str = '"label": 1') -> bytes:
    return ('{"features": ' + features + ", " + rest + "}").encode()


POISON = [
    (event('{"a": NaN}'), "non_finite"),
    (event('{"a": 1e999}'), "non_finite"),
    (event('{"a": 2e100}'), "too_large"),
    (event('{"a": 1e100, "b": 1e100, "e": 1e100, "f": 1e100, "g": 1e100}'), "too_large"),
    (event("{}"), "empty_features"),
    (event('{"a": "1"}'), "non_numeric"),
    (event('{"a": null}'), "non_numeric"),
    (event('{"a": true}'), "boolean_feature"),
    (event('{"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1, "g": 1}'), "too_many_features"),
    (event('{"a": 1, "b": 2, "a": 3}'), "duplicate_key"),
    (event('{"a": 1}', '"label": 1, "id": ""'), "bad_id"),
    (event('{"a": 1}', '"label": 7'), "unknown_label"),
    (event('{"a": 1}', '"label": 1, "lable": 1'), "unknown_field"),
]

PLAIN = [
    event('{"a": 1.5, "b": -2}'),
    event('{ "c" : 0 , "d":-0.0,"e":1e-5 }', '"label": "1", "id": "e1"'),
    event('{"w7": 3, "x": 1e100}', '"ts": "2024-02-29T23:59:60.5Z", "label": -1'),
    b'{"label": "-1", "id": "z", "features": {"a": 2.5e-3, "": 7, "b c": 1}, "ts": 17}',
]


def records(values: list[bytes]) -> list[Record]:
    return [Record("events", 0, offset, value) for offset, value in enumerate(values)]


def decoder(bits: int = BITS, limit: int = LIMIT) -> EventDecoder:
    return EventDecoder(HashingEncoder(bits, max_features_per_event=limit), LABELS)


def outcome(batch: DecodedBatch) -> tuple[Any, ...]:
    assert isinstance(batch.X, CSRBatch)
    batch.X.validate()
    return (
        batch.X.indptr.tobytes(),
        batch.X.indices.tobytes(),
        batch.X.values.tobytes(),
        batch.y.tobytes(),
        batch.event_ids,
        batch.row_records.tolist(),
        [(r.offset, r.reason) for r in batch.rejections],
    )


def both_tiers(
    values: list[bytes], monkeypatch: pytest.MonkeyPatch, bits: int = BITS, limit: int = LIMIT
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The decoding of ``values`` with the compiled reader, then without it."""
    with monkeypatch.context() as patch:
        patch.setattr(EventDecoder, "compiled_tier", True)
        on = outcome(decoder(bits, limit).decode_batch(records(values)))
        patch.setattr(EventDecoder, "compiled_tier", False)
        off = outcome(decoder(bits, limit).decode_batch(records(values)))
    return on, off


@pytest.fixture
def orjson_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[Any]]:
    """The values each batch hands to the orjson tier."""
    calls: list[list[Any]] = []
    decode_values = events_module._decode_values

    def counted(values: list[Any]) -> Any:
        calls.append(list(values))
        return decode_values(values)

    monkeypatch.setattr(events_module, "_decode_values", counted)
    return calls


def test_plain_hashed_events_never_reach_orjson(orjson_calls: list[list[Any]]) -> None:
    batch = decoder().decode_batch(records(PLAIN))
    assert orjson_calls == []
    rows = [orjson.loads(value)["features"] for value in PLAIN]
    expected = HashingEncoder(BITS, max_features_per_event=LIMIT).encode_sparse_batch(rows)
    assert isinstance(batch.X, CSRBatch)
    assert batch.X.to_dense().tobytes() == expected.to_dense().tobytes()
    assert batch.X.indices.tobytes() == expected.indices.tobytes()
    assert batch.y.tolist() == [1.0, 1.0, -1.0, -1.0]
    assert batch.event_ids == [None, "e1", None, "z"]


def test_the_switch_sends_every_record_to_orjson(
    orjson_calls: list[list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Control for the test above: without the compiled reader the same records go to orjson.
    monkeypatch.setattr(EventDecoder, "compiled_tier", False)
    decoder().decode_batch(records(PLAIN))
    assert orjson_calls == [PLAIN]


def test_poison_inside_a_compiled_batch_reaches_the_dead_letters_with_its_reason(
    orjson_calls: list[list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    values = [*PLAIN]
    for value, _ in POISON:
        values += [value, PLAIN[0]]
    batch = decoder().decode_batch(records(values))
    poison = [value for value, _ in POISON]
    assert orjson_calls == [poison]  # only the poison left the compiled reader
    assert [(r.offset, r.reason) for r in batch.rejections] == [
        (len(PLAIN) + 2 * i, reason) for i, (_, reason) in enumerate(POISON)
    ]
    assert [r.value for r in batch.rejections] == poison
    assert batch.valid == len(PLAIN) + len(POISON)
    on, off = both_tiers(values, monkeypatch)
    assert on == off


def test_escalated_valid_records_keep_their_place(
    orjson_calls: list[list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Valid records the compiled reader leaves to orjson: an escape, a non-ASCII name, a number
    # of more than 19 significant digits.
    escalated = [
        event('{"w\\u0069de": 1}'),
        event('{"\u00e9t\u00e9": 2}'),
        event('{"a": 1.00000000000000000001}'),
    ]
    values = [PLAIN[0], escalated[0], PLAIN[1], escalated[1], escalated[2], PLAIN[2]]
    batch = decoder().decode_batch(records(values))
    assert orjson_calls == [escalated]
    assert batch.valid == len(values) and not batch.rejections
    on, off = both_tiers(values, monkeypatch)
    assert on == off
    assert on[4] == [None, None, "e1", None, None, None]


def test_long_events_sort_and_check_names_like_the_encoder(monkeypatch: pytest.MonkeyPatch) -> None:
    # Past the insertion sort's rows: the heap sort, collisions in 16 buckets, a repeated name.
    names = [f"n{i}" for i in range(300)]
    long = event(orjson.dumps({name: i % 7 - 3 for i, name in enumerate(names)}).decode())
    repeated = event("{" + ", ".join(f'"{name}": 1' for name in [*names, names[150]]) + "}")
    values = [long, repeated, long]
    on, off = both_tiers(values, monkeypatch, bits=4, limit=1000)
    assert on == off
    assert on[6] == [(1, "duplicate_key")]
    assert on[0] != both_tiers([long, long], monkeypatch, bits=5, limit=1000)[0]  # control


NAMES = [*"abcdefghijkl", "", "b c", "w7"]
ODD_NAMES = ["w\\u0069de", "\u00e9", 'q\\"', "a"]
NUMBERS = ["0", "-0", "-0.0", "1", "-3", "2.5", "1e-5", "-7E+2", "1e100", "-1e100", "0.1"]
ODD_NUMBERS = [
    "1.0000000000000002e100", "2e100", "1e999", "NaN", "1e-320", "123456789012345678901", "true",
    "null", '"1"', "1.", "01",
]  # fmt: skip
SPACES = ["", " ", "\n\t "]
ODD = 0.04
"""How often a name, a number or a field is one the compiled reader leaves to orjson."""
STRAY_BYTE = 0.05
HALF = 0.5
CONTROL_SEED = 14
SEEDS = 2**32 - 1


def seeded_event(seed: int) -> bytes:
    # A seeded generator draws every choice evenly (hypothesis's own randoms favour the first).
    return hashed_event(random.Random(seed))


def pick(rng: random.Random, usual: list[str], odd: list[str]) -> str:
    return rng.choice(odd if rng.random() < ODD else usual)


def hashed_event(rng: random.Random) -> bytes:
    """A random event near the compiled reader's edges: names that collide (4 buckets), repeat
    or need escapes, numbers it reads or leaves to orjson, poison, optional fields, white space,
    any member order, now and then a stray byte."""
    space = rng.choice(SPACES)
    count = rng.choice([0, LIMIT + 1]) if rng.random() < ODD else rng.randint(1, LIMIT)
    members = [(pick(rng, NAMES, ODD_NAMES), pick(rng, NUMBERS, ODD_NUMBERS)) for _ in range(count)]
    body = ("," + space).join(f'"{name}"{space}:{space}{number}' for name, number in members)
    fields = [f'"features":{space}{{{space}{body}{space}}}']
    fields.append('"label": ' + pick(rng, ["1", "-1", '"1"', '"-1"'], ["2", '"x"', "1.0"]))
    if rng.random() < HALF:
        fields.append('"id": ' + pick(rng, ['"e1"', '"a-b"'], ['""', "1", '"\\u0041"']))
    if rng.random() < HALF:
        fields.append('"ts": ' + pick(rng, ["0", '"2024-01-01T00:00:00Z"'], ['"x"', "1e99"]))
    rng.shuffle(fields)
    value = ("{" + space + ("," + space).join(fields) + space + "}").encode()
    if rng.random() < STRAY_BYTE:
        position = rng.randint(0, len(value))
        junk = rng.choice([b"}", b",", b"\\", b"\xc3", b'"', b"x", b" 1"])
        value = value[:position] + junk + value[position:]
    return value


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=st.lists(st.integers(0, SEEDS).map(seeded_event), min_size=1, max_size=12))
def test_any_batch_decodes_as_without_the_compiled_reader(
    values: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    on, off = both_tiers(values, monkeypatch)
    assert on == off


def test_the_random_batches_do_take_the_compiled_reader(
    orjson_calls: list[list[Any]],
) -> None:
    # Control for the property above: a third or more of such events is read by the compiled
    # reader (the rest escalate), so the property compares the two tiers, not orjson with itself.
    rng = random.Random(CONTROL_SEED)
    values = [hashed_event(rng) for _ in range(200)]
    decoder().decode_batch(records(values))
    assert len(orjson_calls) == 1 and len(orjson_calls[0]) < 2 * len(values) // 3


def test_a_batch_of_non_bytes_values_takes_the_other_tiers() -> None:
    batch = decoder().decode_batch(records([PLAIN[0], None]))  # type: ignore[list-item]
    assert batch.valid == 1 and [r.reason for r in batch.rejections] == ["not_json"]
    assert np.asarray(batch.y).tolist() == [1.0]


def test_multiclass_hashed_events_take_the_compiled_reader_too(
    orjson_calls: list[list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    classes = ClassIndex(["spam", "ham", "eggs"])
    values = [
        event('{"a": 1}', '"label": "ham"'),
        event('{"b": 2, "c": -1}', '"label": "eggs"'),
        event('{"a": 1}', '"label": "toast"'),
    ]

    def decoded(compiled: bool) -> tuple[Any, ...]:
        monkeypatch.setattr(EventDecoder, "compiled_tier", compiled)
        encoder = HashingEncoder(BITS, max_features_per_event=LIMIT)
        return outcome(EventDecoder(encoder, classes).decode_batch(records(values)))

    on = decoded(True)
    assert orjson_calls == [values[2:]]
    assert on == decoded(False)
    assert np.frombuffer(on[3], dtype=np.int64).tolist() == [1, 2]
    assert on[6] == [(2, "unknown_label")]


def test_an_empty_batch_decodes_to_no_rows() -> None:
    batch = decoder().decode_batch([])
    assert isinstance(batch.X, CSRBatch) and batch.X.n_rows == 0 and not batch.rejections
