"""Transactional waits end: kafka-python's unbounded waits become ``max_block_ms`` timeouts.

The stand-in exposes what :class:`BoundedTransactions` reads from a kafka-python producer (its
transaction manager's request results, kafka-python's own ``TransactionalRequestResult``, and the
sender it wakes), so the real result type decides when a wait ends.
"""

from __future__ import annotations

from typing import Any

import pytest
from kafka.errors import KafkaTimeoutError, ProducerFencedError
from kafka.producer.transaction_manager import TransactionalRequestResult

from consumers.transactional_client import BoundedTransactions

WAIT_MS = 50


class Sender:
    def __init__(self) -> None:
        self.wakeups = 0

    def wakeup(self) -> None:
        self.wakeups += 1


class Manager:
    """Hands out one result per request; ``answer`` says whether and how the broker answers."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.requests: list[str] = []

    def _result(self, request: str) -> TransactionalRequestResult:
        self.requests.append(request)
        result = TransactionalRequestResult()
        if self.answer == "ok":
            result.done()
        elif self.answer == "fenced":
            result.done(ProducerFencedError())
        return result  # "lost": never answered, as after a broker crash mid-request

    def begin_commit(self) -> TransactionalRequestResult:
        return self._result("commit")

    def begin_abort(self) -> TransactionalRequestResult:
        return self._result("abort")

    def send_offsets_to_transaction(self, offsets: Any, group: Any) -> TransactionalRequestResult:
        return self._result("send_offsets")


class Producer:
    def __init__(self, answer: str) -> None:
        self._transaction_manager = Manager(answer)
        self._sender = Sender()

    def send(self, topic: str) -> str:
        return f"sent to {topic}"


CALLS = {
    "commit": lambda p: p.commit_transaction(),
    "abort": lambda p: p.abort_transaction(),
    "send_offsets": lambda p: p.send_offsets_to_transaction({}, "group"),
}


@pytest.mark.parametrize("request_name", sorted(CALLS))
def test_a_lost_request_ends_in_a_timeout_an_answered_one_returns(request_name: str) -> None:
    lost = BoundedTransactions(Producer("lost"), wait_ms=WAIT_MS)
    with pytest.raises(KafkaTimeoutError, match=f"{request_name} not answered within {WAIT_MS}"):
        CALLS[request_name](lost)
    # Control: the same call returns once the broker answers.
    answered = Producer("ok")
    CALLS[request_name](BoundedTransactions(answered, wait_ms=WAIT_MS))
    assert answered._transaction_manager.requests == [request_name]
    assert answered._sender.wakeups == 1


def test_an_error_answer_is_raised_and_other_attributes_are_the_producers() -> None:
    fenced = BoundedTransactions(Producer("fenced"), wait_ms=WAIT_MS)
    with pytest.raises(ProducerFencedError):
        fenced.commit_transaction()
    assert fenced.send("t") == "sent to t"
