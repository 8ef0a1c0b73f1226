"""kafka-python specifics of mixing mode: the client factory and a workaround."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka import KafkaConsumer


def kafka_consumer(config: Mapping[str, Any]) -> Any:
    """A kafka-python consumer with ``config``."""
    return KafkaConsumer(**config)


def restore_parked_records(consumer: Any) -> None:
    """Let kafka-python hand back the records it parked for a partition paused meanwhile.

    kafka-python 3.0.12 parks the buffered records of a partition paused mid-batch and restores
    them once it is resumed, but only while its in-line slot is ``None``; a drained (empty) batch
    left in that slot blocks the restore, and as long as records are parked the partition is
    never fetched again: a resumed shard would wait for ever. An empty slot is emptied here.
    """
    fetcher: Any = getattr(consumer, "_fetcher", None)
    slot = getattr(fetcher, "_next_partition_records", None)
    if slot is not None and not slot:
        fetcher._next_partition_records = None
