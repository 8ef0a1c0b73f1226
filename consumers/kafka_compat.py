"""kafka-python 3.0.12's two known traps, and the workarounds both runners apply before a poll.

Each reaches one private attribute of the client (its group coordinator, its fetcher) because the
client exposes no other way; each says in its docstring what goes wrong without it.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)


def resume_stranded_join(consumer: Any) -> bool:
    """Make the next ``poll()`` finish a group join kafka-python started and then forgot.

    kafka-python 3.0.12 runs a JoinGroup/SyncGroup round as a task on its IO thread and completes
    it (member stable, heartbeats back on, the assignment installed, ``on_partitions_assigned``)
    only in a later ``poll()`` that finds ``need_rejoin()`` true. A round the group leader starts
    because its topic metadata changed clears that very trigger itself (the leader records the
    metadata it assigns), so when ``poll()`` returned before the round ended (its timeout ran
    out, or the consumer thread was away committing a transaction or restoring), no later
    ``poll()`` completes it: the member stays "rebalancing" with heartbeats off and never learns
    again. Invariant restored here: a member in the middle of a join (``rejoining``) always has
    ``need_rejoin()`` true, so the next ``poll()`` awaits the round or starts a fresh one.

    Returns whether a stranded join was found.
    """
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None or getattr(coordinator, "rejoining", False) is not True:
        return False
    try:
        if coordinator.need_rejoin():
            return False
        coordinator.request_rejoin()
    except Exception as exc:
        logger.debug("group join state unavailable: %r", exc)
        return False
    logger.warning("kafka-python left a group join unfinished; rejoining the group")
    return True


def restore_parked_records(consumer: Any) -> None:
    """Let kafka-python hand back the records it parked for a partition paused meanwhile.

    kafka-python 3.0.12 parks the buffered records of a partition paused mid-batch and restores
    them once it is resumed, but only while its in-line slot is ``None``; a drained (empty) batch
    left in that slot blocks the restore, and as long as records are parked the partition is
    never fetched again: a resumed shard would wait for ever. An empty slot is emptied here.
    """
    fetcher: Any = getattr(consumer, "_fetcher", None)
    slot = getattr(fetcher, "_next_partition_records", None)
    if slot is not None and not slot:
        fetcher._next_partition_records = None
