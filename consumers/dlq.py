"""The dead-letter writer: every refused record goes to ``<topic>.dlq`` with why and where from.

A dead-letter record keeps the original key and value (byte for byte) and the original headers
(except any ``novikoff.*`` ones, which are replaced), and adds:

``novikoff.reason``
    The reason code (see :data:`consumers.decoding.events.REASON_CODES`).
``novikoff.message``
    What is wrong, for a person.
``novikoff.topic``, ``novikoff.partition``, ``novikoff.offset``
    Where the record came from.

Two cases cannot carry the original value unchanged, and say so in a header:

* a value too large for the broker once the headers are added is cut to
  :data:`TRUNCATED_VALUE_BYTES`, with ``novikoff.truncated`` holding the original length and
  ``novikoff.sha256`` the original's digest (the original stays in the source topic at the given
  coordinates);
* a record with neither key nor value (Kafka refuses to produce one) gets an empty value and
  ``novikoff.null_value: true``.

:meth:`DeadLetterWriter.write` sends a batch and waits until the broker has acknowledged every
record. If any write fails it raises :class:`DeadLetterError` naming the rejections that were not
written, so the caller keeps the source offset before the first of them: a bad event is never
lost, at worst dead-lettered twice after a crash (consumers of the dead-letter topic can
deduplicate on ``topic/partition/offset``).
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from consumers.decoding.events import Rejection

logger = logging.getLogger(__name__)

HEADER_PREFIX = "novikoff."
REASON_HEADER = "novikoff.reason"
MESSAGE_HEADER = "novikoff.message"
TOPIC_HEADER = "novikoff.topic"
PARTITION_HEADER = "novikoff.partition"
OFFSET_HEADER = "novikoff.offset"
TRUNCATED_HEADER = "novikoff.truncated"
DIGEST_HEADER = "novikoff.sha256"
NULL_VALUE_HEADER = "novikoff.null_value"
DLQ_SUFFIX = ".dlq"
TRUNCATED_VALUE_BYTES = 64 * 1024
DEFAULT_FLUSH_TIMEOUT_SECONDS = 30.0


class DeadLetterError(Exception):
    """Some rejections could not be written; ``failed`` lists them (in input order)."""

    def __init__(self, failed: Sequence[Rejection], cause: BaseException | None) -> None:
        super().__init__(f"{len(failed)} dead-letter record(s) not written: {cause!r}")
        self.failed = tuple(failed)
        self.cause = cause


class ProducerFuture(Protocol):
    """The part of kafka-python's ``FutureRecordMetadata`` the writer uses."""

    def get(self, timeout: float | None = None) -> Any: ...


class Producer(Protocol):
    """The part of kafka-python's ``KafkaProducer`` the writer uses."""

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> ProducerFuture: ...

    def flush(self, timeout: float | None = None) -> None: ...

    def close(self, timeout: float | None = None) -> None: ...


def default_dead_letter_topic(source_topic: str) -> str:
    """``<topic>.dlq``."""
    return source_topic + DLQ_SUFFIX


def dead_letter_headers(rejection: Rejection) -> list[tuple[str, bytes]]:
    """The original headers (minus ``novikoff.*``) followed by the ``novikoff.*`` headers."""
    kept = [
        (name, value) for name, value in rejection.headers if not name.startswith(HEADER_PREFIX)
    ]
    return [
        *kept,
        (REASON_HEADER, rejection.reason.encode()),
        (MESSAGE_HEADER, rejection.message.encode("utf-8", "replace")),
        (TOPIC_HEADER, rejection.topic.encode()),
        (PARTITION_HEADER, str(rejection.partition).encode()),
        (OFFSET_HEADER, str(rejection.offset).encode()),
    ]


def _is_too_large(error: BaseException) -> bool:
    """kafka-python's MessageSizeTooLargeError (client side) or RecordTooLarge (broker side)."""
    return type(error).__name__ in {"MessageSizeTooLargeError", "RecordTooLargeError"}


