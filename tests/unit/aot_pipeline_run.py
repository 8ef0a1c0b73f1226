"""One run of the ingest pipeline on a seeded mix of events, for tests/unit/test_aot.py.

``python -m tests.unit.aot_pipeline_run SEED EVENTS MODE`` feeds the service's model (hashed
bag-of-words features, as ``bench.sparse_memory``) ``EVENTS`` events of
:class:`bench.sparse_stream.WordStream` with poison events (invalid JSON, non-finite and oversized
values, bad labels, missing keys) mixed in at random, and prints one JSON object: the digests of
the learner and tracker state (:func:`learning.dump_state`), the counts of every batch report,
whether numba was imported and each extension's :func:`learning.aot.status`.
``MODE`` ``jit`` hides the ahead-of-time extensions before the first kernel call loads them
(their import fails), ``aot`` leaves them as installed.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from typing import Any

from bench.bench_pipeline import PARTITION, TOPIC, Pipeline, consumer_records
from bench.sparse_memory import sparse_settings
from bench.sparse_stream import WordStream
from learning import aot, dump_state

EXTENSIONS = ("learning._aot_kernels", "consumers._aot_kernels")
BATCH = 200
BITS = 12
POISON_SHARE = 0.15
POISON = (
    b"{",
    b"not json",
    b'{"features": {"a": 1.0}}',
    b'{"features": {"a": NaN}, "label": 1}',
    b'{"features": {"a": 1e400}, "label": 1}',
    b'{"features": {"a": 1e300}, "label": -1}',
    b'{"features": {"a": "x"}, "label": 1}',
    b'{"features": {"a": 1.0}, "label": 7}',
    b'{"features": [1, 2], "label": 1}',
    b'{"features": {"a\\u00e9": 2.5, "b": -0.0}, "label": -1}',
    b'{"features": {}, "label": 1}',
    b'{"label": 1, "features": {"a": 1.0}, "features": {"b": 2.0}}',
)


def run(seed: int, events: int) -> dict[str, Any]:
    rng = random.Random(seed)
    pipeline = Pipeline(sparse_settings(BITS))
    stream = WordStream(seed=seed)
    reports = []
    offset = 0
    for values in stream.record_chunks(events, BATCH):
        mixed = [rng.choice(POISON) if rng.random() < POISON_SHARE else v for v in values]
        batch = consumer_records(mixed, first_offset=offset)
        offset += len(batch)
        engine = pipeline.engine
        report = engine.apply(
            engine.decoder.decode_batch(engine.unapplied(TOPIC, PARTITION, batch))
        )
        reports.append([report.learned, report.rejected, report.mistakes])
        reports.append(sorted(report.rejected_by_reason.items()))
    state = dump_state(pipeline.engine.learner, pipeline.engine.tracker)
    return {
        "state": hashlib.sha256(state).hexdigest(),
        "reports": reports,
        "numba": "numba" in sys.modules,
        "status": {package: aot.status(package) for package in ("learning", "consumers")},
    }


def main(argv: list[str]) -> int:
    seed, events, mode = int(argv[0]), int(argv[1]), argv[2]
    if mode == "jit":
        for name in EXTENSIONS:
            sys.modules[name] = None  # type: ignore[assignment]  # import fails: "missing"
    print(json.dumps(run(seed, events)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
