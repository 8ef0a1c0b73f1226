"""Peak memory and state size of the ingest pipeline on the sparse stream, in a process of its own.

``python -m bench.sparse_memory EVENTS BITS`` builds the service's model from the default
settings with ``encoding = "hashing"`` and ``hashing_bits = BITS``, feeds it ``EVENTS`` events of
:class:`bench.sparse_stream.WordStream` one poll batch at a time (generated batch by batch and
held as record values only, as a consumer holds its poll: :meth:`WordStream.record_chunks`), takes
a checkpoint
(:meth:`consumers.engine.Engine.checkpoint_bytes`, what the service writes) and prints one JSON
object:

``peak_rss_bytes``
    The process's peak resident size (``VmHWM`` of ``/proc/self/status``): the interpreter,
    every imported library, the compiled kernels, the model and the poll batches. (Not
    ``getrusage``'s ``ru_maxrss``: Linux carries it across ``execve``, so a child started by a
    large parent would report the parent's peak.)
``peak_rss_after_imports_bytes``, ``peak_rss_after_first_batch_bytes``
    The same peak when the model is built (libraries imported, nothing learned) and after the
    first poll batch (the compiled kernels loaded): what the stream itself adds is the rest.
``state_bytes``
    The size of the checkpoint blob.
``seen``, ``learned``
    Events the engine applied and the metrics counted as learned.

:mod:`bench.bench_sparse` runs it in a fresh interpreter, so the harness's own memory (other
benchmarks' streams, river) is not counted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.bench_pipeline import PARTITION, TOPIC, Pipeline, consumer_records
from bench.sparse_stream import WordStream
from service.settings import Settings, load_settings

KIB = 1024
STATUS = Path("/proc/self/status")
PEAK_FIELD = "VmHWM:"
USAGE = "usage: python -m bench.sparse_memory EVENTS BITS"
ARGUMENTS = 2


def sparse_settings(bits: int) -> Settings:
    """The service's default settings with hashed bag-of-words features of 2^bits buckets."""
    return load_settings(model={"encoding": "hashing", "hashing_bits": bits})


def peak_rss() -> int:
    """This process's peak resident size so far, in bytes (``VmHWM``; Linux reports KiB)."""
    for line in STATUS.read_text(encoding="ascii").splitlines():
        if line.startswith(PEAK_FIELD):
            return int(line.split()[1]) * KIB
    raise RuntimeError(f"no {PEAK_FIELD} in {STATUS}")


def measure(events: int, bits: int) -> dict[str, Any]:
    """Run the pipeline on ``events`` events and report its memory and state (module docs)."""
    settings = sparse_settings(bits)
    pipeline = Pipeline(settings)
    stream = WordStream()
    stages = [peak_rss()]
    offset = 0
    for values in stream.record_chunks(events, settings.kafka.max_poll_records):
        batch = consumer_records(values, first_offset=offset)
        offset += len(batch)
        pipeline.consume([batch])
        if len(stages) == 1:
            stages.append(peak_rss())
    state, _ = pipeline.engine.checkpoint_bytes()
    learned = pipeline.registry.get_sample_value("novikoff_events_learned_total")
    return {
        "events": events,
        "hashing_bits": bits,
        "peak_rss_bytes": peak_rss(),
        "peak_rss_after_imports_bytes": stages[0],
        "peak_rss_after_first_batch_bytes": stages[-1],
        "state_bytes": len(state),
        "seen": pipeline.engine.snapshot.seen,
        "learned": learned,
        "next_offset": pipeline.engine.next_offset(TOPIC, PARTITION),
    }


def main(argv: list[str]) -> int:
    if len(argv) != ARGUMENTS:
        print(USAGE, file=sys.stderr)
        return 2
    print(json.dumps(measure(int(argv[0]), int(argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
