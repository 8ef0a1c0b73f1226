"""The voters' per-column index (learning._voter_index) votes exactly as the full log walk, and
stays exact as voters are dropped, the log wraps, the state is reloaded and dense runs come and
go (it is derived state: rebuilt, never saved)."""

from __future__ import annotations

import numpy as np

from learning import HashingEncoder, Perceptron, dump_state, load_state
from learning._kernels import BORN_MODEL, SEEN
from learning._voter_index import build_index, vote_binary_indexed, vote_scratch
from learning._voters import vote_binary

BITS = 14  # dense voter copies would exceed VOTER_COLUMNS_BYTES: the log votes
EVENTS = 1_200
BATCH = 100
MAX_VOTERS = 16
MAX_VOTER_BYTES = 16 * 150  # 150 binary entries: the byte bound drops voters too
LONGEST = 64


def word_stream(n: int, seed: int) -> tuple[list[dict[str, float]], np.ndarray]:
    """Bags of a few words from a small Zipf-like vocabulary, noisy labels (many mistakes)."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, 301, dtype=np.float64)
    probabilities = (1.0 / ranks) / (1.0 / ranks).sum()
    rows = []
    for _ in range(n):
        words = rng.choice(300, size=int(rng.integers(1, 12)), p=probabilities)
        rows.append({f"w{word}": float(rng.normal()) for word in words.tolist()})
    signs = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    return rows, signs


def learner() -> Perceptron:
    return Perceptron(
        encoder=HashingEncoder(BITS),
        prequential_voted=True,
        max_voters=MAX_VOTERS,
        max_voter_bytes=MAX_VOTER_BYTES,
    )


def learn_in_batches(model: Perceptron, rows: list[dict[str, float]], signs: np.ndarray) -> None:
    for start in range(0, len(rows), BATCH):
        batch = model.encoder.encode_sparse_batch(rows[start : start + BATCH])
        model.learn_batch(batch, signs[start : start + BATCH])


def index_of(model: Perceptron) -> tuple[np.ndarray, np.ndarray]:
    state = model._state
    return build_index(  # type: ignore[no-any-return]
        state.log_counts, state.log_start, state.log_len, state.log_cols, state.counters,
        state.dimension,
    )  # fmt: skip


def votes(
    model: Perceptron,
    rows: list[dict[str, float]],
    indexed: bool,
    index: tuple[np.ndarray, np.ndarray] | None = None,
) -> list[int]:
    """Each row's full vote Σ cₙ·sign(wₙ·x̃) (no early stop), by the index (built now unless
    given) or the full walk."""
    state = model._state
    column_newest, links = index if index is not None else index_of(model)
    batch = model.encoder.encode_sparse_batch(rows)
    w = state.weights[0]
    live = int(state.counters[SEEN] - state.counters[BORN_MODEL])
    scratch = vote_scratch(state.log_counts.shape[0], LONGEST)
    view = np.empty(LONGEST)
    out = []
    for i in range(batch.n_rows):
        cols = batch.indices[batch.indptr[i] : batch.indptr[i + 1]]
        vals = batch.values[batch.indptr[i] : batch.indptr[i + 1]]
        score = float(np.dot(w[cols], vals))
        args = (state.log_counts, state.log_cols, state.log_old, state.counters)
        if indexed:
            acc = vote_binary_indexed(
                w, cols, vals, score, live, *args, column_newest, links, scratch, False
            )
        else:
            acc = vote_binary(
                w, cols, vals, False, score, live, state.log_counts, state.log_start,
                state.log_len, state.log_cols, state.log_old, state.counters, view, False,
                np.zeros(0, dtype=np.int32),
            )  # fmt: skip
        out.append(int(acc))
    return out


def test_the_index_votes_every_voter_as_the_full_walk() -> None:
    rows, signs = word_stream(EVENTS, seed=3)
    model = learner()
    learn_in_batches(model, rows, signs)
    assert model.n_voters == MAX_VOTERS  # the bound is reached: voters were dropped
    probe, _ = word_stream(300, seed=4)
    indexed = votes(model, probe, indexed=True)
    walked = votes(model, probe, indexed=False)
    assert indexed == walked
    assert len(set(walked)) > 5  # control: the votes tell the rows apart


def test_an_index_of_another_log_votes_differently() -> None:
    """Control: the equality above can fail (the index must follow the log it indexes)."""
    rows, signs = word_stream(EVENTS + BATCH, seed=3)
    model = learner()
    learn_in_batches(model, rows[:EVENTS], signs[:EVENTS])
    stale_index = index_of(model)
    capacity = model._state.log_cols.shape
    model.learn_batch(model.encoder.encode_sparse_batch(rows[EVENTS:]), signs[EVENTS:])
    assert model._state.log_cols.shape == capacity  # the stale index still fits the arrays
    probe, _ = word_stream(300, seed=4)
    walked = votes(model, probe, indexed=False)
    assert votes(model, probe, indexed=True, index=stale_index) != walked
    assert votes(model, probe, indexed=True) == walked


def test_sparse_batches_count_voted_mistakes_like_one_event_at_a_time() -> None:
    """Batches keep the index up to date across drops, wraps, a reload and dense rows;
    learn_one walks the whole log. Every prequential count and the whole state agree."""
    rows, signs = word_stream(EVENTS, seed=5)
    batched, single = learner(), learner()
    half = EVENTS // 2
    learn_in_batches(batched, rows[:half], signs[:half])
    reloaded, _, _ = load_state(dump_state(batched))
    assert isinstance(reloaded, Perceptron)
    dense_rows = batched.encoder.encode_sparse_batch(rows[half : half + 10]).to_dense()
    reloaded.learn_batch(dense_rows, signs[half : half + 10])
    learn_in_batches(reloaded, rows[half + 10 :], signs[half + 10 :])
    for row, sign in zip(rows, signs.tolist(), strict=True):
        single.learn_one(row, sign > 0)
    assert reloaded.prequential_mistakes == single.prequential_mistakes
    assert reloaded.prequential_mistakes["voted"] > EVENTS // 4  # control: many votes counted
    assert dump_state(reloaded) == dump_state(single)


def test_a_dense_run_in_the_log_turns_the_index_off_and_the_vote_stays_exact() -> None:
    """A dense row without zeros is logged as a dense run (implicit columns): no index then."""
    rows, signs = word_stream(400, seed=6)
    width = (1 << BITS) + 1
    dense_rows = np.random.default_rng(7).standard_normal((3, width))
    dense_signs = np.array([1.0, -1.0, 1.0])

    def model() -> Perceptron:
        return Perceptron(encoder=HashingEncoder(BITS), prequential_voted=True, max_voters=8)

    batched, single = model(), model()
    learn_in_batches(batched, rows[:200], signs[:200])
    batched.learn_batch(dense_rows, dense_signs)
    assert index_of(batched)[0].shape == (0,)  # control: a dense run is kept
    learn_in_batches(batched, rows[200:], signs[200:])
    for row, sign in zip(rows[:200], signs[:200].tolist(), strict=True):
        single.learn_one(row, sign > 0)
    single.learn_batch(dense_rows, dense_signs)
    for row, sign in zip(rows[200:], signs[200:].tolist(), strict=True):
        single.learn_one(row, sign > 0)
    assert batched.prequential_mistakes == single.prequential_mistakes
    assert dump_state(batched) == dump_state(single)
    assert index_of(batched)[0].shape == (width,)  # the run was dropped: indexed again


def test_the_index_votes_exactly_where_voters_score_exactly_zero() -> None:
    """Tenths as values make many voters' scores 0 or a rounding error away from it (ties the
    estimate cannot decide, its own rounding differing from the exact sum's: the exact score is
    summed then); the vote is still the full walk's."""
    rng = np.random.default_rng(8)
    tenths = [0.1, 0.2, 0.3, 0.7]
    rows = [
        {f"w{word}": float(rng.choice(tenths)) for word in rng.integers(0, 6, size=3).tolist()}
        for _ in range(EVENTS)
    ]
    signs = np.where(rng.random(EVENTS) < 0.5, 1.0, -1.0)
    model = learner()
    learn_in_batches(model, rows, signs)
    probe = rows[:300]
    batch = model.encoder.encode_sparse_batch(probe)
    near_zero = sum(
        abs(float(np.dot(weights[batch.indices[start:stop]], batch.values[start:stop]))) < 1e-9
        for _, weights in model.voters
        for start, stop in zip(batch.indptr[:-1].tolist(), batch.indptr[1:].tolist(), strict=True)
    )
    assert near_zero > 20  # control: ties are common, so the exact sums are exercised
    assert votes(model, probe, indexed=True) == votes(model, probe, indexed=False)
