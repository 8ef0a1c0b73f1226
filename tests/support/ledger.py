"""Produced vs learned vs dead-lettered: the books the reliability tests keep.

Every record a test publishes gets a unique id, sent as the Kafka record key (the dead-letter
writer keeps keys byte for byte, so even a record that is not JSON can be traced) and, for valid
events, also as the event's ``id``. The broker's acknowledgement gives each record its partition
and offset. The :class:`Ledger` then compares what was produced with

* what the service says it applied: ``/stats`` lists, per partition, the offset ranges applied
  and how many records of them were learned or rejected;
* what is in the dead-letter topic (read back with :func:`read_dead_letters`).

``missing`` must always be empty: no produced record may be neither learned nor dead-lettered.
"""

from __future__ import annotations

import bisect
import json
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from service.cli.synthetic import SyntheticStream, event_json
from tests.support.poison import PoisonKind

PRODUCE_TIMEOUT_S = 120.0
READ_TIMEOUT_S = 60.0
FIGURES_FILE = "reliability.jsonl"
PACED_CHUNK = 250
POLL_MS = 500
MAX_REQUEST_BYTES = 1_048_576
"""kafka-python's default ``max_request_size``, stated so that the near-limit record is sent
exactly as a default producer would send it."""


@dataclass(frozen=True)
class Planned:
    """A record to publish: its id, value and partition, and what must become of it."""

    event_id: str
    value: bytes | None
    partition: int
    reason: str | None = None
    """The reason code it must be dead-lettered with; ``None`` for a valid event."""
    kind: str = "valid"
    features: tuple[float, ...] | None = None
    label: float | None = None


@dataclass(frozen=True)
class Produced:
    """A published record with the coordinates the broker acknowledged."""

    planned: Planned
    offset: int

    @property
    def coordinates(self) -> tuple[int, int]:
        return (self.planned.partition, self.offset)


@dataclass(frozen=True)
class DeadLetter:
    """One record read back from the dead-letter topic."""

    key: bytes | None
    value: bytes | None
    headers: Mapping[str, bytes]

    @property
    def reason(self) -> str:
        return self.headers["novikoff.reason"].decode()

    @property
    def message(self) -> str:
        return self.headers["novikoff.message"].decode()

    @property
    def source(self) -> tuple[str, int, int]:
        return (
            self.headers["novikoff.topic"].decode(),
            int(self.headers["novikoff.partition"]),
            int(self.headers["novikoff.offset"]),
        )


class EventPlan:
    """Valid events from a synthetic stream, with poison records mixed in, spread over partitions.

    Ids are ``<run>-<n>`` with a fresh run id, so two runs never share an id.
    """

    def __init__(self, stream: SyntheticStream, partitions: int = 1) -> None:
        self._stream = stream
        self._partitions = partitions
        self._run = uuid.uuid4().hex[:8]
        self._count = 0

    @property
    def stream(self) -> SyntheticStream:
        return self._stream

    def _next_id(self) -> str:
        event_id = f"{self._run}-{self._count}"
        self._count += 1
        return event_id

    def _partition(self) -> int:
        return self._count % self._partitions

    def valid(self, count: int, start: int = 0) -> list[Planned]:
        """``count`` valid events: the stream's events ``start`` .. ``start + count - 1``."""
        X, y = self._stream.arrays(start + count)
        planned = []
        for x, label in zip(X[start:], y[start:], strict=True):
            partition = self._partition()
            event_id = self._next_id()
            features = tuple(float(v) for v in x)
            planned.append(
                Planned(
                    event_id,
                    event_json(event_id, list(features), int(label)),
                    partition,
                    features=features,
                    label=float(label),
                )
            )
        return planned

    def poison(self, kind: PoisonKind) -> Planned:
        partition = self._partition()
        return Planned(self._next_id(), kind.value, partition, reason=kind.reason, kind=kind.name)

    def mixed(self, valid: int, kinds: Sequence[PoisonKind], seed: int = 0) -> list[Planned]:
        """``valid`` valid events with one record of each poison kind at seeded random places."""
        events = self.valid(valid)
        rng = np.random.default_rng(seed)
        places = sorted(rng.choice(valid + 1, size=len(kinds), replace=True).tolist())
        out: list[Planned] = []
        cursor = 0
        for place, kind in zip(places, kinds, strict=True):
            out.extend(events[cursor:place])
            cursor = place
            out.append(self.poison(kind))
        out.extend(events[cursor:])
        return _repartition(out, self._partitions)


