"""Event sources and sinks behind ``novikoff produce``: synthetic, Iris and file streams.

Every source yields ``(event id, JSON value)`` pairs in the wire format; every sink takes them.
"""

from __future__ import annotations

import csv
import itertools
import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Protocol

import numpy as np
import orjson
from kafka import KafkaProducer

from service.cli.synthetic import event_json
from service.settings import KafkaSettings

logger = logging.getLogger(__name__)

Record = tuple[str, bytes]

IRIS_FEATURE_NAMES = ("sepal_length", "sepal_width", "petal_length", "petal_width")
IRIS_CLASSES = ("setosa", "versicolor", "virginica")
IRIS_FLOWERS = 150
DEFAULT_LABEL_COLUMN = "label"
PROGRESS_WIDTH = 30
PROGRESS_INTERVAL_S = 0.2
PRODUCER_LINGER_MS = 5


class SourceError(ValueError):
    """A source cannot be read (missing file, bad CSV, Iris unavailable); says what to do."""


# -- sources ---------------------------------------------------------------------------------


def iris_records(count: int | None, seed: int, named: bool) -> Iterator[Record]:
    """Fisher's Iris (150 flowers, 3 classes), shuffled by ``seed``, repeated up to ``count``.

    Raises
    ------
    SourceError
        When scikit-learn is not installed (it ships the data set).
    """
    try:
        from sklearn.datasets import load_iris  # noqa: PLC0415 - optional dependency
    except ImportError as exc:
        raise SourceError(
            "the Iris data set comes with scikit-learn, which is not installed: "
            "pip install scikit-learn (or use --file with a CSV)"
        ) from exc
    data = load_iris()
    features = np.asarray(data.data, dtype=np.float64)
    labels = [IRIS_CLASSES[int(target)] for target in data.target]
    order = np.random.default_rng(seed).permutation(len(labels))
    total = len(labels) if count is None else count
    for index, row in zip(range(total), itertools.cycle(order), strict=False):
        values = features[row].tolist()
        payload: object = dict(zip(IRIS_FEATURE_NAMES, values, strict=True)) if named else values
        yield f"iris-{seed}-{index}", event_json(f"iris-{seed}-{index}", payload, labels[row])


def csv_records(
    path: Path, named: bool, label_column: str = DEFAULT_LABEL_COLUMN
) -> Iterator[Record]:
    """Rows of a CSV file with a header; ``label_column`` is the label, the rest are features.

    An ``id`` column, if present, gives the event id.
    """
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        fields = reader.fieldnames or []
        if label_column not in fields:
            raise SourceError(f"{path}: no {label_column!r} column (columns: {', '.join(fields)})")
        names = [name for name in fields if name not in {label_column, "id"}]
        for line, row in enumerate(reader, start=2):
            try:
                values = [float(row[name]) for name in names]
            except (TypeError, ValueError) as exc:
                raise SourceError(f"{path}:{line}: a feature is not a number ({exc})") from None
            event_id = row.get("id") or f"{path.stem}-{line}"
            features: object = dict(zip(names, values, strict=True)) if named else values
            yield event_id, event_json(event_id, features, _label_value(row[label_column]))


def _label_value(text: str | None) -> object:
    """CSV labels that look like integers travel as JSON numbers, others as strings."""
    text = (text or "").strip()
    try:
        return int(text)
    except ValueError:
        return text


def jsonl_records(path: Path) -> Iterator[Record]:
    """Lines of a JSON-lines file, sent unchanged (blank lines skipped)."""
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            value = line.strip()
            if not value:
                continue
            yield _jsonl_id(value, path, number), value


def _jsonl_id(value: bytes, path: Path, number: int) -> str:
    try:
        event = orjson.loads(value)
    except orjson.JSONDecodeError:
        return f"{path.stem}-{number}"
    if isinstance(event, dict) and isinstance(event.get("id"), str):
        return str(event["id"])
    return f"{path.stem}-{number}"


