"""Transactional waits end: kafka-python's unbounded waits become ``max_block_ms`` timeouts, and
a stop's limit ends every wait, one already under way included.

The stand-in exposes what :class:`BoundedTransactions` reads from a kafka-python producer (its
transaction manager's request results, kafka-python's own ``TransactionalRequestResult``, the
sender it wakes, and ``config``). Waits run on a fake clock that each wait slice advances, so the
slices are counted, not timed.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaTimeoutError, ProducerFencedError
from kafka.producer.transaction_manager import TransactionalRequestResult

from consumers.transactional_client import WAIT_SLICE_MS, BoundedTransactions

WAIT_MS = 5 * WAIT_SLICE_MS
LIMIT_MS = 2 * WAIT_SLICE_MS
OWN_WAIT_MS = 3 * WAIT_SLICE_MS
"""Whole tenths of a second: kafka-python's metadata timeout message shows one decimal."""
PRODUCER_API_VERSION = (2, 5)
"""Given, so building the producer does not probe the (absent) broker for its version."""
MS_PER_S = 1000


class Clock:
    """Fake monotonic seconds; ``on_slice`` runs at each wait slice (a SIGTERM arriving)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slices: list[int] = []
        self.on_slice: Callable[[int], None] = lambda n: None

    def __call__(self) -> float:
        return self.now

    def wait(self, timeout_ms: int) -> None:
        self.slices.append(timeout_ms)
        self.now += timeout_ms / MS_PER_S
        self.on_slice(len(self.slices))


class LostResult(TransactionalRequestResult):  # type: ignore[misc]
    """A request never answered (as after a broker crash mid-request); waits on the fake clock."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self._clock = clock

    def wait(self, timeout_ms: int | None = None) -> bool:
        assert timeout_ms is not None, "an unbounded wait"
        self._clock.wait(timeout_ms)
        return False


class Sender:
    def __init__(self) -> None:
        self.wakeups = 0

    def wakeup(self) -> None:
        self.wakeups += 1


class Manager:
    """Hands out one result per request; ``answer`` says whether and how the broker answers."""

    def __init__(self, answer: str, clock: Clock) -> None:
        self.answer = answer
        self.clock = clock
        self.requests: list[str] = []

    def _result(self, request: str) -> TransactionalRequestResult:
        self.requests.append(request)
        if self.answer == "lost":
            return LostResult(self.clock)
        result = TransactionalRequestResult()
        result.done(ProducerFencedError() if self.answer == "fenced" else None)
        return result

    def begin_commit(self) -> TransactionalRequestResult:
        return self._result("commit")

    def begin_abort(self) -> TransactionalRequestResult:
        return self._result("abort")

    def send_offsets_to_transaction(self, offsets: Any, group: Any) -> TransactionalRequestResult:
        return self._result("send_offsets")


class Producer:
    """kafka-python's producer as the wrapper sees it; ``send`` waits for metadata that never
    comes, for ``config["max_block_ms"]`` (read at every call, as kafka-python does)."""

    def __init__(self, answer: str, clock: Clock | None = None) -> None:
        self.clock = clock or Clock()
        self._transaction_manager = Manager(answer, self.clock)
        self._sender = Sender()
        self.config: dict[str, Any] = {"max_block_ms": WAIT_MS}

    def send(self, topic: str) -> str:
        if self._transaction_manager.answer == "lost":
            self.clock.wait(self.config["max_block_ms"])
            raise KafkaTimeoutError("Failed to update metadata")
        return f"sent to {topic}"


def bounded(answer: str) -> tuple[BoundedTransactions, Producer]:
    producer = Producer(answer)
    return BoundedTransactions(producer, wait_ms=WAIT_MS, clock=producer.clock), producer


CALLS = {
    "commit": lambda p: p.commit_transaction(),
    "abort": lambda p: p.abort_transaction(),
    "send_offsets": lambda p: p.send_offsets_to_transaction({}, "group"),
    "send": lambda p: p.send("t"),
}


@pytest.mark.parametrize("request_name", sorted(CALLS))
def test_a_lost_request_ends_in_a_timeout_an_answered_one_returns(request_name: str) -> None:
    lost, producer = bounded("lost")
    with pytest.raises(KafkaTimeoutError, match=f"{request_name} not .* within {WAIT_MS} ms"):
        CALLS[request_name](lost)
    assert sum(producer.clock.slices) == WAIT_MS
    assert set(producer.clock.slices) == {WAIT_SLICE_MS}
    # Control: the same call returns once the broker answers.
    answered, producer = bounded("ok")
    CALLS[request_name](answered)
    assert producer.clock.slices == []
    assert producer.config["max_block_ms"] == WAIT_MS, "the producer's own setting is restored"


@pytest.mark.parametrize("request_name", sorted(CALLS))
def test_a_limit_set_while_waiting_ends_the_wait_by_its_deadline(request_name: str) -> None:
    """The stop's limit, set from another thread during the wait, ends it by the deadline; the
    next wait (the abort of the failed transaction) has nothing left and ends at once."""
    lost, producer = bounded("lost")
    producer.clock.on_slice = lambda n: lost.limit_waits(LIMIT_MS) if n == 1 else None
    with pytest.raises(KafkaTimeoutError, match=f"within {WAIT_SLICE_MS + LIMIT_MS} ms"):
        CALLS[request_name](lost)
    assert sum(producer.clock.slices) == WAIT_SLICE_MS + LIMIT_MS
    with pytest.raises(KafkaTimeoutError, match="abort not answered within 0 ms"):
        lost.abort_transaction()
    # Control: a later, looser limit does not extend the deadline.
    lost.limit_waits(WAIT_MS)
    with pytest.raises(KafkaTimeoutError, match="within 0 ms"):
        CALLS[request_name](lost)


def test_an_error_answer_is_raised_and_other_attributes_are_the_producers() -> None:
    fenced, producer = bounded("fenced")
    with pytest.raises(ProducerFencedError):
        fenced.commit_transaction()
    assert fenced.send("t") == "sent to t"
    assert fenced._transaction_manager is producer._transaction_manager


def test_kafka_python_reads_max_block_ms_at_every_send() -> None:
    """What slicing a send relies on: a real producer whose broker is away waits for the topic's
    metadata for the ``max_block_ms`` in its ``config`` at the time of the call."""
    producer = KafkaProducer(
        bootstrap_servers=f"127.0.0.1:{closed_port()}",
        api_version=PRODUCER_API_VERSION,
        max_block_ms=OWN_WAIT_MS,
    )
    try:
        # Control: the producer's own max_block_ms.
        with pytest.raises(KafkaTimeoutError, match=rf"after {OWN_WAIT_MS / MS_PER_S} secs"):
            producer.send("a-topic", b"value")
        wrapped = BoundedTransactions(producer, wait_ms=WAIT_SLICE_MS)
        # One slice, and what little the clock left after it.
        with pytest.raises(KafkaTimeoutError, match=r"after 0\.[01] secs"):
            wrapped.send("a-topic", b"value")
        assert producer.config["max_block_ms"] == OWN_WAIT_MS
    finally:
        producer.close(timeout=0)


def closed_port() -> int:
    """A local port nothing listens on (bound, read, released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