def _repartition(planned: list[Planned], partitions: int) -> list[Planned]:
    """Round-robin partitions in publication order (so each partition gets a share of poison)."""
    return [
        Planned(p.event_id, p.value, i % partitions, p.reason, p.kind, p.features, p.label)
        for i, p in enumerate(planned)
    ]


def publish(
    bootstrap: str, topic: str, planned: Iterable[Planned], *, flush_every: int = 0
) -> list[Produced]:
    """Publish in order, each to its planned partition, keyed by its id; wait for every ack."""
    producer = _producer(bootstrap)
    try:
        sent = []
        for index, item in enumerate(planned, start=1):
            sent.append((item, _send(producer, topic, item)))
            if flush_every and index % flush_every == 0:
                producer.flush(timeout=PRODUCE_TIMEOUT_S)
        producer.flush(timeout=PRODUCE_TIMEOUT_S)
        return [
            Produced(item, future.get(timeout=PRODUCE_TIMEOUT_S).offset) for item, future in sent
        ]
    finally:
        producer.close()


class PacedPublisher:
    """Publishes planned records on a thread at a steady rate, never past a limit the test moves.

    A test that kills the service at chosen points raises the limit just past each point, so the
    service can never race to the end of the stream before the kill lands.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        planned: Sequence[Planned],
        rate_per_s: float,
        chunk: int = PACED_CHUNK,
    ) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._planned = list(planned)
        self._interval = chunk / rate_per_s
        self._chunk = chunk
        self._limit = 0
        self._sent = 0
        self._changed = threading.Condition()
        self._produced: list[Produced] = []
        self._acks: list[tuple[float, int]] = []
        self._error: BaseException | None = None
        self._cancelled = False
        self._thread = threading.Thread(target=self._run, name="paced-publisher", daemon=True)

    @property
    def sent(self) -> int:
        return self._sent

    def flowing_at(self, moment: float, within_s: float) -> bool:
        """Whether records were acknowledged both in the ``within_s`` before ``moment``
        (``time.monotonic()``) and in the ``within_s`` after it."""
        before = any(moment - within_s <= at <= moment for at, _ in self._acks)
        after = any(moment < at <= moment + within_s for at, _ in self._acks)
        return before and after

    def allow(self, count: int) -> None:
        """Let the publisher go up to ``count`` records (never down)."""
        with self._changed:
            self._limit = max(self._limit, min(count, len(self._planned)))
            self._changed.notify_all()

    def start(self) -> PacedPublisher:
        self._thread.start()
        return self

    def cancel(self) -> None:
        """Stop publishing (after the chunk in flight) and wait for the thread."""
        with self._changed:
            self._cancelled = True
            self._changed.notify_all()
        if self._thread.is_alive():
            self._thread.join(PRODUCE_TIMEOUT_S)

    def join(self, timeout_s: float = PRODUCE_TIMEOUT_S) -> list[Produced]:
        """Wait until every planned record is acknowledged; the records with their offsets."""
        self.allow(len(self._planned))
        self._thread.join(timeout_s)
        if self._error is not None:
            raise self._error
        if self._thread.is_alive():
            raise TimeoutError(f"published {self._sent} of {len(self._planned)} records")
        return self._produced

    def _run(self) -> None:
        try:
            producer = _producer(self._bootstrap)
        except BaseException as exc:
            self._error = exc
            return
        try:
            while self._sent < len(self._planned):
                with self._changed:
                    while self._sent >= self._limit and not self._cancelled:
                        self._changed.wait()
                    if self._cancelled:
                        return
                    stop = min(self._limit, self._sent + self._chunk)
                started = time.monotonic()
                batch = self._planned[self._sent : stop]
                futures = [_send(producer, self._topic, item) for item in batch]
                producer.flush(timeout=PRODUCE_TIMEOUT_S)
                self._produced.extend(
                    Produced(item, future.get(timeout=PRODUCE_TIMEOUT_S).offset)
                    for item, future in zip(batch, futures, strict=True)
                )
                self._sent = stop
                self._acks.append((time.monotonic(), stop))
                time.sleep(max(0.0, self._interval - (time.monotonic() - started)))
        except BaseException as exc:
            self._error = exc
        finally:
            producer.close()


def _producer(bootstrap: str) -> KafkaProducer:
    return KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=5,
        max_request_size=MAX_REQUEST_BYTES,
        max_in_flight_requests_per_connection=1,
    )


def _send(producer: KafkaProducer, topic: str, item: Planned) -> Any:
    return producer.send(
        topic, value=item.value, key=item.event_id.encode(), partition=item.partition
    )


def read_dead_letters(
    bootstrap: str,
    topic: str,
    expected: int,
    timeout_s: float = READ_TIMEOUT_S,
    *,
    isolation_level: str = "read_uncommitted",
) -> list[DeadLetter]:
    """Every record of the dead-letter ``topic``, reading until at least ``expected`` arrived
    and the end of every partition is reached.

    ``read_uncommitted`` (the default) also shows records of open and aborted transactions (a
    dead letter is there as soon as it is acknowledged); ``read_committed`` is what a consumer
    of the dead letters sees under exactly-once (``[kafka] transactions``).
    """
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        consumer_timeout_ms=int(timeout_s * 1000),
        isolation_level=isolation_level,
    )
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        letters: list[DeadLetter] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            batches = consumer.poll(timeout_ms=POLL_MS)
            for records in batches.values():
                letters.extend(DeadLetter(r.key, r.value, dict(r.headers or [])) for r in records)
            # end_offsets answers for the isolation level (the last stable offset when
            # read_committed), so a reader never waits for records it will not be shown.
            ends = consumer.end_offsets(assigned)
            caught_up = all(consumer.position(tp) >= ends[tp] for tp in assigned)
            if len(letters) >= expected and caught_up and not batches:
                break
        return letters
    finally:
        consumer.close()


@dataclass
class LedgerReport:
    """What the comparison found; ``problems`` is empty when nothing is lost or doubled."""

    produced: int
    valid: int
    poison: int
    learned: int
    dead_lettered: int
    duplicate_dead_letters: int
    missing: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"produced {self.produced} ({self.valid} valid, {self.poison} poison); learned "
            f"{self.learned}, dead-lettered {self.dead_lettered} "
            f"(+{self.duplicate_dead_letters} repeats); missing {len(self.missing)}"
        )


class Ledger:
    """The produced records of one test, and their comparison with the service's account."""

    def __init__(self, topic: str, produced: Iterable[Produced] = ()) -> None:
        self.topic = topic
        self.records: list[Produced] = list(produced)

    def extend(self, produced: Iterable[Produced]) -> None:
        self.records.extend(produced)

    @property
    def valid(self) -> list[Produced]:
        return [r for r in self.records if r.planned.reason is None]

    @property
    def poison(self) -> list[Produced]:
        return [r for r in self.records if r.planned.reason is not None]

    def by_partition(self) -> dict[int, list[Produced]]:
        grouped: dict[int, list[Produced]] = defaultdict(list)
        for record in self.records:
            grouped[record.planned.partition].append(record)
        for records in grouped.values():
            records.sort(key=lambda r: r.offset)
        return dict(grouped)

    def valid_arrays(self, partition: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Features and labels of the valid events of one partition, in offset order."""
        rows = [r for r in self.by_partition().get(partition, []) if r.planned.reason is None]
        X = np.array([r.planned.features for r in rows], dtype=np.float64)
        y = np.array([r.planned.label for r in rows], dtype=np.float64)
        return X.reshape(len(rows), -1), y

    def check(self, stats: Mapping[str, Any], dead_letters: Sequence[DeadLetter]) -> LedgerReport:
        """Compare with ``/stats`` and the dead-letter topic; see :class:`LedgerReport`."""
        valid, poison = self.valid, self.poison
        report = LedgerReport(
            produced=len(self.records),
            valid=len(valid),
            poison=len(poison),
            learned=int(stats["seen"]),
            dead_lettered=0,
            duplicate_dead_letters=0,
        )
        self._check_partitions(stats, report)
        self._check_dead_letters(dead_letters, report)
        if report.learned != report.valid:
            report.problems.append(f"learned {report.learned} != {report.valid} valid produced")
        if report.learned + report.dead_lettered != report.produced:
            report.problems.append(
                f"learned + dead-lettered = {report.learned + report.dead_lettered} "
                f"!= produced {report.produced}"
            )
        return report

    def _check_partitions(self, stats: Mapping[str, Any], report: LedgerReport) -> None:
        progress = {int(p["partition"]): p for p in stats["partitions"] if p["topic"] == self.topic}
        for partition, records in self.by_partition().items():
            state = progress.get(partition)
            if state is None:
                report.missing.extend(r.planned.event_id for r in records)
                report.problems.append(f"partition {partition} never applied")
                continue
            applied = [tuple(pair) for pair in state["applied"]]
            covered = _Covered(applied)
            lost = [r for r in records if r.offset not in covered]
            report.missing.extend(r.planned.event_id for r in lost)
            valid = sum(1 for r in records if r.planned.reason is None)
            rejected = len(records) - valid
            if (state["learned"], state["rejected"]) != (valid, rejected):
                report.problems.append(
                    f"partition {partition}: service learned {state['learned']} and rejected "
                    f"{state['rejected']}; produced {valid} valid and {rejected} poison"
                )
            span = sum(stop - start for start, stop in applied)
            if span != state["learned"] + state["rejected"]:
                report.problems.append(
                    f"partition {partition}: applied ranges {applied} hold {span} offsets but "
                    f"{state['learned'] + state['rejected']} records were counted"
                )

    def _check_dead_letters(self, dead_letters: Sequence[DeadLetter], report: LedgerReport) -> None:
        expected = {(self.topic, r.planned.partition, r.offset): r for r in self.poison}
        seen: Counter[tuple[str, int, int]] = Counter(d.source for d in dead_letters)
        report.dead_lettered = sum(1 for source in seen if source in expected)
        report.duplicate_dead_letters = sum(count - 1 for count in seen.values())
        for source in seen:
            if source not in expected:
                report.problems.append(f"dead letter for {source}, which was not poison")
        for letter in dead_letters:
            record = expected.get(letter.source)
            if record is None:
                continue
            if letter.reason != record.planned.reason:
                report.problems.append(
                    f"{record.planned.kind} at {letter.source}: reason {letter.reason!r}, "
                    f"expected {record.planned.reason!r} ({letter.message})"
                )
            if letter.key != record.planned.event_id.encode():
                report.problems.append(f"{record.planned.kind}: dead letter lost its key")
        for source, record in expected.items():
            if source not in seen:
                report.missing.append(record.planned.event_id)
                report.problems.append(f"{record.planned.kind} at {source} not dead-lettered")


class _Covered:
    """Offsets inside a sorted list of half-open ranges."""

    def __init__(self, ranges: Iterable[tuple[int, int]]) -> None:
        self._ranges = sorted(ranges)
        self._starts = [start for start, _ in self._ranges]

    def __contains__(self, offset: int) -> bool:
        index = bisect.bisect_right(self._starts, offset) - 1
        return index >= 0 and offset < self._ranges[index][1]


def record_figures(artifacts: Path, scenario: str, **figures: Any) -> None:
    """Append one scenario's figures to ``reliability.jsonl`` (the README's numbers)."""
    line = json.dumps({"scenario": scenario, "at": time.time(), **figures}, default=str)
    with (artifacts / FIGURES_FILE).open("a", encoding="utf-8") as out:
        out.write(line + "\n")