def file_records(
    path: Path, named: bool, label_column: str = DEFAULT_LABEL_COLUMN
) -> Iterator[Record]:
    """A CSV (``.csv``) or JSON-lines (``.jsonl``, ``.json``, ``.ndjson``) file."""
    if not path.is_file():
        raise SourceError(f"{path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return csv_records(path, named, label_column)
    if suffix in {".jsonl", ".json", ".ndjson"}:
        return jsonl_records(path)
    raise SourceError(f"{path}: unknown file type {suffix!r}; use .csv or .jsonl")


# -- sinks -----------------------------------------------------------------------------------


class Sink(Protocol):
    """Where produced records go."""

    def send(self, event_id: str, value: bytes) -> None:
        """Queue one record."""

    def close(self) -> int:
        """Flush everything; return the number of records that failed."""


class KafkaSink:
    """Publishes records to a topic, keyed by event id, with ``acks=all``."""

    def __init__(self, kafka: KafkaSettings, topic: str) -> None:
        self._topic = topic
        self._failed = 0
        self._producer = KafkaProducer(**kafka.producer_config(), linger_ms=PRODUCER_LINGER_MS)

    def send(self, event_id: str, value: bytes) -> None:
        """Queue one record; a failed delivery is counted and logged once per kind."""
        future = self._producer.send(self._topic, value=value, key=event_id.encode())
        future.add_errback(self._on_error)

    def _on_error(self, exc: BaseException) -> None:
        if self._failed == 0:
            logger.error("could not deliver a record to %s: %s", self._topic, exc)
        self._failed += 1

    def close(self) -> int:
        """Flush and close the producer."""
        self._producer.flush()
        self._producer.close()
        return self._failed


class FileSink:
    """Writes records as JSON lines to a file or stdout (``-``)."""

    def __init__(self, target: str) -> None:
        self._owned = target != "-"
        self._handle: IO[bytes] = (
            open(target, "wb") if self._owned else sys.stdout.buffer  # noqa: SIM115
        )

    def send(self, event_id: str, value: bytes) -> None:
        """Write one line."""
        self._handle.write(value + b"\n")

    def close(self) -> int:
        """Flush (and close a file)."""
        self._handle.flush()
        if self._owned:
            self._handle.close()
        return 0


# -- pacing and progress ---------------------------------------------------------------------


class Progress:
    """A one-line progress bar on a terminal; a summary line otherwise."""

    def __init__(self, total: int | None, stream: IO[str] | None = None, enabled: bool = True):
        self._total = total
        self._stream = stream or sys.stderr
        self._live = enabled and self._stream.isatty()
        self._enabled = enabled
        self._start = time.monotonic()
        self._last_draw = 0.0
        self.done = 0

    def advance(self, count: int = 1) -> None:
        """Count ``count`` more records and redraw at most every 0.2 s."""
        self.done += count
        now = time.monotonic()
        if self._live and now - self._last_draw >= PROGRESS_INTERVAL_S:
            self._last_draw = now
            self._stream.write("\r" + self.line(now))
            self._stream.flush()

    def line(self, now: float | None = None) -> str:
        """The bar: done/total, rate and elapsed time."""
        elapsed = max((now or time.monotonic()) - self._start, 1e-9)
        rate = self.done / elapsed
        if self._total:
            filled = int(PROGRESS_WIDTH * min(self.done / self._total, 1.0))
            bar = "#" * filled + "." * (PROGRESS_WIDTH - filled)
            return f"[{bar}] {self.done:,}/{self._total:,} {rate:,.0f} ev/s {elapsed:.1f}s"
        return f"{self.done:,} events {rate:,.0f} ev/s {elapsed:.1f}s"

    def finish(self) -> None:
        """Print the final line."""
        if self._enabled:
            self._stream.write(("\r" if self._live else "") + self.line() + "\n")
            self._stream.flush()


def pump(
    records: Iterable[Record],
    sink: Sink,
    *,
    rate: float | None = None,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Send ``records`` to ``sink`` at most ``rate`` per second; return how many were sent."""
    start = time.monotonic()
    sent = 0
    for event_id, value in records:
        if should_stop is not None and should_stop():
            break
        if rate:
            delay = start + sent / rate - time.monotonic()
            if delay > 0:
                sleep(delay)
        sink.send(event_id, value)
        sent += 1
        if progress is not None:
            progress.advance()
    return sent


def limited(records: Iterable[Record], count: int | None) -> Iterator[Record]:
    """The first ``count`` records (all when ``count`` is None)."""
    return iter(records) if count is None else itertools.islice(records, count)
