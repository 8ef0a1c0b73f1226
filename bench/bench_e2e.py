"""End to end through a broker: the service's consumer path against a bare kafka-python consumer.

The broker is started by the service's own code (:func:`service.cli.broker.make_broker`) on
loopback: Apache Kafka (KRaft, one node) unless ``BENCH_BROKER=tansu`` asks for the embedded Tansu
of ``novikoff demo``; or it is the cluster named by ``KAFKA_BOOTSTRAP_SERVERS``. The record names
which (``broker``, ``broker_kind``). One topic with one partition receives ``EVENTS`` synthetic
events (:class:`service.cli.synthetic.SyntheticStream`, d = ``DIMENSION``, 5% label noise). Then, in
turns, ``ROUNDS`` times each, with a fresh consumer group every time:

* the reference: a bare ``KafkaConsumer`` with the consumer configuration the service's runner
  uses (``RunnerSettings.kafka_consumer_config()``: same ``max_poll_records``, fetch sizes,
  session and poll timings, and ``read_committed`` when ``[kafka] transactions`` is on) polling
  with the service's ``poll_timeout_ms`` and touching every record's value;
* ours: the service's consumer path, i.e. the engine and metrics built by
  :func:`service.assembly.build_service` driven by a :class:`consumers.runner.ConsumerRunner` with
  the service's runner settings: poll, exactly-once filter, decode + validate, learn, bound,
  metrics, checkpoints (atomic files, every ``checkpoint.every_events`` / ``every_seconds``) and
  group commits after each checkpoint; with ``[kafka] transactions`` on, each checkpoint is also
  a transaction (state record + offsets); never on Tansu (as in the demo).

Before the measured rounds each side reads ``WARMUP_EVENTS`` once, untimed (our compiled kernels
load, the broker's fetch path warms up), except in quick mode. The rounds alternate which side
goes first, so a drift of the machine's load reaches both alike.

Both clocks start when the first ``poll()`` returns records (so the ~3 s group join is not
counted on either side, nor our takeover, which fences, restores and seeks with the partitions
paused before the first fetch) and stop when the last record was read (reference) or learned
(ours: the ``taken_at`` of the engine's first snapshot that shows every event, read every
``WATCH_INTERVAL_S``; reading it is all the watching thread does). Rates are events/s. The
record is the round whose ratio (ours / reference of the same round) is the median of the
rounds; the details hold every round, the best of each side, and the CPU seconds this process
used in each round (every thread of it, the group join and the close included; the broker is
another process): on a loaded machine a round's wall time is mostly waiting for a core, and the
CPU seconds show the work each side did.

Record: ``e2e_vs_raw_consumer`` (bar 0.8x).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer

from bench import BenchRecord, ResultMismatchError
from consumers.kafka_clients import RunnerSettings, kafka_consumer
from consumers.runner import ConsumerRunner
from consumers.state.checkpoint import CheckpointStore
from service.assembly import build_service, runner_settings
from service.cli.broker import BROKER_KINDS, BrokerKind, make_broker
from service.cli.demo import TANSU_TRANSACTIONS
from service.cli.synthetic import SyntheticStream
from service.settings import BOOTSTRAP_ENV_VAR, Settings, load_settings
from service.topics import ensure_state_topic, ensure_topics

logger = logging.getLogger(__name__)

DIMENSION = 10
EVENTS = 150_000
QUICK_EVENTS = 10_000
ROUNDS = 5
QUICK_ROUNDS = 1
WARMUP_EVENTS = QUICK_EVENTS
BAR = 0.8
SEED = 20_241_131
TOPIC = "bench-e2e"
PRODUCER_LINGER_MS = 20
PRODUCER_BATCH_BYTES = 1 << 20
DRAIN_TIMEOUT_S = 180.0
WATCH_INTERVAL_S = 0.05
"""The end time is the snapshot's own, so the watch interval costs no precision; a short one
would only take the GIL from the consumer thread."""
STOP_TIMEOUT_S = 30.0
BROKER_ENV_VAR = "BENCH_BROKER"
"""Not ``NOVIKOFF_*``: the service's settings refuse unknown variables of that prefix."""
DEFAULT_BROKER: BrokerKind = "apache"

_groups = itertools.count()


