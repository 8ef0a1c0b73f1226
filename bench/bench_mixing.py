"""Mixing mode: events/s of two learner processes against one, on one 4-partition topic.

One broker (as in :mod:`bench.bench_e2e`: Apache Kafka by default, ``BENCH_BROKER``, or the cluster
``KAFKA_BOOTSTRAP_SERVERS`` names). For n = 1 and n = 2 in turns, ``ROUNDS`` times each, a fresh
topic of ``PARTITIONS`` partitions receives the same ``EVENTS`` synthetic events
(:class:`service.cli.synthetic.SyntheticStream`, d = ``DIMENSION``, dealt evenly to the partitions)
and n ``novikoff serve`` learner processes of a fresh group in mixing mode (``[mixing]
round_events = ROUND_EVENTS``, default settings otherwise) learn all of it.

The n processes are started at once, with the last partition showing only its first round (so
no round after the first can be mixed yet): the rest of it is already written, in one open
transaction of a transactional producer, which the learners (reading ``read_committed``, as
mixing mode does) cannot read past. The clock starts at the first reading of their ``/stats``
(every ``WATCH_INTERVAL_S``) where each owns partitions and together they own all of them (the
group is stable: joining is not counted); the transaction is then committed, so the held rounds
appear at once without the benchmark's publishing in the timed window, and the clock stops when
the mixed round that holds the last event is served. The
rate is the events learned in between (all of them minus those learned when the clock started,
at most half) over that time. The best run of each side is kept. Both
sides must serve bit-identical mixed weights (a correctness check).

Record: ``mixing_learners2_vs_1`` (bar 1.3x).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
from kafka import KafkaProducer

from bench import BenchRecord, ResultMismatchError
from bench.bench_e2e import broker
from service.cli.brokers.net import free_port, terminate_process
from service.cli.synthetic import SyntheticStream
from service.settings import load_settings
from service.topics import ensure_topics

logger = logging.getLogger(__name__)

PARTITIONS = 4
DIMENSION = 10
ROUND_EVENTS = 5_000
EVENTS = PARTITIONS * ROUND_EVENTS * 30
QUICK_EVENTS = PARTITIONS * ROUND_EVENTS * 10
ROUNDS = 2
QUICK_ROUNDS = 1
BAR = 1.3
SEED = 20_261_201
TOPIC = "bench-mixing"
HOST = "127.0.0.1"
PRODUCER_LINGER_MS = 20
PRODUCER_BATCH_BYTES = 1 << 20
READY_TIMEOUT_S = 90.0
LEARN_TIMEOUT_S = 300.0
HELD_TRANSACTION_TIMEOUT_MS = int(2 * LEARN_TIMEOUT_S * 1000)
"""The held rounds' transaction outlives the wait for a stable group."""
WATCH_INTERVAL_S = 0.02
STOP_TIMEOUT_S = 20.0
OWNING_STATES = ("learning", "waiting for the mix", "starting")


def config(directory: Path, stream: SyntheticStream) -> Path:
    """The learners' TOML: the benchmark model, its reference separator and mixing mode."""
    weights = ", ".join(repr(float(w)) for w in stream.reference)
    path = directory / "mixing.toml"
    path.write_text(
        f'[model]\ndim = {DIMENSION}\n\n[[bound.references]]\nname = "teacher"\n'
        f"weights = [{weights}]\n\n[mixing]\nround_events = {ROUND_EVENTS}\n",
        encoding="utf-8",
    )
    return path


def split(stream: SyntheticStream, count: int) -> dict[int, list[tuple[bytes, bytes]]]:
    """``count`` events of ``stream`` as (key, value), dealt round robin to the partitions."""
    dealt: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(PARTITIONS)}
    for index, (event_id, value) in enumerate(stream.records(count)):
        dealt[index % PARTITIONS].append((event_id.encode(), value))
    return dealt


def _producer(bootstrap: str, **options: Any) -> KafkaProducer:
    kafka = load_settings(kafka={"bootstrap_servers": bootstrap}).kafka
    return KafkaProducer(
        **kafka.client_config(),
        linger_ms=PRODUCER_LINGER_MS,
        batch_size=PRODUCER_BATCH_BYTES,
        **options,
    )


