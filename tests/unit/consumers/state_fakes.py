"""An in-memory state topic for the follower's and the replica's unit tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kafka.errors import KafkaTimeoutError
from kafka.structs import TopicPartition

TOPIC = "events.state"
WAIT_S = 10.0
TICK_S = 0.01


@dataclass(frozen=True)
class _Record:
    key: bytes | None
    value: bytes | None
    offset: int


class FakeStateTopic:
    """One partition of records; ``down`` makes the broker unreachable."""

    def __init__(self) -> None:
        self.records: list[_Record] = []
        self.down = False
        self.configs: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def append(self, key: bytes, value: bytes | None) -> None:
        self.append_all([(key, value)])

    def append_all(self, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append ``records`` at once: one poll sees all of them."""
        with self.lock:
            for key, value in records:
                self.records.append(_Record(key, value, len(self.records)))

    def consumer(self, **config: Any) -> FakeConsumer:
        self.configs.append(config)
        return FakeConsumer(self)


class FakeConsumer:
    def __init__(self, topic: FakeStateTopic) -> None:
        self._topic = topic
        self._position = 0

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return {0} if topic == TOPIC else None

    def assign(self, partitions: list[TopicPartition]) -> None:
        assert partitions == [TopicPartition(TOPIC, 0)]

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._position = 0

    def poll(self, timeout_ms: int = 0) -> dict[TopicPartition, Sequence[Any]]:
        time.sleep(TICK_S)
        with self._topic.lock:
            if self._topic.down:
                return {}
            fresh = self._topic.records[self._position :]
        if not fresh:
            return {}
        self._position += len(fresh)
        return {TopicPartition(TOPIC, 0): fresh}

    def position(self, partition: TopicPartition) -> int:
        return self._position

    def end_offsets(
        self, partitions: list[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        if self._topic.down:
            raise KafkaTimeoutError("broker down")
        return {partition: len(self._topic.records) for partition in partitions}

    def close(self, timeout_ms: int | None = None) -> None:
        pass


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(TICK_S)
