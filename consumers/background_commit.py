"""At most one transaction commit under way on its own thread while the consumer loop goes on.

A periodic checkpoint's transaction spends most of its time waiting for the broker (the state
record's partition joins the transaction, the offsets join it, the commit). The consumer thread
hands that wait to :class:`BackgroundCommit` and goes on polling, decoding and learning; what it
learns meanwhile belongs to the *next* transaction, which can begin only once this one has ended.

Invariants
----------
* At most one commit is under way: :meth:`BackgroundCommit.submit` refuses a second one until
  the first was :meth:`~BackgroundCommit.settle`\\ d.
* A commit's outcome is handed over exactly once, to the thread that settles it (the consumer
  thread): a failure is never lost, and it is the settling thread that voids the work since the
  last commit.
* The commit's job touches nothing the consumer thread uses until the commit is settled (the
  runner settles it before any other transactional call: the next commit, a dead letter, an
  abort, a restore, the shutdown).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

THREAD_NAME = "novikoff-commit"


@dataclass(frozen=True)
class SettledCommit:
    """The outcome of one background commit."""

    why: str
    """What triggered the checkpoint (``every_events``, ``interval``...)."""
    applied: int
    """The records applied since the previous commit that this one holds."""
    sequence: int | None
    """The committed state record's sequence (``None`` when the commit failed)."""
    error: BaseException | None
    """Why the commit failed (``None`` when it succeeded)."""


@dataclass(frozen=True)
class _Pending:
    why: str
    applied: int
    future: Future[int]


class BackgroundCommit:
    """Runs one transaction commit at a time on a dedicated thread.

    Examples
    --------
    >>> commits = BackgroundCommit()
    >>> commits.submit(lambda: 7, why="interval", applied=100)
    >>> commits.settle(block=True)
    SettledCommit(why='interval', applied=100, sequence=7, error=None)
    >>> commits.pending, commits.settle(block=True)
    (False, None)
    >>> commits.close()
    """

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._pending: _Pending | None = None

    @property
    def pending(self) -> bool:
        """Whether a commit was submitted and not settled yet."""
        return self._pending is not None

    def submit(self, commit: Callable[[], int], *, why: str, applied: int) -> None:
        """Start ``commit`` (it returns the state record's sequence) on the commit thread.

        Raises
        ------
        RuntimeError
            When the previous commit was not settled.
        """
        if self._pending is not None:
            raise RuntimeError("a commit is already under way: settle it first")
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=THREAD_NAME)
        self._pending = _Pending(why, applied, self._executor.submit(commit))

    def settle(self, *, block: bool) -> SettledCommit | None:
        """The submitted commit's outcome once it has ended (waiting for it with ``block``).

        ``None`` when nothing was submitted, or (without ``block``) while it is under way.
        """
        pending = self._pending
        if pending is None or not (block or pending.future.done()):
            return None
        self._pending = None
        error = pending.future.exception()
        sequence = None if error is not None else pending.future.result()
        return SettledCommit(pending.why, pending.applied, sequence, error)

    def close(self) -> None:
        """Stop the commit thread (after the last commit was settled)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)
