"""Overlap the next ``poll()`` with the processing of the records the last one returned.

kafka-python parses fetch responses into records in Python, inside ``poll()``; the runner's
decoding and learning run in compiled kernels that release the GIL. :class:`PrefetchingConsumer`
wraps a consumer so that, once a poll has returned records, the next poll already runs on a
helper thread while the caller processes them. It has the runner's ``Consumer`` shape, so the
runner only wraps what its factory built.

Invariants (each holds whatever the thread timing):

* **One thread in the client at a time.** The helper polls only between the return of one
  ``poll()`` and the caller's next call into the wrapper; every other method first *settles*:
  waits for the poll in flight and keeps its result. So the client is never used by two threads
  at once, and every call but ``poll()`` sees a client with no poll in progress.
* **Rebalance callbacks never run beside the caller's processing.** A rebalance listener passed
  to :meth:`subscribe` is called on the caller's thread, as with a synchronous poll: while a
  prefetch is in flight its calls wait until the caller settles (next ``poll()`` or any other
  call), which runs them; wrapper calls they make go straight to the client (the poll that
  invoked them is still in progress, exactly as in a synchronous rebalance).
* **Nothing fetched is skipped.** Prefetched records are handed out in order by the next
  ``poll()``; a seek drops the prefetched records of its partitions (the client fetches again
  from the new position), and :meth:`close` drops them all (they were never handed out, so never
  applied nor committed).
* **Errors surface where a synchronous poll would raise them:** an exception of a prefetch poll
  is raised by the next ``poll()``.
* **Idle behaviour is unchanged:** an empty poll starts no prefetch, so a quiet or disconnected
  consumer is polled synchronously, as without the wrapper.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from kafka import ConsumerRebalanceListener

logger = logging.getLogger(__name__)

HELPER_THREAD_NAME = "novikoff-prefetch"

Polled = Mapping[Any, list[Any]]
_OWN_ATTRIBUTES = frozenset(
    {
        "_consumer",
        "_executor",
        "_condition",
        "_in_flight",
        "_buffered",
        "_error",
        "_calls",
        "_caller",
        "_in_listener",
    }
)
"""The wrapper's own state: never looked up on the client (not even while it is being built)."""


class _Client(Protocol):
    """The consumer calls the wrapper relays (kafka-python's ``KafkaConsumer`` fits)."""

    def subscribe(self, topics: Sequence[str], listener: Any = None) -> None: ...

    def partitions_for_topic(self, topic: str) -> set[int]: ...

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> Polled: ...

    def seek(self, partition: Any, offset: int) -> None: ...

    def seek_to_beginning(self, *partitions: Any) -> None: ...

    def seek_to_end(self, *partitions: Any) -> None: ...

    def assignment(self) -> set[Any]: ...

    def highwater(self, partition: Any) -> int | None: ...

    def commit(self, offsets: Any = None, timeout_ms: int | None = None) -> None: ...

    def commit_async(self, offsets: Any = None, callback: Any = None) -> Any: ...

    def close(self, autocommit: bool = True, timeout_ms: int | None = None) -> None: ...


class _Call:
    """A listener call waiting for the caller's thread."""

    __slots__ = ("action", "done", "error")

    def __init__(self, action: Callable[[], None]) -> None:
        self.action = action
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.action()
        except BaseException as exc:  # handed back to the thread that waits for it
            self.error = exc
        finally:
            self.done.set()


class _MarshalledListener(ConsumerRebalanceListener):  # type: ignore[misc]
    """A rebalance listener whose calls run on the wrapper's caller thread during a prefetch.

    kafka-python calls it on its IO thread while a poll waits; so it waits for the caller.
    """

    def __init__(self, owner: PrefetchingConsumer, listener: Any) -> None:
        self._owner = owner
        self._listener = listener

    def on_partitions_revoked(self, revoked: Any) -> None:
        self._owner._run_listener(lambda: self._listener.on_partitions_revoked(revoked))

    def on_partitions_lost(self, lost: Any) -> None:
        method = getattr(self._listener, "on_partitions_lost", None)
        if method is None:
            method = self._listener.on_partitions_revoked
        self._owner._run_listener(lambda: method(lost))

    def on_partitions_assigned(self, assigned: Any) -> None:
        self._owner._run_listener(lambda: self._listener.on_partitions_assigned(assigned))


