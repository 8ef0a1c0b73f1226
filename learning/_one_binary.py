"""``learn_one`` and ``predict_one`` of the binary learners, as one Python frame each.

:class:`learning.Perceptron` takes these functions as its methods, so a river-style event of a
``binary_buffered`` learner (``learning._one.SingleEvent``) runs here before its kernel with no
other Python call than the ones doing work: the label's sign, the encoder's row (through the
fused prediction of :mod:`learning._fused`), the walker's ``same`` (a murmur3 event, see
:mod:`learning.encoders._walk`) or :func:`learning._one.holds`, each called once, and the
snapshot of an event that was not walked (:func:`learning._one.snapshot`) taken inline.
Nothing is cached between events beyond the learner's single-event buffers, so whatever replaces
the state, the encoder, the label map or a hyperparameter is seen at the next event. Any other
learner or event takes the general paths of :mod:`learning._one`.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from learning import _one, _single
from learning._arrays import NO_COLUMNS
from learning._fused import NO_CODE, NOT_BUILT, learn_buffered_entry, predict_walked_entry
from learning._kernels import VOTED
from learning._one import (
    SINGLE_EVENT_KEY,
    buffered_row,
    holds,
    learner_pack,
    predict_one_general,
    single_event,
    walk_with_room,
)
from learning._state_pack import PACK_KEY
from learning.encoders._walk import NAMES_FULL
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
    # arrays are regular. The row predict_one left in the buffers is learned when the event is
    # the one it encoded: by its walk (Walker.same) or by its snapshot (holds).
    target = learner.label_map.encode(y)
    walked = single.walked  # 0 unless the walker holds a walk
    walker: Any = single.walker
    if walked and walker.same(x, walked, single.names, single.ends, single.raw):
        n = single.row[0]
    else:
        event = single.event
        if event is not None and holds(event, x):
            n = event[3]
        else:
            n = buffered_row(learner.encoder, single, x, True)
    state = learner._state
    if not (state.irregular or learner.prequential_voted):
        if state.voter_columns is not NO_COLUMNS:
            learner._voter_columns()  # drops the copies nothing keeps up to date without the vote
        pack = single.pack  # learner_pack(single, state), inline
        if pack is None or single.pack_state is not state.__dict__.get(PACK_KEY):
            pack = learner_pack(single, state)
        result = learn_buffered_entry()(
            pack, n, target, learner.max_voters, learner.max_voter_bytes // single.entry_size
        )
        if result >= _single.NO_UPDATE:
            return result == _single.UPDATED
        # NEEDS_WIDTH (a vocabulary grows with its names) or NEEDS_ROOM, nothing changed: the
        # weights grow to the encoder's width here, the voters' log below.
        state.ensure_shape(state.rows, learner.encoder.dimension)
    elif learner.encoder.dimension > state.weights.shape[1]:
        state.ensure_shape(state.rows, learner.encoder.dimension)
    columns = single.columns
    complete = n > 0 and int(columns[n - 1]) == n - 1
    return _one.learn_binary_row(learner, columns, single.values, n, dense=complete, target=target)


def predict_one(learner: Perceptron, x: Any, **kwargs: Any) -> Hashable:
    """The label predicted by the ``predictor`` hyperparameter; the model is not changed."""
    single = learner.__dict__.get(SINGLE_EVENT_KEY) or single_event(learner)
    state = learner._state
    which = PREDICTOR_CODES[learner.predictor]
    walker = single.walker  # None unless a murmur3 hashing learner's (binary_buffered)
    if walker is not None and which != VOTED and not state.irregular:
        # The event walked into the buffers, then its row built and predicted in one compiled
        # call, which raises nothing; what the buffers held is forgotten first.
        single.event = single.key = None
        single.walked = 0
        count = walker.pack(x, single.limit, single.names, single.ends, single.raw)
        if count == NAMES_FULL:
            count = walk_with_room(single, x)
        if count > 0:
            pack = single.pack  # learner_pack(single, state), inline
            if pack is None or single.pack_state is not state.__dict__.get(PACK_KEY):
                pack = learner_pack(single, state)
            n_buckets, offset = single.constants
            code = predict_walked_entry()(pack, count, n_buckets, offset, which)
            if code != NOT_BUILT:
                single.walked = count
                if code != NO_CODE:
                    return learner.label_map.decode(code)
        return predict_one_general(learner, x)
    source = single.source  # None unless binary_buffered
    if source is not None and which != VOTED and not state.irregular:
        # A fresh event in one call of the encoder's fused prediction; an event the buffers
        # hold gets the same row again, and scores of the weights as they are now. A source
        # writes the buffers only in its last step, the compiled call, which raises nothing:
        # what they held is forgotten after it.
        code = source(x, learner.encoder, single, learner_pack(single, state), which)
        single.key = None
        if code != NOT_BUILT:
            n = single.row[0]
            # snapshot(x, n, ordered), inline: the row depends on the order of the names when
            # more of them merged into other names' columns than single.order_free.
            ordered = len(x) - n + single.constants[1] > single.order_free
            single.event = (x, dict(x), tuple(x) if ordered else None, n)
            if code != NO_CODE:
                return learner.label_map.decode(code)
            return predict_one_general(learner, x)
        single.event = None
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