def _send_all(
    producer: KafkaProducer, topic: str, records: dict[int, list[tuple[bytes, bytes]]]
) -> None:
    for partition, items in records.items():
        for key, value in items:
            producer.send(topic, key=key, value=value, partition=partition)
    producer.flush()


def produce(bootstrap: str, topic: str, records: dict[int, list[tuple[bytes, bytes]]]) -> None:
    """Publish ``records`` (partition → (key, value) in order) to ``topic``."""
    producer = _producer(bootstrap, acks=1)
    try:
        _send_all(producer, topic, records)
    finally:
        producer.close()


@contextmanager
def held_back(
    bootstrap: str, topic: str, records: dict[int, list[tuple[bytes, bytes]]]
) -> Iterator[KafkaProducer]:
    """``records`` written in one open transaction; the caller commits it to release them all at
    once (``read_committed`` readers see none of them before)."""
    producer = _producer(
        bootstrap,
        transactional_id=f"bench-mixing-held-{uuid.uuid4().hex[:8]}",
        transaction_timeout_ms=HELD_TRANSACTION_TIMEOUT_MS,
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        _send_all(producer, topic, records)
        yield producer
    finally:
        producer.close()


@contextmanager
def learner_processes(
    config_path: Path, bootstrap: str, topic: str, group: str, logs: list[Path]
) -> Iterator[list[str]]:
    """``novikoff serve`` learners in mixing mode, all started at once; yields their URLs once
    every one is ready."""
    procs: list[tuple[subprocess.Popen[bytes], str, Path]] = []
    try:
        for log in logs:
            port = free_port()
            env = {k: v for k, v in os.environ.items() if not k.startswith("NOVIKOFF_")}
            env.update(
                {
                    "NOVIKOFF_CONFIG": str(config_path),
                    "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
                    "NOVIKOFF_KAFKA__TOPIC": topic,
                    "NOVIKOFF_KAFKA__GROUP_ID": group,
                    "NOVIKOFF_HTTP__HOST": HOST,
                    "NOVIKOFF_HTTP__PORT": str(port),
                    "NOVIKOFF_CHECKPOINT__PATH": str(log.with_suffix(".state")),
                    "NOVIKOFF_LOGGING__LEVEL": "WARNING",
                }
            )
            command = [sys.executable, "-m", "service", "serve"]
            with open(log, "ab") as out:
                proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
            procs.append((proc, f"http://{HOST}:{port}", log))
        deadline = time.monotonic() + READY_TIMEOUT_S
        for proc, url, log in procs:
            while not _ready(url):
                if proc.poll() is not None:
                    raise RuntimeError(f"learner exited with {proc.returncode}; see {log}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"learner {url} not ready in {READY_TIMEOUT_S}s; see {log}")
                time.sleep(WATCH_INTERVAL_S)
        yield [url for _, url, _ in procs]
    finally:
        for proc, _, _ in procs:
            terminate_process(proc, STOP_TIMEOUT_S)


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz").status_code == httpx.codes.OK
    except httpx.TransportError:
        return False


def owned(stats: dict[str, Any]) -> int:
    """Partitions a learner owns (learning, waiting or starting a round)."""
    return sum(1 for s in stats["mixing"]["shards"] if s["state"] in OWNING_STATES)


def learned(stats: list[dict[str, Any]]) -> int:
    """Events the learners have learned so far, mixed or in a round (every round has R)."""
    shards: dict[int, int] = {}
    for one in stats:
        for shard in one["mixing"]["shards"]:
            done = int(shard["contributed_round"]) * ROUND_EVENTS
            done += int(shard["learned_in_round"] or 0)
            shards[shard["partition"]] = max(shards.get(shard["partition"], 0), done)
    return sum(shards.values())


def timed_run(
    config_path: Path,
    bootstrap: str,
    learners: int,
    dealt: dict[int, list[tuple[bytes, bytes]]],
    directory: Path,
) -> tuple[float, list[float]]:
    """(events/s of ``learners`` processes once the group is stable, the served weights)."""
    group = f"bench-mixing-{uuid.uuid4().hex[:8]}"
    topic = f"{TOPIC}-{group}"
    kafka = load_settings(kafka={"bootstrap_servers": bootstrap}).kafka
    ensure_topics(kafka, [topic], partitions=PARTITIONS)
    # The last partition gets its first round only: no mix after round 1 can happen before the
    # clock starts, so the learners cannot run through the stream while the group settles.
    last = PARTITIONS - 1
    held = {last: dealt[last][ROUND_EVENTS:]}
    first = {p: items if p != last else items[:ROUND_EVENTS] for p, items in dealt.items()}
    produce(bootstrap, topic, first)
    total = sum(len(items) for items in dealt.values())
    rounds = total // (ROUND_EVENTS * PARTITIONS)
    logs = [directory / f"{group}-{i}.log" for i in range(learners)]
    with ExitStack() as stack:
        release = stack.enter_context(held_back(bootstrap, topic, held))
        urls = stack.enter_context(learner_processes(config_path, bootstrap, topic, group, logs))
        client = stack.enter_context(httpx.Client(timeout=10.0))
        deadline = time.monotonic() + LEARN_TIMEOUT_S
        while True:
            stats = [client.get(url + "/stats").json() for url in urls]
            if sum(owned(s) for s in stats) == PARTITIONS and all(owned(s) for s in stats):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{learners} learner(s) never owned all the partitions")
            time.sleep(WATCH_INTERVAL_S)
        started, before = time.monotonic(), learned(stats)
        release.commit_transaction()
        if before >= total // 2:
            raise ResultMismatchError(f"{before} of {total} events learned before the clock")
        while True:
            stats = [client.get(url + "/stats").json() for url in urls]
            done = min(int(s["mixing"]["round"]) for s in stats)
            if done >= rounds:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{learners} learner(s) mixed {done} of {rounds} rounds")
            time.sleep(WATCH_INTERVAL_S)
        elapsed = time.monotonic() - started
        weights = [client.get(url + "/model").json()["weights"]["last"] for url in urls]
    if any(w != weights[0] for w in weights):
        raise ResultMismatchError(f"{learners} learners serve different mixed models")
    return (total - before) / elapsed, weights[0]


def run(quick: bool = False) -> list[BenchRecord]:
    """Events/s of one and two learner processes in mixing mode."""
    events = QUICK_EVENTS if quick else EVENTS
    repeats = QUICK_ROUNDS if quick else ROUNDS
    rounds = events // (ROUND_EVENTS * PARTITIONS)
    stream = SyntheticStream(dim=DIMENSION, margin=0.05, noise=0.05, seed=SEED)
    with tempfile.TemporaryDirectory(prefix="novikoff-bench-mixing-") as tmp:
        directory = Path(tmp)
        config_path = config(directory, stream)
        dealt = split(stream, events)
        with broker(directory) as (bootstrap, broker_name, _):
            rates: dict[int, list[float]] = {1: [], 2: []}
            models: dict[int, list[float]] = {}
            for _ in range(repeats):
                for learners in (1, 2):
                    rate, weights = timed_run(config_path, bootstrap, learners, dealt, directory)
                    rates[learners].append(rate)
                    models[learners] = weights
    if models[1] != models[2]:
        raise ResultMismatchError("one and two learners served different mixed models")
    one, two = max(rates[1]), max(rates[2])
    return [
        BenchRecord(
            "mixing_learners2_vs_1",
            two,
            one,
            "events/s",
            "one learner process in mixing mode on the same topic and broker",
            bar=BAR,
            details={
                "broker": broker_name,
                "partitions": PARTITIONS,
                "round_events": ROUND_EVENTS,
                "events": events,
                "mixed_rounds": rounds,
                "dimension": DIMENSION,
                "repeats": repeats,
                "cpus": os.cpu_count(),
                "runs_events_per_s": {str(n): r for n, r in rates.items()},
            },
        )
    ]
