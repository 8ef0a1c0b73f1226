"""The prefetching consumer: order, seeks, listener calls, errors and close (no broker)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from consumers.prefetch import HELPER_THREAD_NAME as HELPER
from consumers.prefetch import PrefetchingConsumer

WAIT_S = 10.0
"""Only a bound on waiting for the helper thread, never a measured duration."""

LISTENER_GRACE_S = 0.2
"""Time a wrongly unmarshalled listener call would have to show (a slow machine can only hide
a bug, never fail a correct wrapper)."""

TP0 = ("events", 0)
TP1 = ("events", 1)


class Log:
    """One client over in-memory partitions: positions, seeks and the thread of every call."""

    def __init__(self, partitions: dict[Any, list[int]], per_poll: int = 2) -> None:
        self.partitions = partitions
        self.positions = dict.fromkeys(partitions, 0)
        self.per_poll = per_poll
        self.poll_threads: list[int] = []
        self.calls: list[str] = []
        self.listener: Any = None
        self.on_poll: Callable[[int], None] = lambda number: None
        self.closed = False

    def subscribe(self, topics: Sequence[str], listener: Any = None) -> None:
        self.listener = listener

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[Any, list[int]]:
        self.poll_threads.append(threading.get_ident())
        self.on_poll(len(self.poll_threads))
        polled = {}
        for tp, values in self.partitions.items():
            start = self.positions[tp]
            chunk = values[start : start + self.per_poll]
            if chunk:
                polled[tp] = chunk
                self.positions[tp] = start + len(chunk)
        return polled

    def seek(self, partition: Any, offset: int) -> None:
        self.calls.append(f"seek {partition} {offset}")
        self.positions[partition] = offset

    def assignment(self) -> set[Any]:
        self.calls.append("assignment")
        return set(self.partitions)

    def close(self, autocommit: bool = True, timeout_ms: int | None = None) -> None:
        self.closed = True


def drain(consumer: PrefetchingConsumer) -> dict[Any, list[int]]:
    """Every record the consumer hands out, per partition, until a poll is empty."""
    seen: dict[Any, list[int]] = {}
    while polled := consumer.poll():
        for tp, values in polled.items():
            seen.setdefault(tp, []).extend(values)
    return seen


def test_records_come_out_in_order_and_the_next_poll_runs_on_the_helper() -> None:
    log = Log({TP0: list(range(7)), TP1: list(range(100, 103))})
    consumer = PrefetchingConsumer(log)
    assert drain(consumer) == {TP0: list(range(7)), TP1: list(range(100, 103))}
    caller = threading.get_ident()
    # The first poll ran here; every poll after a non-empty one ran on the helper thread.
    assert log.poll_threads[0] == caller
    assert all(thread != caller for thread in log.poll_threads[1:])
    consumer.close()
    assert log.closed


def test_an_empty_poll_starts_no_prefetch() -> None:
    log = Log({TP0: []})
    consumer = PrefetchingConsumer(log)
    assert consumer.poll() == {}
    assert consumer.poll() == {}
    assert log.poll_threads == [threading.get_ident()] * 2
    consumer.close()


def test_a_seek_drops_the_partitions_prefetched_records_and_nothing_is_skipped() -> None:
    log = Log({TP0: list(range(6)), TP1: list(range(100, 106))})
    consumer = PrefetchingConsumer(log)
    assert consumer.poll() == {TP0: [0, 1], TP1: [100, 101]}
    # The prefetch already took 2, 3 and 102, 103; seek partition 0 back to where it was cut.
    consumer.seek(TP0, 1)
    assert consumer.poll() == {TP1: [102, 103]}
    assert drain(consumer) == {TP0: [1, 2, 3, 4, 5], TP1: [104, 105]}
    consumer.close()


def test_without_the_seek_the_prefetched_records_would_be_handed_out() -> None:
    # Control for the test above: the prefetched records of partition 0 do exist.
    log = Log({TP0: list(range(6)), TP1: list(range(100, 106))})
    consumer = PrefetchingConsumer(log)
    consumer.poll()
    assert consumer.poll() == {TP0: [2, 3], TP1: [102, 103]}
    consumer.close()


class Listener:
    def __init__(self, consumer: PrefetchingConsumer | None = None) -> None:
        self.calls: list[tuple[str, int]] = []
        self.consumer = consumer

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.calls.append(("revoked", threading.get_ident()))

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.calls.append(("assigned", threading.get_ident()))
        if self.consumer is not None:
            # A listener seeks through the wrapper, in the middle of the poll that called it.
            for tp in assigned:
                self.consumer.seek(tp, 0)


def rebalance_on_poll(log: Log, number: int, partitions: list[Any]) -> threading.Event:
    """Make poll ``number`` call the listener from another thread (as kafka-python's IO thread
    does) and wait for it, as a rebalance inside poll() does; the event is set when it calls."""
    calling = threading.Event()

    def on_poll(current: int) -> None:
        if current != number:
            return

        def rebalance() -> None:
            calling.set()
            log.listener.on_partitions_revoked(partitions)
            log.listener.on_partitions_assigned(partitions)

        io_thread = threading.Thread(target=rebalance)
        io_thread.start()
        io_thread.join(WAIT_S)

    log.on_poll = on_poll
    return calling


def test_a_listener_called_during_a_prefetch_runs_on_the_callers_thread_when_it_settles() -> None:
    log = Log({TP0: list(range(4))})
    consumer = PrefetchingConsumer(log)
    listener = Listener(consumer)
    consumer.subscribe(["events"], listener=listener)
    calling = rebalance_on_poll(log, 2, [TP0])
    caller = threading.get_ident()
    assert consumer.poll() == {TP0: [0, 1]}
    # Poll 2 runs on the helper now and rebalances while the caller processes records 0, 1:
    # the listener waits for the caller (a listener run at once would have recorded its call).
    assert calling.wait(WAIT_S)
    threading.Event().wait(LISTENER_GRACE_S)
    assert listener.calls == []
    # Settling runs them here; the listener's seek goes straight to the client.
    assert consumer.poll() == {TP0: [0, 1]}
    assert listener.calls == [("revoked", caller), ("assigned", caller)]
    assert "seek ('events', 0) 0" in log.calls
    consumer.close()


def test_a_listener_called_by_a_synchronous_poll_runs_at_once() -> None:
    # Control for the test above: with no prefetch in flight, the listener runs where it is
    # called (the first poll is synchronous).
    log = Log({TP0: list(range(4))})
    consumer = PrefetchingConsumer(log)
    listener = Listener()
    consumer.subscribe(["events"], listener=listener)
    rebalance_on_poll(log, 1, [TP0])
    consumer.poll()
    assert [name for name, _ in listener.calls] == ["revoked", "assigned"]
    assert threading.get_ident() not in {thread for _, thread in listener.calls}
    consumer.close()


def test_every_other_call_waits_for_the_poll_in_flight() -> None:
    log = Log({TP0: list(range(4))})
    release = threading.Event()
    log.on_poll = lambda number: None if number == 1 else release.wait(WAIT_S) and None
    consumer = PrefetchingConsumer(log)
    consumer.poll()
    answer: list[set[Any]] = []
    asking = threading.Thread(target=lambda: answer.append(consumer.assignment()))
    asking.start()
    asking.join(LISTENER_GRACE_S)
    assert asking.is_alive() and answer == [] and log.calls == []
    release.set()
    asking.join(WAIT_S)
    assert answer == [{TP0}]
    consumer.close()


def test_an_error_of_a_prefetch_is_raised_by_the_next_poll() -> None:
    log = Log({TP0: list(range(4))})

    def fail(number: int) -> None:
        if number == 2:
            raise ConnectionError("broker gone")

    log.on_poll = fail
    consumer = PrefetchingConsumer(log)
    assert consumer.poll() == {TP0: [0, 1]}
    assert consumer.assignment() == {TP0}
    with pytest.raises(ConnectionError, match="broker gone"):
        consumer.poll()
    # The failed poll took nothing: the records come next.
    assert consumer.poll() == {TP0: [2, 3]}
    consumer.close()


def test_close_drops_the_prefetched_records_and_stops_the_helper() -> None:
    log = Log({TP0: list(range(4))})
    consumer = PrefetchingConsumer(log)
    before = set(threading.enumerate())
    consumer.poll()
    helpers = [t for t in set(threading.enumerate()) - before if t.name.startswith(HELPER)]
    assert len(helpers) == 1
    consumer.close()
    assert log.closed
    assert not any(t.is_alive() for t in helpers)
