"""What the service serves in mixing mode: the newest mixed model and the ``/stats`` section."""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import TYPE_CHECKING, Any

from consumers.mixing.ledger import Mixed, MixLedger
from learning import LinearLearner
from learning.seeding import seed_learner

if TYPE_CHECKING:
    from consumers.mixing.options import MixingOptions


def mixed_learner(fresh: LinearLearner, mixed: Mixed) -> LinearLearner:
    """``fresh`` holding the mixed model: weights w⁽ʳ⁾, the mixed average and the totals."""
    return seed_learner(
        fresh,
        mixed.weights,
        averaged=mixed.averaged if mixed.learned else None,
        counters={
            "seen": mixed.learned,
            "updates": mixed.mistakes,
            "prequential_last": mixed.prequential.get("last", 0),
            "prequential_averaged": mixed.prequential.get("averaged", 0),
        },
    )


def mixing_section(
    ledger: MixLedger,
    options: MixingOptions,
    learning: Mapping[int, int],
    active: Set[int],
) -> dict[str, Any]:
    """The ``mixing`` section of ``/stats``.

    ``learning`` maps the partitions this instance is learning a round of to the valid events
    learned in it so far; ``active`` holds the partitions it owns and has positioned.
    """
    mixed = ledger.current
    contributed = ledger.contributed()
    shards = []
    for p in range(ledger.partitions):
        in_round = contributed[p] + 1
        if p in learning:
            state = "learning"
        elif p not in active:
            state = "owned elsewhere"
        elif contributed[p] > mixed.round:
            state = "waiting for the mix"
        else:
            state = "starting"
        shards.append(
            {
                "partition": p,
                "round": in_round,
                "contributed_round": contributed[p],
                "learned_in_round": learning.get(p),
                "round_events": options.round_events,
                "state": state,
            }
        )
    return {
        "round": mixed.round,
        "partitions": ledger.partitions,
        "round_events": options.round_events,
        "round_seconds": options.round_seconds,
        "contributions_topic": options.contributions_topic,
        "learned": mixed.learned,
        "mistakes": mixed.mistakes,
        "shards": shards,
        "bound": [_jsonable(status) for status in ledger.bound_status],
    }


def _jsonable(status: Any) -> Any:
    """A bound status as JSON (a dataclass with ``as_dict``, or already a mapping)."""
    as_dict = getattr(status, "as_dict", None)
    if callable(as_dict):
        return as_dict()
    if hasattr(status, "__dataclass_fields__"):
        return {name: getattr(status, name) for name in status.__dataclass_fields__}
    return dict(status)