def broker_kind() -> BrokerKind:
    """The broker kind ``BENCH_BROKER`` asks for (default Apache Kafka)."""
    wanted = os.environ.get(BROKER_ENV_VAR, "").strip() or DEFAULT_BROKER
    for kind in BROKER_KINDS:
        if kind == wanted:
            return kind
    raise ValueError(f"{BROKER_ENV_VAR}={wanted!r}: expected one of {', '.join(BROKER_KINDS)}")


@contextmanager
def broker(directory: Path) -> Iterator[tuple[str, str, str]]:
    """(bootstrap servers, what the broker is, its kind): the named cluster or one started
    here."""
    external = os.environ.get(BOOTSTRAP_ENV_VAR)
    if external:
        yield external, f"external cluster {external} ({BOOTSTRAP_ENV_VAR})", "external"
        return
    kind = broker_kind()
    started = make_broker(
        kind,
        log_path=directory / f"{kind}.log",
        data_dir=directory / "kafka" if kind == "apache" else None,
    ).start()
    try:
        yield started.bootstrap, started.description, kind
    finally:
        started.stop()


def make_settings(bootstrap: str, stream: SyntheticStream, state: Path) -> Settings:
    """Service settings for the benchmark topic, a fresh group and a fresh checkpoint directory."""
    return load_settings(
        kafka={
            "bootstrap_servers": bootstrap,
            "topic": TOPIC,
            "group_id": f"bench-e2e-{os.getpid()}-{next(_groups)}",
            # Tansu runs without transactions, as the demo does there.
            **({"transactions": TANSU_TRANSACTIONS} if broker_kind() == "tansu" else {}),
        },
        model={"dim": DIMENSION},
        bound={"references": [{"name": "teacher", "weights": stream.reference.tolist()}]},
        checkpoint={"path": str(state)},
    )


def produce(settings: Settings, stream: SyntheticStream, count: int) -> None:
    """Create the topic (one partition) and publish ``count`` events of ``stream``."""
    ensure_topics(settings.kafka, [TOPIC])
    producer = KafkaProducer(
        **settings.kafka.client_config(),
        acks=1,
        linger_ms=PRODUCER_LINGER_MS,
        batch_size=PRODUCER_BATCH_BYTES,
    )
    try:
        for event_id, value in stream.records(count):
            producer.send(TOPIC, key=event_id.encode(), value=value)
        producer.flush()
    finally:
        producer.close()


def bare_consumer(settings: Settings, count: int) -> float:
    """Events/s of a bare kafka-python consumer reading ``count`` records, configured as the
    service's runner configures its consumer."""
    consumer = KafkaConsumer(TOPIC, **runner_settings(settings).kafka_consumer_config())
    read = 0
    first: float | None = None
    size = 0
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    try:
        while read < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the bare consumer read {read} of {count} records")
            polled = consumer.poll(
                timeout_ms=settings.kafka.poll_timeout_ms,
                max_records=settings.kafka.max_poll_records,
            )
            if polled and first is None:
                first = time.perf_counter()
            for records in polled.values():
                for record in records:
                    size += len(record.value)
                read += len(records)
        end = time.perf_counter()
    finally:
        consumer.close(autocommit=False)
    assert first is not None
    return count / (end - first)


class _FirstRecordClock:
    """A kafka-python consumer that notes when (``time.time()``) its first non-empty poll
    returned."""

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer
        self.first: float | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> Mapping[Any, Any]:
        polled: Mapping[Any, Any] = self._consumer.poll(
            timeout_ms=timeout_ms, max_records=max_records
        )
        if polled and self.first is None:
            self.first = time.time()  # the clock of the engine's snapshots (``taken_at``)
        return polled


