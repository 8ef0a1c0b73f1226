"""``learn_one`` and ``predict_one`` of the binary learners, as one Python frame each.

:class:`learning.Perceptron` takes these functions as its methods, so a river-style event of a
``binary_buffered`` learner (``learning._one.SingleEvent``) runs here before its kernel with no
other Python call than the ones doing work: the label's sign, the encoder's row (through the
fused prediction of :mod:`learning._fused`), :func:`learning._one.holds`,
each called once, and the snapshot of the event (:func:`learning._one.snapshot`) taken inline.
Nothing is cached between events beyond the learner's single-event buffers, so whatever replaces
the state, the encoder, the label map or a hyperparameter is seen at the next event. Any other
learner or event takes the general paths of :mod:`learning._one`.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from learning import _one, _single
from learning._arrays import NO_COLUMNS
from learning._fused import NO_CODE, learn_buffered_entry
from learning._kernels import PQ_AVERAGED, SEEN, VOTED
from learning._one import (
    SINGLE_EVENT_KEY,
    buffered_row,
    buffers_pack,
    holds,
    predict_one_general,
    single_event,
)
from learning._state_pack import PACK_KEY, state_pack
from learning.encoders._packed import NO_ROW
from learning.predictor import PREDICTOR_CODES

if TYPE_CHECKING:
    from learning.perceptron import Perceptron


def learn_one(learner: Perceptron, x: Any, y: Hashable) -> bool:
    """Predict-then-learn one event (river style); True when it was a mistake (an update).

    Nothing changes when the label or the features are invalid.
    """
    single = learner.__dict__.get(SINGLE_EVENT_KEY) or single_event(learner)
    if not single.binary_buffered:
        code = single.target
        code[0] = learner.label_map.encode(y)
        if getattr(learner.encoder, "sparse", False):
            return _one.learn_sparse(learner, _one.sparse_row(learner, x, grow=True), code)
        return _one.learn_vector(learner, learner.encoder.encode(x, grow=True), code)
    # The encoder vouches for its rows and writes them into the buffers: sparse_row then
    # learn_sparse with nothing asked again that cannot change from one event to the next (the
    # learner's kind, its encoder's guarantees), the compiled entry called here when the state's
    # arrays are regular; an event predict_one just scored that needs no update is counted
    # without a compiled call (learned as scored, below).
    target = learner.label_map.encode(y)
    encoder: Any = learner.encoder
    event = single.event
    if event is not None and holds(event, x):
        held, n = True, event[3]
    else:
        held, n = False, buffered_row(encoder, single, x, True)
    state = learner._state
    dimension = encoder.dimension
    if dimension > state.weights.shape[1]:
        state.ensure_shape(state.rows, dimension)
    if not (state.irregular or learner.prequential_voted):
        scored = single.scored
        if held and scored is not None:
            # Learned as scored: as learning._single.learn_unvoted does, when the weights are
            # the ones predict_one scored with and the event needs no update. They are while
            # the state is the same object and has seen no event since: every change of the
            # weights is a learning step, which counts the event seen, except
            # learning.seeding.seed_learner, which forgets the scores (_one.forget_event).
            # Without an update the kernel only counts: count_mistakes (the live weights
            # predicted right, target * score > 0; the average's sign may differ) and the event
            # seen. Its log-room check changes nothing, and it waits for the next update.
            scored_state, seen, score, total = scored
            counters = state.counters
            if target * score > 0.0 and scored_state is state and counters[SEEN] == seen:
                if (1.0 if total >= 0.0 else -1.0) != target:
                    counters[PQ_AVERAGED] += 1
                counters[SEEN] = seen + 1
                return False
        if state.voter_columns is not NO_COLUMNS:
            learner._voter_columns()  # drops the copies nothing keeps up to date without the vote
        max_entries = learner.max_voter_bytes // single.entry_size
        result = learn_buffered_entry()(
            state.__dict__.get(PACK_KEY) or state_pack(state), single.pack or buffers_pack(single),
            n, target, learner.max_voters, max_entries,
        )  # fmt: skip
        if result != _single.NEEDS_ROOM:
            return result == _single.UPDATED
    columns = single.columns
    complete = n > 0 and int(columns[n - 1]) == n - 1
    return _one.learn_binary_row(learner, columns, single.values, n, dense=complete, target=target)


def predict_one(learner: Perceptron, x: Any, **kwargs: Any) -> Hashable:
    """The label predicted by the ``predictor`` hyperparameter; the model is not changed."""
    single = learner.__dict__.get(SINGLE_EVENT_KEY) or single_event(learner)
    state = learner._state
    which = PREDICTOR_CODES[learner.predictor]
    source = single.source  # None unless binary_buffered
    if source is not None and which != VOTED and not state.irregular:
        # A fresh event in one call of the encoder's fused prediction; an event the buffers
        # hold gets the same row again, and scores of the weights as they are now. A source
        # writes the buffers only in its last step, the compiled call, which raises nothing:
        # what they held is forgotten after it.
        n, code, score, total, seen = source(
            x, learner.encoder, single, single.pack or buffers_pack(single),
            state.__dict__.get(PACK_KEY) or state_pack(state), which,
        )  # fmt: skip
        single.key = None
        if n != NO_ROW:
            # snapshot(x, n, ordered), inline: the row depends on the order of the names when
            # more of them merged into other names' columns than single.order_free.
            ordered = len(x) - n + single.constants[1] > single.order_free
            single.event = (x, dict(x), tuple(x) if ordered else None, n)
            if code != NO_CODE:
                single.scored = (state, seen, score, total)
                return learner.label_map.decode(code)
            single.scored = None
            return predict_one_general(learner, x)
        single.event = single.scored = None
    elif not single.binary_buffered or which == VOTED or state.irregular:
        return predict_one_general(learner, x)
    encoder = learner.encoder
    columns = single.columns
    n = buffered_row(encoder, single, x, False)
    if encoder.dimension > state.weights.shape[1]:
        return predict_one_general(learner, x)
    code = _single.predict_one_entry()(
        columns, single.values, n, n > 0 and int(columns[n - 1]) == n - 1, state.weights,
        state.weight_sums, state.counters, which,
    )  # fmt: skip
    return learner.label_map.decode(code)
