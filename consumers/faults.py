"""Consumer errors by kind: which ones retrying fixes, and what an operator does about the others.

Every error the consumer meets falls in one of a few stable kinds (they are the values of the
``kind`` label of ``novikoff_consumer_errors_total``):

* ``codec``: a record batch is compressed with a codec this process cannot decode;
* ``authorization``: the broker refuses the client (SASL authentication, or no ACL for the topic,
  the group or the cluster);
* ``unknown_topic``: the subscribed topic is absent from the cluster's metadata;
* ``transient``: anything else (broker away, rebalance, timeout): retrying with backoff fixes it.

Only ``transient`` errors are retriable in the sense that waiting alone makes them go away. The
others need a person; :func:`classify` says what to do in the fault's ``fix``.

>>> from kafka.errors import UnsupportedCodecError
>>> fault = classify(UnsupportedCodecError("Libraries for snappy compression codec not found"),
...                  topic="events", group="novikoff")
>>> fault.kind.value, fault.retriable
('codec', False)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from kafka.errors import (
    AuthorizationError,
    GroupAuthorizationFailedError,
    SaslAuthenticationFailedError,
    TopicAuthorizationFailedError,
    UnsupportedCodecError,
)


class FaultKind(StrEnum):
    """The kinds of consumer error (a small, stable set of metric label values)."""

    CODEC = "codec"
    AUTHORIZATION = "authorization"
    UNKNOWN_TOPIC = "unknown_topic"
    TRANSIENT = "transient"


FAULT_KINDS = tuple(kind.value for kind in FaultKind)
"""Every ``kind`` label value, in a fixed order."""

CODEC_LIBRARIES = "python-snappy, lz4 and zstandard"
"""The packages kafka-python decodes snappy, lz4 and zstd batches with (gzip is built in)."""


@dataclass(frozen=True)
class ConsumerFault:
    """One consumer error: its kind, what happened and, unless retrying fixes it, what to do.

    Parameters
    ----------
    kind
        The kind of error.
    cause
        What happened, in a sentence naming the topic, group or codec involved.
    fix
        What an operator does to make it go away (empty for transient errors).
    """

    kind: FaultKind
    cause: str
    fix: str = ""

    @property
    def retriable(self) -> bool:
        """Whether retrying alone fixes it (transient errors only)."""
        return self.kind is FaultKind.TRANSIENT

    @property
    def reason(self) -> str:
        """The cause and the fix in one line (what ``/readyz`` says)."""
        return f"{self.cause}; fix: {self.fix}" if self.fix else self.cause

    def as_dict(self) -> dict[str, str]:
        """``kind``, ``cause`` and ``fix`` as JSON-ready strings."""
        return {"kind": self.kind.value, "cause": self.cause, "fix": self.fix}


class FaultObserver(Protocol):
    """Told of every consumer error the runner meets (the service counts them in a metric)."""

    def on_consumer_error(self, fault: ConsumerFault) -> None:
        """One occurrence of ``fault``."""


class NullFaultObserver:
    """Counts nothing."""

    def on_consumer_error(self, fault: ConsumerFault) -> None:
        """Ignore the fault."""


def classify(exc: BaseException, *, topic: str, group: str) -> ConsumerFault:
    """The fault an exception raised by the Kafka client stands for.

    Parameters
    ----------
    exc
        What ``KafkaConsumer`` (its constructor, ``subscribe`` or ``poll``) raised.
    topic, group
        The subscribed topic and the consumer group, named in the fix.
    """
    if isinstance(exc, UnsupportedCodecError):
        return ConsumerFault(
            FaultKind.CODEC,
            f"a record batch of topic {topic!r} cannot be decoded ({exc})",
            f"install novikoff with its dependencies ({CODEC_LIBRARIES}, which kafka-python "
            "decodes snappy, lz4 and zstd with) and restart; or have the producers use "
            "compression.type none, gzip, snappy, lz4 or zstd",
        )
    if isinstance(exc, SaslAuthenticationFailedError):
        return ConsumerFault(
            FaultKind.AUTHORIZATION,
            f"the broker refused the SASL login ({exc})",
            "check kafka.sasl_mechanism, kafka.sasl_plain_username and kafka.sasl_plain_password "
            "(NOVIKOFF_KAFKA__SASL_*) against the broker's users",
        )
    if isinstance(exc, TopicAuthorizationFailedError):
        return ConsumerFault(
            FaultKind.AUTHORIZATION,
            f"the broker denies this principal access to topic {topic!r} ({exc})",
            f"grant the principal READ and DESCRIBE on topic {topic!r} (kafka-acls --add "
            f"--allow-principal User:<name> --operation Read --operation Describe "
            f"--topic {topic})",
        )
    if isinstance(exc, GroupAuthorizationFailedError):
        return ConsumerFault(
            FaultKind.AUTHORIZATION,
            f"the broker denies this principal the consumer group {group!r} ({exc})",
            f"grant the principal READ on group {group!r} (kafka-acls --add "
            f"--allow-principal User:<name> --operation Read --group {group})",
        )
    if isinstance(exc, AuthorizationError):
        return ConsumerFault(
            FaultKind.AUTHORIZATION,
            f"the broker denies this principal a request the consumer needs ({exc})",
            f"grant the principal READ on topic {topic!r} and group {group!r}, and DESCRIBE "
            "on the cluster (kafka-acls --add ...)",
        )
    return ConsumerFault(FaultKind.TRANSIENT, f"consumer error: {exc!r}")


def unknown_topic(topic: str, bootstrap: str, grace_seconds: float) -> ConsumerFault:
    """The fault of a subscribed topic absent from the metadata for longer than the grace period.

    >>> unknown_topic("events", "127.0.0.1:9092", 30.0).cause
    "topic 'events' does not exist on 127.0.0.1:9092 (absent from the metadata for 30s)"
    """
    return ConsumerFault(
        FaultKind.UNKNOWN_TOPIC,
        f"topic {topic!r} does not exist on {bootstrap} "
        f"(absent from the metadata for {grace_seconds:g}s)",
        f"create it (kafka-topics --bootstrap-server {bootstrap} --create --topic {topic}), "
        "or set kafka.topic (NOVIKOFF_KAFKA__TOPIC) to a topic that exists; "
        "the consumer picks it up without a restart",
    )


class WorkerHealth:
    """What a background Kafka worker (the consumer runner, the mixing runner) tells the service:
    whether it reaches Kafka, why not, and the fault retrying cannot fix.

    Invariant: every fault is counted by the observer; an ERROR line is logged once per distinct
    (kind, cause) until the worker connects again (``_reported`` is cleared then).
    """

    _log: logging.Logger
    _worker: str
    """Names the worker in its fault line (``<worker> cannot learn: ...``)."""
    _connected: bool
    _reason: str | None
    _fault: ConsumerFault | None
    _fault_observer: FaultObserver
    _reported: set[tuple[FaultKind, str]]

    @property
    def connected(self) -> bool:
        """Whether the worker currently reaches the broker (and its group coordinator)."""
        return self._connected

    @property
    def not_ready_reason(self) -> str | None:
        """Why the worker is not connected (``None`` when it is)."""
        return None if self._connected else self._reason

    @property
    def fault(self) -> ConsumerFault | None:
        """The error retrying cannot fix that keeps the worker from learning, if any."""
        return None if self._connected else self._fault

    def _count(self, fault: ConsumerFault) -> None:
        try:
            self._fault_observer.on_consumer_error(fault)
        except Exception as exc:
            self._log.warning("fault observer failed: %r", exc)

    def _log_once(self, fault: ConsumerFault) -> None:
        key = (fault.kind, fault.cause)
        if key not in self._reported:
            self._reported.add(key)
            self._log.error(
                "%s cannot learn: %s; fix: %s",
                self._worker,
                fault.cause,
                fault.fix,
                extra={"fault": fault.kind.value},
            )
