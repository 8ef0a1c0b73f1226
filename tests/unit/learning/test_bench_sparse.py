"""The sparse benchmark's own correctness checks and its memory probe."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import orjson
import pytest

from bench import ResultMismatchError
from bench.bench_sparse import check_against_reference, encoded_batches, ours_batch
from bench.sparse_memory import measure
from bench.sparse_stream import WORDS_PER_EVENT, WordStream
from learning import HashingEncoder

BITS = 10
EVENTS = 300
PROBE_EVENTS = 500
# Bytes a value may take beyond its length: the ``bytes`` object header, rounded up by malloc.
VALUE_OVERHEAD = 64
PROBE_CHUNK = 120


def test_the_stream_is_reproducible_bags_of_twenty_words() -> None:
    rows, signs = WordStream().events(EVENTS)
    again, again_signs = WordStream().events(EVENTS)
    assert rows == again and signs.tolist() == again_signs.tolist()
    assert all(sum(row.values()) == WORDS_PER_EVENT for row in rows)
    assert set(signs.tolist()) == {-1.0, 1.0}
    # Control: another seed gives another stream.
    assert WordStream(seed=1).events(EVENTS)[0] != rows


def _allocated_bytes(encode: Callable[[], list[bytes]]) -> tuple[int, int]:
    """The bytes the values ``encode`` returns take in memory, and their total length."""
    tracemalloc.start()
    try:
        values = encode()
        allocated, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return allocated, sum(map(len, values))


def test_record_values_hold_only_their_bytes_as_the_fetcher_hands_them_out() -> None:
    rows, signs = WordStream().events(EVENTS)
    allocated, length = _allocated_bytes(lambda: WordStream().records(rows, signs))
    assert allocated <= length + VALUE_OVERHEAD * EVENTS, (allocated, length)
    # Control: orjson's own results keep their write buffer, far beyond the bound.
    events = [{"features": row, "label": int(sign)} for row, sign in zip(rows, signs, strict=True)]
    allocated, length = _allocated_bytes(lambda: [orjson.dumps(event) for event in events])
    assert allocated > length + VALUE_OVERHEAD * EVENTS, (allocated, length)


def test_record_chunks_are_the_records_of_the_event_chunks() -> None:
    chunks = list(WordStream().record_chunks(EVENTS, PROBE_CHUNK))
    assert [len(chunk) for chunk in chunks] == [PROBE_CHUNK, PROBE_CHUNK, EVENTS - 2 * PROBE_CHUNK]
    stream = WordStream()
    assert chunks == [stream.records(*chunk) for chunk in stream.chunks(EVENTS, PROBE_CHUNK)]
    # Control: another seed gives other values.
    assert list(WordStream(seed=1).record_chunks(EVENTS, PROBE_CHUNK)) != chunks


def test_the_feature_hasher_reference_accepts_our_learner_and_refuses_another() -> None:
    rows, signs = WordStream().events(EVENTS)
    batches = encoded_batches(HashingEncoder(BITS), rows)
    check_against_reference(BITS, "learn_batch", ours_batch(BITS, batches, signs), rows, signs)
    reordered = ours_batch(BITS, encoded_batches(HashingEncoder(BITS), rows[::-1]), signs[::-1])
    flipped = ours_batch(BITS, batches, -signs)
    for wrong in (reordered, flipped):
        with pytest.raises(ResultMismatchError):
            check_against_reference(BITS, "learn_batch", wrong, rows, signs)


def test_the_memory_probe_applies_every_event_and_reports_its_peaks() -> None:
    probe = measure(PROBE_EVENTS, BITS)
    assert probe["seen"] == probe["learned"] == probe["next_offset"] == PROBE_EVENTS
    assert probe["state_bytes"] > 0
    assert (
        probe["peak_rss_bytes"]
        >= probe["peak_rss_after_first_batch_bytes"]
        >= probe["peak_rss_after_imports_bytes"]
        > 0
    )
