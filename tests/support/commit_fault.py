"""``novikoff serve`` that SIGKILLs itself between the sends of a transaction and its commit.

Run as ``python -m tests.support.commit_fault`` with :data:`KILL_AT_COMMIT_ENV` = N: the N-th
``commit_transaction`` first flushes (every record of the transaction, its dead letters and its
state record, is then on the broker, uncommitted) and its offsets have been sent, then the process
kills itself with SIGKILL before the commit is requested. Production code carries no such hook:
this module patches the service's transactional producer
(:class:`consumers.transactional_client.BoundedTransactions`, the commit every transaction goes
through) in the child process only.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from consumers.transactional_client import BoundedTransactions
from service.cli.main import main as novikoff_main

KILL_AT_COMMIT_ENV = "COMMIT_FAULT_KILL_AT"
SENT_MARKER = "commit_fault: every record of transaction sent; SIGKILL before commit"


def install(kill_at: int) -> None:
    """Make the ``kill_at``-th ``commit_transaction`` of this process a SIGKILL."""
    original = BoundedTransactions.commit_transaction
    commits = 0

    def commit_transaction(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal commits
        commits += 1
        if commits == kill_at:
            self.flush()
            print(SENT_MARKER, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return original(self, *args, **kwargs)

    BoundedTransactions.commit_transaction = commit_transaction  # type: ignore[method-assign]


def main() -> None:
    install(int(os.environ[KILL_AT_COMMIT_ENV]))
    sys.exit(novikoff_main(["serve"]))


if __name__ == "__main__":
    main()
