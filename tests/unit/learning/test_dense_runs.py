"""A dense row's update is logged as a dense run: same model, saved state and votes as the same
rows learned in CSR form (whose updates log their columns one by one)."""

from __future__ import annotations

import numpy as np
import pytest

from learning import DenseEncoder, LabelMap, MulticlassPerceptron, Perceptron, dump_state
from learning._base import LinearLearner
from learning._voters import DENSE_RUN
from learning.predictor import PREDICTORS
from learning.sparse import CSRBatch

SIGNS = LabelMap({1: 1, -1: -1})
N = 300
D = 7


def stream(multiclass: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    X = rng.standard_normal((N, D + 1))  # no zeros: every update is a dense run
    X[:, 0] = 1.0
    if multiclass:
        return X, rng.integers(0, 3, N).astype(np.int64)
    return X, np.where(rng.random(N) < 0.5, 1.0, -1.0)


def learner(multiclass: bool) -> LinearLearner:
    if multiclass:
        return MulticlassPerceptron(
            classes=[0, 1, 2], encoder=DenseEncoder(D), max_voters=8, prequential_voted=True
        )
    return Perceptron(SIGNS, encoder=DenseEncoder(D), max_voters=8, prequential_voted=True)


@pytest.mark.parametrize("multiclass", [False, True])
def test_dense_runs_learn_save_and_vote_as_csr_rows(multiclass: bool) -> None:
    X, y = stream(multiclass)
    dense, sparse = learner(multiclass), learner(multiclass)
    dense_result = dense.learn_batch(X, y)
    sparse_result = sparse.learn_batch(CSRBatch.from_dense(X), y)
    assert (dense._state.log_cols == DENSE_RUN).any()  # control: the run form is in use
    assert not (sparse._state.log_cols == DENSE_RUN).any()  # ... and CSR rows never use it
    assert np.array_equal(dense_result.margins, sparse_result.margins)
    assert dense_result.prequential_mistakes == sparse_result.prequential_mistakes
    assert dump_state(dense) == dump_state(sparse)  # the saved log spells the columns out
    assert [(c, w.tolist()) for c, w in dense.voters] == [(c, w.tolist()) for c, w in sparse.voters]
    probes = X[:50] * np.where(np.arange(D + 1) % 3 == 0, 0.0, 1.0)  # some probes sparse
    for name in PREDICTORS:
        for rows in (probes, CSRBatch.from_dense(probes)):
            assert dense.predict_batch(rows, name)[0] == sparse.predict_batch(probes, name)[0]
            assert np.array_equal(
                dense.predict_batch(rows, name)[1], sparse.predict_batch(probes, name)[1]
            )