class DeadLetterWriter:
    """Writes rejections to dead-letter topics and counts them by reason.

    Parameters
    ----------
    producer_factory
        Builds the Kafka producer on first use (kafka-python ``KafkaProducer`` in the service; a
        fake in unit tests). The writer owns and closes it.
    topic
        The dead-letter topic, or ``None`` for ``<source topic>.dlq``.
    flush_timeout_seconds
        How long :meth:`write` waits for the broker's acknowledgements.
    """

    def __init__(
        self,
        producer_factory: Callable[[], Producer],
        topic: str | None = None,
        *,
        flush_timeout_seconds: float = DEFAULT_FLUSH_TIMEOUT_SECONDS,
    ) -> None:
        self._factory = producer_factory
        self._topic = topic
        self._timeout = flush_timeout_seconds
        self._producer: Producer | None = None
        self._written: Counter[str] = Counter()

    @property
    def written(self) -> Mapping[str, int]:
        """Dead-letter records acknowledged so far, by reason code."""
        return dict(self._written)

    def topic_for(self, rejection: Rejection) -> str:
        """Where ``rejection`` is written."""
        return self._topic or default_dead_letter_topic(rejection.topic)

    def write(self, rejections: Sequence[Rejection]) -> None:
        """Write every rejection and wait for all acknowledgements.

        Raises
        ------
        DeadLetterError
            When any record was not acknowledged within the timeout (or the producer cannot be
            built); ``failed`` holds those rejections, in input order.
        """
        if not rejections:
            return
        try:
            producer = self._ensure_producer()
        except Exception as exc:
            raise DeadLetterError(rejections, exc) from exc
        pending: list[tuple[Rejection, ProducerFuture | None, BaseException | None]] = []
        for rejection in rejections:
            try:
                pending.append((rejection, self._send(producer, rejection), None))
            except Exception as exc:
                pending.append((rejection, None, exc))
        self._flush(producer)
        failed: list[Rejection] = []
        first_error: BaseException | None = None
        for rejection, future, send_error in pending:
            error = send_error or self._outcome(future)
            if error is not None and _is_too_large(error):
                error = self._write_truncated(producer, rejection)
            if error is None:
                self._written[rejection.reason] += 1
                continue
            failed.append(rejection)
            first_error = first_error or error
        if failed:
            logger.error(
                "dead-letter write failed for %d of %d record(s): %r",
                len(failed),
                len(rejections),
                first_error,
            )
            raise DeadLetterError(failed, first_error)

    def close(self, timeout: float | None = None) -> None:
        """Flush and close the producer (if one was built)."""
        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:
            producer.flush(timeout=timeout)
        except Exception as exc:
            logger.warning("dead-letter producer did not flush on close: %r", exc)
        try:
            producer.close(timeout=timeout)
        except Exception as exc:
            logger.warning("dead-letter producer did not close cleanly: %r", exc)

    def reset(self) -> None:
        """Drop the producer after a failure; the next write builds a new one."""
        self.close(timeout=0)

    # -- internals ------------------------------------------------------------------------------

    def _ensure_producer(self) -> Producer:
        if self._producer is None:
            self._producer = self._factory()
        return self._producer

    def _send(self, producer: Producer, rejection: Rejection) -> ProducerFuture:
        headers = dead_letter_headers(rejection)
        value = rejection.value
        if value is None and rejection.key is None:
            value = b""
            headers.append((NULL_VALUE_HEADER, b"true"))
        return producer.send(
            self.topic_for(rejection), value=value, key=rejection.key, headers=headers
        )

    def _flush(self, producer: Producer) -> None:
        try:
            producer.flush(timeout=self._timeout)
        except Exception as exc:
            # Futures that did not complete report their own failure below.
            logger.warning("dead-letter flush did not complete: %r", exc)

    def _outcome(self, future: ProducerFuture | None) -> BaseException | None:
        if future is None:
            return RuntimeError("record was not sent")
        try:
            future.get(timeout=0)
        except Exception as exc:
            return exc
        return None

    def _write_truncated(self, producer: Producer, rejection: Rejection) -> BaseException | None:
        value = rejection.value or b""
        headers = dead_letter_headers(rejection)
        headers.append((TRUNCATED_HEADER, str(len(value)).encode()))
        headers.append((DIGEST_HEADER, hashlib.sha256(value).hexdigest().encode()))
        logger.warning(
            "dead-letter record for %s/%d@%d is too large; writing its first %d bytes",
            rejection.topic,
            rejection.partition,
            rejection.offset,
            TRUNCATED_VALUE_BYTES,
        )
        try:
            future = producer.send(
                self.topic_for(rejection),
                value=value[:TRUNCATED_VALUE_BYTES],
                key=rejection.key,
                headers=headers,
            )
            producer.flush(timeout=self._timeout)
            future.get(timeout=0)
        except Exception as exc:
            return exc
        return None
