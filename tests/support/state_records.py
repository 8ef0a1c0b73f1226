"""Reading the state topic back independently of the service (raw record values of one key)."""

from __future__ import annotations

import time

from kafka import KafkaConsumer, TopicPartition

READ_TIMEOUT_S = 30.0
POLL_MS = 500


def read_raw_state_records(
    bootstrap: str, topic: str, key: bytes, isolation_level: str, timeout_s: float = READ_TIMEOUT_S
) -> list[bytes]:
    """Every value of ``key`` in the state topic, oldest first, as ``isolation_level`` sees it."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level=isolation_level,
    )
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        ends = consumer.end_offsets(assigned)
        values: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in assigned):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic} not read to its end within {timeout_s}s")
            for records in consumer.poll(timeout_ms=POLL_MS).values():
                values.extend(r.value for r in records if r.key == key)
        return values
    finally:
        consumer.close()
