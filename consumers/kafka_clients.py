"""How the consumer loop talks to Kafka: :class:`RunnerSettings` (connection, group,
polling, checkpoint cadence), the :class:`Consumer` protocol the loop drives, and the
real kafka-python consumer and dead-letter producer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kafka import KafkaConsumer, KafkaProducer

from consumers.dlq import Producer
from consumers.state.topic import READ_COMMITTED
from consumers.transactions import TransactionSettings

logger = logging.getLogger(__name__)


DEFAULT_POLL_TIMEOUT_MS = 200
DEFAULT_CHECKPOINT_EVERY_EVENTS = 10_000
DEFAULT_CHECKPOINT_EVERY_SECONDS = 5.0
DEFAULT_SHUTDOWN_DEADLINE_SECONDS = 15.0
DEFAULT_BACKOFF_SECONDS = 0.5
DEFAULT_BACKOFF_MAX_SECONDS = 10.0
DEFAULT_DLQ_TIMEOUT_SECONDS = 10.0
DEFAULT_BOOTSTRAP_TIMEOUT_MS = 5_000
DEFAULT_MISSING_TOPIC_GRACE_SECONDS = 10.0


CONNECTION_KEYS = (
    "bootstrap_servers",
    "client_id",
    "security_protocol",
    "ssl_context",
    "ssl_check_hostname",
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_crlfile",
    "ssl_password",
    "ssl_ciphers",
    "sasl_mechanism",
    "sasl_plain_username",
    "sasl_plain_password",
    "sasl_kerberos_name",
    "sasl_kerberos_service_name",
    "sasl_kerberos_domain_name",
    "sasl_oauth_token_provider",
    "api_version",
    "request_timeout_ms",
    "connections_max_idle_ms",
)
"""kafka-python options shared by the consumer and the dead-letter producer (SASL/TLS included)."""


@dataclass(frozen=True)
class RunnerSettings:
    """How the runner talks to Kafka and when it checkpoints.

    Parameters
    ----------
    topic
        The topic of events.
    consumer_config
        ``KafkaConsumer`` keyword arguments: at least ``bootstrap_servers`` and ``group_id``;
        SASL/TLS options pass through unchanged. ``enable_auto_commit`` is always forced off;
        ``auto_offset_reset`` defaults to ``"earliest"``.
    producer_config
        ``KafkaProducer`` keyword arguments for the dead-letter writer; empty means the
        consumer's connection and security options with ``acks="all"``.
    dlq_topic
        The dead-letter topic (``None``: ``<topic>.dlq``).
    poll_timeout_ms
        How long one poll waits for records.
    checkpoint_every_events, checkpoint_every_seconds
        Checkpoint after this many applied records, or this long after the last checkpoint when
        anything changed, whichever comes first.
    shutdown_deadline_seconds
        Bound on :meth:`ConsumerRunner.stop`: last batch, final checkpoint, commit and close.
    backoff_seconds, backoff_max_seconds
        Wait between reconnection attempts, doubling up to the maximum.
    dlq_timeout_seconds
        How long a dead-letter write waits for the broker's acknowledgement.
    missing_topic_grace_seconds
        How long the subscribed topic may be absent from the cluster's metadata before that is
        reported as an ``unknown_topic`` fault (until then the consumer is only "waiting").
    transactions
        Exactly-once mode (:mod:`consumers.transactions`): one owner of every partition, dead
        letters, state record and offsets in one transaction per checkpoint; ``None`` keeps the
        local checkpoint as the only state (at-least-once dead letters).
    """

    topic: str
    consumer_config: Mapping[str, Any]
    producer_config: Mapping[str, Any] = field(default_factory=dict)
    dlq_topic: str | None = None
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    checkpoint_every_events: int = DEFAULT_CHECKPOINT_EVERY_EVENTS
    checkpoint_every_seconds: float = DEFAULT_CHECKPOINT_EVERY_SECONDS
    shutdown_deadline_seconds: float = DEFAULT_SHUTDOWN_DEADLINE_SECONDS
    backoff_seconds: float = DEFAULT_BACKOFF_SECONDS
    backoff_max_seconds: float = DEFAULT_BACKOFF_MAX_SECONDS
    dlq_timeout_seconds: float = DEFAULT_DLQ_TIMEOUT_SECONDS
    missing_topic_grace_seconds: float = DEFAULT_MISSING_TOPIC_GRACE_SECONDS
    transactions: TransactionSettings | None = None

    def __post_init__(self) -> None:
        missing = [k for k in ("bootstrap_servers", "group_id") if not self.consumer_config.get(k)]
        if missing:
            raise ValueError(f"consumer_config needs {', '.join(missing)}")
        positive = {
            "poll_timeout_ms": self.poll_timeout_ms,
            "checkpoint_every_events": self.checkpoint_every_events,
            "checkpoint_every_seconds": self.checkpoint_every_seconds,
            "shutdown_deadline_seconds": self.shutdown_deadline_seconds,
            "backoff_seconds": self.backoff_seconds,
            "backoff_max_seconds": self.backoff_max_seconds,
            "dlq_timeout_seconds": self.dlq_timeout_seconds,
            "missing_topic_grace_seconds": self.missing_topic_grace_seconds,
        }
        bad = [name for name, value in positive.items() if not value > 0]
        if bad:
            raise ValueError(f"must be positive: {', '.join(bad)}")
        if self.auto_offset_reset not in ("earliest", "latest"):
            raise ValueError("auto_offset_reset must be 'earliest' or 'latest'")

    @property
    def auto_offset_reset(self) -> str:
        """Where a partition no checkpoint knows starts: ``earliest`` (default) or ``latest``."""
        return str(self.consumer_config.get("auto_offset_reset", "earliest"))

    @property
    def max_poll_records(self) -> int | None:
        """Most records one poll returns (kafka-python's default when unset)."""
        value = self.consumer_config.get("max_poll_records")
        return None if value is None else int(value)

    @property
    def group(self) -> str:
        """The consumer group."""
        return str(self.consumer_config["group_id"])

    def kafka_consumer_config(self, *, transactional: bool = False) -> dict[str, Any]:
        """The ``KafkaConsumer`` keyword arguments the runner uses.

        The consumer never asks the broker to create the topic it subscribes to (unless
        ``consumer_config`` says otherwise): a missing topic is an operator's error to report.
        In exactly-once mode (``transactions`` set, or ``transactional``: a caller whose every
        output is a transaction, as mixing mode) it reads ``read_committed``, as Kafka Streams'
        exactly-once processing does: a record of an upstream transaction that aborts is never
        learned, and one of a transaction still open is read once it commits.
        """
        config = {
            "bootstrap_timeout_ms": DEFAULT_BOOTSTRAP_TIMEOUT_MS,
            "allow_auto_create_topics": False,
            **self.consumer_config,
            "enable_auto_commit": False,
            "auto_offset_reset": self.auto_offset_reset,
        }
        if transactional or self.transactions is not None:
            config["isolation_level"] = READ_COMMITTED
        return config

    def connection_config(self) -> dict[str, Any]:
        """The consumer's connection and security options (:data:`CONNECTION_KEYS`)."""
        return {k: v for k, v in self.consumer_config.items() if k in CONNECTION_KEYS}

    def kafka_producer_config(self) -> dict[str, Any]:
        """The ``KafkaProducer`` keyword arguments of the dead-letter writer."""
        if self.producer_config:
            return dict(self.producer_config)
        return {**self.connection_config(), "acks": "all"}


class Consumer(Protocol):
    """The part of kafka-python's ``KafkaConsumer`` the runner uses."""

    def subscribe(self, topics: Sequence[str], listener: Any = None) -> None: ...

    def partitions_for_topic(self, topic: str) -> set[int]: ...

    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> Mapping[Any, list[Any]]: ...

    def seek(self, partition: Any, offset: int) -> None: ...

    def seek_to_beginning(self, *partitions: Any) -> None: ...

    def seek_to_end(self, *partitions: Any) -> None: ...

    def pause(self, *partitions: Any) -> None: ...

    def resume(self, *partitions: Any) -> None: ...

    def assignment(self) -> set[Any]: ...

    def highwater(self, partition: Any) -> int | None: ...

    def commit(self, offsets: Any = None, timeout_ms: int | None = None) -> None: ...

    def commit_async(self, offsets: Any = None, callback: Any = None) -> Any: ...

    def close(self, autocommit: bool = True, timeout_ms: int | None = None) -> None: ...


ConsumerFactory = Callable[[RunnerSettings], Consumer]
ProducerFactory = Callable[[RunnerSettings], Producer]


def kafka_consumer(settings: RunnerSettings) -> Consumer:
    """A real kafka-python consumer."""
    config = settings.kafka_consumer_config()
    consumer = KafkaConsumer(**config)
    _honour_auto_create(consumer, bool(config["allow_auto_create_topics"]))
    typed: Consumer = consumer
    return typed


def _honour_auto_create(consumer: Any, allow: bool) -> None:
    """Hand ``allow_auto_create_topics`` to the client's metadata cache.

    kafka-python 3.0.12 keeps the option in the consumer's config only; its metadata requests
    then always ask the broker to create the subscribed topic, and a broker that allows it does.
    """
    config = getattr(getattr(consumer, "_cluster", None), "config", None)
    if isinstance(config, dict):
        config["allow_auto_create_topics"] = allow


def kafka_producer(settings: RunnerSettings) -> Producer:
    """A real kafka-python producer for dead letters."""
    producer: Producer = KafkaProducer(**settings.kafka_producer_config())
    return producer