class PrefetchingConsumer:
    """A consumer whose next poll runs while the caller processes the last one (module docs).

    Parameters
    ----------
    consumer
        The client to wrap; only the wrapper may use it from now on.

    Examples
    --------
    >>> class Numbers:
    ...     def __init__(self): self.polls = 0
    ...     def poll(self, timeout_ms=0, max_records=None):
    ...         self.polls += 1
    ...         return {"p": [self.polls]} if self.polls <= 2 else {}
    ...     def close(self, autocommit=True, timeout_ms=None): pass
    >>> consumer = PrefetchingConsumer(Numbers())
    >>> [consumer.poll(), consumer.poll(), consumer.poll()]
    [{'p': [1]}, {'p': [2]}, {}]
    >>> consumer.close()
    """

    def __init__(self, consumer: _Client) -> None:
        self._consumer = consumer
        self._executor: ThreadPoolExecutor | None = None
        self._condition = threading.Condition()
        self._in_flight: Future[Polled] | None = None
        self._buffered: dict[Any, list[Any]] | None = None
        self._error: BaseException | None = None
        self._calls: list[_Call] = []
        self._caller: int | None = None
        self._in_listener = False

    # -- the prefetching poll ---------------------------------------------------------------------

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> Polled:
        """The records of the prefetched poll if one ran, else of a poll now; then prefetch."""
        self._caller = threading.get_ident()
        if self._in_listener:
            return self._consumer.poll(timeout_ms=timeout_ms, max_records=max_records)
        self._settle()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self._buffered is not None:
            polled: Polled = self._buffered
            self._buffered = None
        else:
            polled = self._consumer.poll(timeout_ms=timeout_ms, max_records=max_records)
        if polled:
            self._prefetch(timeout_ms, max_records)
        return polled

    def _prefetch(self, timeout_ms: int, max_records: int | None) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix=HELPER_THREAD_NAME)
        with self._condition:
            # Under the lock, so a listener call of this poll finds it in flight.
            future = self._executor.submit(self._consumer.poll, timeout_ms, max_records)
            self._in_flight = future
        future.add_done_callback(self._wake)

    def _wake(self, future: Future[Polled]) -> None:
        with self._condition:
            self._condition.notify_all()

    def _settle(self) -> None:
        """Wait for the poll in flight (running the listener calls it waits for); keep its
        result for the next :meth:`poll`."""
        while True:
            with self._condition:
                future = self._in_flight
                while future is not None and not future.done() and not self._calls:
                    self._condition.wait()
                calls, self._calls = self._calls, []
            if calls:
                self._run_calls(calls)
                continue
            if future is None:
                return
            with self._condition:
                self._in_flight = None
            error = future.exception()
            if error is not None:
                self._error = error
            else:
                self._buffered = dict(future.result())
            return

    def _run_calls(self, calls: list[_Call]) -> None:
        self._in_listener = True
        try:
            for call in calls:
                call.run()
        finally:
            self._in_listener = False

    def _run_listener(self, action: Callable[[], None]) -> None:
        """Run a listener call now if no prefetch is in flight (a synchronous poll or close is
        running it), else on the caller's thread when it settles."""
        with self._condition:
            prefetching = self._in_flight is not None and not self._in_listener
            if prefetching and threading.get_ident() != self._caller:
                call = _Call(action)
                self._calls.append(call)
                self._condition.notify_all()
            else:
                call = None
        if call is None:
            action()
            return
        call.done.wait()
        if call.error is not None:
            raise call.error

    # -- every other call settles first -----------------------------------------------------------

    def _client(self) -> _Client:
        """The client, with no poll in flight (unless a listener call of that poll runs now)."""
        if not self._in_listener:
            self._settle()
        return self._consumer

    def _drop(self, partitions: Sequence[Any]) -> None:
        if self._buffered:
            for partition in partitions:
                self._buffered.pop(partition, None)

    def subscribe(self, topics: Sequence[str], listener: Any = None) -> None:
        """Subscribe; ``listener`` is called on the caller's thread (module docs)."""
        wrapped = None if listener is None else _MarshalledListener(self, listener)
        self._client().subscribe(topics, listener=wrapped)

    def partitions_for_topic(self, topic: str) -> set[int]:
        """The client's ``partitions_for_topic``."""
        return self._client().partitions_for_topic(topic)

    def seek(self, partition: Any, offset: int) -> None:
        """Seek, dropping the partition's prefetched records (fetched again from ``offset``)."""
        client = self._client()
        self._drop([partition])
        client.seek(partition, offset)

    def seek_to_beginning(self, *partitions: Any) -> None:
        """Seek to the beginning, dropping the partitions' prefetched records."""
        client = self._client()
        self._drop(partitions)
        client.seek_to_beginning(*partitions)

    def seek_to_end(self, *partitions: Any) -> None:
        """Seek to the end, dropping the partitions' prefetched records."""
        client = self._client()
        self._drop(partitions)
        client.seek_to_end(*partitions)

    def assignment(self) -> set[Any]:
        """The client's assignment."""
        return self._client().assignment()

    def highwater(self, partition: Any) -> int | None:
        """The client's highwater mark of ``partition``."""
        return self._client().highwater(partition)

    def commit(self, offsets: Any = None, timeout_ms: int | None = None) -> None:
        """The client's ``commit``."""
        self._client().commit(offsets, timeout_ms=timeout_ms)

    def commit_async(self, offsets: Any = None, callback: Any = None) -> Any:
        """The client's ``commit_async``."""
        return self._client().commit_async(offsets, callback=callback)

    def close(self, autocommit: bool = True, timeout_ms: int | None = None) -> None:
        """Drop the prefetched records, stop the helper thread and close the client."""
        client = self._client()
        self._buffered = None
        self._error = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        client.close(autocommit=autocommit, timeout_ms=timeout_ms)

    def __getattr__(self, name: str) -> Any:
        """Anything else of the client (its coordinator and metadata, read between polls)."""
        if name.startswith("__") or name in _OWN_ATTRIBUTES:
            raise AttributeError(name)
        return getattr(self._client(), name)