def service_consumer(settings: Settings, count: int) -> tuple[float, dict[str, Any]]:
    """Events/s of the service's consumer path learning ``count`` events, and what it did."""
    service = build_service(settings)
    clocks: list[_FirstRecordClock] = []

    def timed_consumer(runner_config: RunnerSettings) -> Any:
        clock = _FirstRecordClock(kafka_consumer(runner_config))
        clocks.append(clock)
        return clock

    engine = service.engine
    runner = ConsumerRunner(
        engine,
        CheckpointStore(settings.checkpoint.path),
        runner_settings(settings),
        consumer_factory=timed_consumer,
        ensure_state_topic=lambda: ensure_state_topic(settings.kafka),
    )
    runner.start()
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    try:
        while (done := engine.snapshot).seen < count:
            if time.monotonic() > deadline or not runner.running:
                raise TimeoutError(f"the service learned {done.seen} of {count} events")
            time.sleep(WATCH_INTERVAL_S)
        end = done.taken_at
    finally:
        runner.stop(STOP_TIMEOUT_S)
    first = clocks[0].first if clocks else None
    assert first is not None
    snapshot = engine.snapshot
    learned = service.registry.get_sample_value("novikoff_events_learned_total")
    checkpoints = sorted(Path(settings.checkpoint.path).iterdir())
    return count / (end - first), {
        "seen": snapshot.seen,
        "mistakes": snapshot.mistakes,
        "invalid": dict(snapshot.invalid),
        "metrics_events_learned_total": learned,
        "checkpoint_files": len(checkpoints),
        "consumers_built": len(clocks),
    }


def median_round(ours: list[float], bare: list[float]) -> int:
    """The index of the round whose ratio ``ours / bare`` is the median (the lower middle one
    for an even count).

    >>> median_round([50.0, 60.0, 40.0], [100.0, 60.0, 50.0])
    2
    """
    ratios = sorted(range(len(ours)), key=lambda i: ours[i] / bare[i])
    return ratios[(len(ratios) - 1) // 2]


def run(quick: bool = False) -> list[BenchRecord]:
    """The end-to-end benchmark."""
    count = QUICK_EVENTS if quick else EVENTS
    rounds = QUICK_ROUNDS if quick else ROUNDS
    stream = SyntheticStream(dim=DIMENSION, margin=0.05, noise=0.05, seed=SEED)
    runs: dict[str, list[float]] = {"bare": [], "ours": []}
    cpu: dict[str, list[float]] = {"bare": [], "ours": []}
    details: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="novikoff-bench-e2e-") as tmp:
        directory = Path(tmp)
        with broker(directory) as (bootstrap, broker_name, kind):
            settings = make_settings(bootstrap, stream, directory / "unused")
            produce(settings, stream, count)
            if not quick:
                bare_consumer(make_settings(bootstrap, stream, directory), WARMUP_EVENTS)
                service_consumer(
                    make_settings(bootstrap, stream, directory / "warm-up"), WARMUP_EVENTS
                )
            for round_number in range(rounds):
                state = directory / f"state-{round_number}"
                sides = ["bare", "ours"] if round_number % 2 == 0 else ["ours", "bare"]
                for side in sides:
                    started_cpu = time.process_time()
                    if side == "bare":
                        rate = bare_consumer(make_settings(bootstrap, stream, directory), count)
                    else:
                        rate, details = service_consumer(
                            make_settings(bootstrap, stream, state), count
                        )
                        if details.get("seen") != count or (
                            details.get("metrics_events_learned_total") != count
                        ):
                            raise ResultMismatchError(
                                f"the service did not learn exactly the {count} events: {details}"
                            )
                    runs[side].append(rate)
                    cpu[side].append(time.process_time() - started_cpu)
    middle = median_round(runs["ours"], runs["bare"])
    ours, bare = runs["ours"][middle], runs["bare"][middle]
    return [
        BenchRecord(
            "e2e_vs_raw_consumer",
            ours,
            bare if not math.isclose(bare, 0.0) else None,
            "events/s",
            "bare kafka-python KafkaConsumer, same topic, same consumer configuration and poll "
            "settings; the round of the median ratio",
            bar=BAR,
            details={
                "broker": broker_name,
                "broker_kind": kind,
                "events": count,
                "dimension": DIMENSION,
                "partitions": 1,
                "max_poll_records": settings.kafka.max_poll_records,
                "poll_timeout_ms": settings.kafka.poll_timeout_ms,
                "checkpoint_every_events": settings.checkpoint.every_events,
                "warmup_events": 0 if quick else WARMUP_EVENTS,
                "ours_runs": runs["ours"],
                "bare_runs": runs["bare"],
                "round_ratios": [o / b for o, b in zip(runs["ours"], runs["bare"], strict=True)],
                "median_round": middle,
                "ours_cpu_seconds": cpu["ours"],
                "bare_cpu_seconds": cpu["bare"],
                "best_ours": max(runs["ours"]),
                "best_bare": max(runs["bare"]),
                "last_service_run": details,
                "rounds": rounds,
            },
        )
    ]
