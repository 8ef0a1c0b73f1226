"""In-memory stand-ins for kafka-python clients (unit tests only; integration tests use Tansu)."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Sequence
from typing import Any

from consumers.decoding.events import Record

TopicPartition = namedtuple("TopicPartition", ["topic", "partition"])


class FakeFuture:
    def __init__(self, error: BaseException | None) -> None:
        self.error = error

    def get(self, timeout: float | None = None) -> Any:
        if self.error is not None:
            raise self.error
        return "ok"


class MessageSizeTooLargeError(Exception):
    """Named like kafka-python's error, which the writer recognises by name."""


class FakeProducer:
    """Records sends; ``fail`` decides per send whether (and how) it fails."""

    def __init__(
        self, fail: Callable[[str, bytes | None], BaseException | None] | None = None
    ) -> None:
        self.sent: list[dict[str, Any]] = []
        self.fail = fail or (lambda topic, value: None)
        self.flushes = 0
        self.closed = False

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> FakeFuture:
        error = self.fail(topic, value)
        if error is None:
            self.sent.append({"topic": topic, "value": value, "key": key, "headers": headers})
        return FakeFuture(error)

    def flush(self, timeout: float | None = None) -> None:
        self.flushes += 1

    def close(self, timeout: float | None = None) -> None:
        self.closed = True


class FakeConsumer:
    """A consumer over in-memory partitions, with a scripted group assignment."""

    def __init__(self, partitions: dict[tuple[str, int], list[bytes]]) -> None:
        self.logs = partitions
        self.positions: dict[Any, int] = {}
        self.assigned: set[Any] = set()
        self.listener: Any = None
        self.commits: list[dict[Any, Any]] = []
        self.events: list[str] = []
        self.closed = False
        self.poll_calls = 0
        self.pending_assignment: list[Any] | None = None
        self.subscribed = False
        self.metadata_before_join: list[str] = []
        """Topics whose metadata was fetched after ``subscribe`` and before the first poll."""
        self.paused: set[Any] = set()
        self.delivered = 0
        """How many records the polls returned in all (a record read twice counts twice)."""

    def partitions_for_topic(self, topic: str) -> set[int]:
        if self.subscribed and not self.poll_calls:
            self.metadata_before_join.append(topic)
        return {p for (t, p) in self.logs if t == topic}

    def subscribe(self, topics: Sequence[str], listener: Any = None) -> None:
        self.subscribed = True
        self.listener = listener
        self.pending_assignment = [
            TopicPartition(t, p) for (t, p) in sorted(self.logs) if t in topics
        ]

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[Any, list[Record]]:
        self.poll_calls += 1
        if self.pending_assignment is not None:
            assignment, self.pending_assignment = self.pending_assignment, None
            self.assigned = set(assignment)
            self.paused.clear()  # as kafka-python: a new assignment starts unpaused
            self.listener.on_partitions_assigned(assignment)
        out: dict[Any, list[Record]] = {}
        budget = max_records or 500
        for tp in sorted(self.assigned - self.paused):
            log = self.logs[(tp.topic, tp.partition)]
            start = self.positions.get(tp, 0)
            chunk = log[start : start + budget]
            if chunk:
                out[tp] = [
                    Record(tp.topic, tp.partition, start + i, v) for i, v in enumerate(chunk)
                ]
                self.positions[tp] = start + len(chunk)
                budget -= len(chunk)
                self.delivered += len(chunk)
        return out

    def pause(self, *partitions: Any) -> None:
        for tp in partitions:
            self.events.append(f"pause {tp.topic}/{tp.partition}")
            self.paused.add(TopicPartition(tp.topic, tp.partition))

    def resume(self, *partitions: Any) -> None:
        for tp in partitions:
            self.events.append(f"resume {tp.topic}/{tp.partition}")
            self.paused.discard(TopicPartition(tp.topic, tp.partition))

    def seek(self, partition: Any, offset: int) -> None:
        self.events.append(f"seek {partition.topic}/{partition.partition}@{offset}")
        self.positions[TopicPartition(partition.topic, partition.partition)] = offset

    def seek_to_beginning(self, *partitions: Any) -> None:
        for tp in partitions:
            self.events.append(f"beginning {tp.topic}/{tp.partition}")
            self.positions[tp] = 0

    def seek_to_end(self, *partitions: Any) -> None:
        for tp in partitions:
            self.positions[tp] = len(self.logs[(tp.topic, tp.partition)])

    def assignment(self) -> set[Any]:
        return set(self.assigned)

    def highwater(self, partition: Any) -> int | None:
        return len(self.logs[(partition.topic, partition.partition)])

    def commit(self, offsets: Any = None, timeout_ms: int | None = None) -> None:
        self.events.append("commit")
        self.commits.append({(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items()})

    def commit_async(self, offsets: Any = None, callback: Any = None) -> None:
        self.events.append("commit_async")
        self.commits.append({(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items()})

    def close(self, autocommit: bool = True, timeout_ms: int | None = None) -> None:
        if self.assigned and self.listener is not None:
            self.listener.on_partitions_revoked(set(self.assigned))
        self.closed = True


class FakeCluster:
    """kafka-python's metadata cache as the runner reads it: the partitions of known topics."""

    def __init__(self, topics: dict[str, set[int]] | None = None) -> None:
        self.topics = dict(topics or {})

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self.topics.get(topic)


class FaultyConsumer(FakeConsumer):
    """A fake consumer whose polls raise the scripted errors first, then read its partitions.

    ``failures`` holds the exceptions the next polls raise, in order; ``_cluster`` is the
    metadata cache (a topic missing there is missing from the cluster).
    """

    def __init__(
        self,
        partitions: dict[tuple[str, int], list[bytes]],
        failures: Sequence[BaseException] = (),
        cluster: FakeCluster | None = None,
    ) -> None:
        super().__init__(partitions)
        self.failures = list(failures)
        self._cluster = cluster

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[Any, list[Record]]:
        if self.failures:
            self.poll_calls += 1
            raise self.failures.pop(0)
        return super().poll(timeout_ms, max_records)
