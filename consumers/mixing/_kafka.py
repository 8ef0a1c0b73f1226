"""kafka-python specifics of mixing mode: the client factory."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka import KafkaConsumer


def kafka_consumer(config: Mapping[str, Any]) -> Any:
    """A kafka-python consumer with ``config``."""
    return KafkaConsumer(**config)
