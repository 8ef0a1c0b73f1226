"""The consumer runner's connection state: readiness, its reason, faults and backoff.

:class:`RunnerHealth` is the part of :class:`~consumers.runner.ConsumerRunner` that says whether
the consumer reaches the broker and its group coordinator (:attr:`~RunnerHealth.connected`), why
not (:attr:`~RunnerHealth.not_ready_reason`), and which error retrying cannot fix keeps it from
learning (:attr:`~RunnerHealth.fault`, logged once per distinct cause, counted always).
"""

from __future__ import annotations

import logging
import time

from consumers.faults import (
    ConsumerFault,
    FaultKind,
    WorkerHealth,
    classify,
    unknown_topic,
)
from consumers.kafka_clients import Consumer, RunnerSettings

logger = logging.getLogger("consumers.runner")
"""The runner's logger: its lines keep one name, whichever module of the runner writes them."""

BACKOFF_FACTOR = 2.0
COORDINATOR_UNREACHABLE = "the group coordinator is unreachable (broker down or restarting?)"
REBALANCING = "joining the consumer group (rebalance in progress)"


class Backoff:
    """Exponential backoff between reconnection attempts."""

    def __init__(self, first: float, maximum: float) -> None:
        self._first = first
        self._maximum = maximum
        self._next = first

    def next(self) -> float:
        delay = self._next
        self._next = min(self._maximum, self._next * BACKOFF_FACTOR)
        return delay

    def reset(self) -> None:
        self._next = self._first


class RunnerHealth(WorkerHealth):
    """The runner's connection state (a base of :class:`~consumers.runner.ConsumerRunner`)."""

    _log = logger
    _worker = "consumer"
    _settings: RunnerSettings
    _topic_missing_since: float | None
    _resubscribe: bool
    _backoff: Backoff

    def _check_connection(self, consumer: Consumer) -> None:
        reason = _disconnection_reason(consumer)
        if reason is None or reason == REBALANCING:
            # The broker answers: its metadata can be trusted to tell a missing topic.
            reason = self._missing_topic(consumer) or reason
        if reason is None:
            self._set_connected()
        else:
            self._set_disconnected(reason)

    def _missing_topic(self, consumer: Consumer) -> str | None:
        """Why the subscribed topic holds the consumer back, if it is absent from the metadata.

        Absent for less than the grace period, the topic may be on its way (just created, or the
        first metadata not in yet): the consumer waits. Past it, that is an ``unknown_topic``
        fault, reported once; it clears as soon as the topic shows up.
        """
        topic = self._settings.topic
        if consumer.assignment() or _topic_in_metadata(consumer, topic) is not False:
            self._topic_missing_since = None
            if self._fault is not None and self._fault.kind is FaultKind.UNKNOWN_TOPIC:
                logger.info("topic %s exists now; subscribing to it again", topic)
                self._fault = None
                self._resubscribe = True
                return f"topic {topic!r} exists now; subscribing to it again"
            return None
        now = time.monotonic()
        if self._topic_missing_since is None:
            self._topic_missing_since = now
        grace = self._settings.missing_topic_grace_seconds
        if now - self._topic_missing_since < grace:
            return f"waiting for topic {topic!r} to appear in the cluster's metadata"
        if self._fault is None or self._fault.kind is not FaultKind.UNKNOWN_TOPIC:
            self._on_fault(unknown_topic(topic, self._bootstrap(), grace))
        return self._fault.reason if self._fault is not None else None

    def _set_connected(self) -> None:
        if not self._connected:
            logger.info("consumer connected to Kafka")
        self._connected = True
        self._reason = None
        self._fault = None
        self._reported.clear()
        self._backoff.reset()

    def _set_disconnected(self, reason: str) -> None:
        """Not connected, for ``reason``; a standing fault stays the reason until it clears."""
        if self._fault is not None:
            reason = self._fault.reason
        if self._connected:
            logger.warning("consumer lost Kafka: %s", reason)
        self._connected = False
        self._reason = reason

    def _classify(self, exc: BaseException) -> ConsumerFault:
        return classify(exc, topic=self._settings.topic, group=self._settings.group)

    def _on_fault(self, fault: ConsumerFault) -> None:
        """Record a fault retrying cannot fix: counted always, logged once per distinct cause."""
        self._count(fault)
        self._fault = fault
        self._set_disconnected(fault.reason)
        self._log_once(fault)

    def _retry_delay(self) -> float:
        """The wait before the next attempt: the longest backoff while a fault needs a person."""
        if self._fault is not None and not self._fault.retriable:
            return self._settings.backoff_max_seconds
        return self._backoff.next()

    def _bootstrap(self) -> str:
        servers = self._settings.consumer_config.get("bootstrap_servers")
        return ",".join(servers) if isinstance(servers, list | tuple) else str(servers)


def _disconnection_reason(consumer: Consumer) -> str | None:
    """Why a kafka-python consumer is not connected, from its client state (``None``: it is)."""
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None:
        return None
    try:
        if coordinator.coordinator_unknown():
            return COORDINATOR_UNREACHABLE
        # Until the member is stable in a generation it owns no partitions and learns nothing.
        if coordinator.generation_if_stable() is None:
            return REBALANCING
    except Exception as exc:
        return f"cannot tell the connection state: {exc!r}"
    return None


def _topic_in_metadata(consumer: Consumer, topic: str) -> bool | None:
    """Whether the client's last metadata lists ``topic`` (``None``: this client cannot tell)."""
    cluster = getattr(consumer, "_cluster", None)
    if cluster is None:
        return None
    try:
        return cluster.partitions_for_topic(topic) is not None
    except Exception:
        return None
