"""The binary learner's per-event steps, shared by the batch kernel and the one-event kernel.

:func:`learning._learn.learn_binary` runs them for every row of a batch, with the prequential
vote between them; :func:`learning._single.learn_unvoted` runs them for one event of a learner
that does not count the vote, without allocating the batch's outputs and scratch. The same code
in the same order on the same row, so the two are bit-identical.

The steps are kept small: a helper that also scored the row and handed back (score, seen, live)
as a tuple made ``learn_binary`` about 35% slower at d = 10 (measured), so each kernel scores
the row itself and the helpers only count.
"""

from __future__ import annotations

from learning._kernels import (
    BORN_MODEL,
    PQ_AVERAGED,
    PQ_LAST,
    UPDATES,
    Ints,
    _inline,
    sign,
)


@_inline
def count_mistakes(score: float, total: float, target: float, counters: Ints) -> None:
    """Count the prequential mistakes of the live weights (``score``, w·x) and of the averaged
    ones (``total``, the sum of the post-event weights times x) on a row labelled ``target``."""
    if sign(score) != target:
        counters[PQ_LAST] += 1
    if sign(total) != target:
        counters[PQ_AVERAGED] += 1


@_inline
def close_update(counters: Ints, seen: int) -> None:
    """Count an update made at event ``seen``: the new live weights are born there."""
    counters[BORN_MODEL] = seen
    counters[UPDATES] += 1
