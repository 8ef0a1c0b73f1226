"""What every perceptron learner shares: encoding, the batch kernel call, the three predictors.

Each learner keeps three predictors at once and counts their prequential mistakes (predict with
each, then learn):

* ``last`` — the current weights w (the perceptron itself);
* ``averaged`` — w̄, the mean of the post-event weights over every event seen (Freund &
  Schapire's averaged perceptron), maintained lazily per coordinate at a cost per update of
  O(non-zeros), not per event;
* ``voted`` — Freund & Schapire's voted perceptron: every weight vector wₙ the learner has held
  votes sign(wₙ·x̃) (or its argmax class) with weight cₙ, the number of events it survived.

Dense or sparse rows
--------------------
Every method taking encoded events takes a dense matrix or a :class:`~learning.sparse.CSRBatch`;
both go through the same compiled kernels (:mod:`learning._learn`) and give bit-identical results
on the same vectors. A sparse row costs O(non-zeros) per event; the prequential vote
O(voters x non-zeros).

Voted, bounded memory
---------------------
The voters are an update log (:mod:`learning._voters`): for each update since the oldest kept
voter, the columns it changed and their old values, so a voter costs O(non-zeros of its update),
not O(dimension). Two bounds hold at once: ``max_voters`` voters and ``max_voter_bytes`` bytes of
log (16 bytes an entry binary, 24 multiclass; 4 MiB by default, e.g. 64 voters of 4,096 non-zeros
each, binary). Below them the
vote is exactly Freund & Schapire's. At either bound the **oldest** voters are dropped:
``dropped_voters`` / ``dropped_votes`` report how many voters and how much survival mass were left
out, and the vote is then the exact vote of the newest voters. An update with more entries than
the whole byte bound drops every voter. The averaged predictor never drops anything.

Voted, prequential cost
-----------------------
Counting the voted predictor's prequential mistakes means a vote on every event: the log is walked
back from the live weights, newest voter first, and the vote stops as soon as the votes left cannot
change its outcome. On a stream the perceptron is converging on, the live voter's survival count
soon decides alone; on a stream with persistent noise a vote visits most voters, O(voters x nnz)
per event (a sparse batch finds each voter's entries on x's columns through a per-column index of
the log, :mod:`learning._voter_index`, instead of walking every entry). So the per-event vote is
a hyperparameter, ``prequential_voted``, **off by default**:
the voted predictor itself is always maintained (at a cost per update, not per event) and can
predict at any time; only its prequential mistake count needs the flag. ``last`` and ``averaged``
are always counted (averaged costs one more dot product).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from learning import _kernels as k
from learning import _one
from learning._arrays import (
    BINARY_ROWS_TOUCHED,
    MULTICLASS_ROWS_TOUCHED,
    NO_COLUMNS,
    LinearState,
    entry_bytes,
)
from learning._one import KernelArgs, Outputs
from learning._rows import (
    Rows,
    check_values,
    fit_width,
    learning_rows,
    prediction_rows,
    value_error,
)
from learning._single import NO_CHECK
from learning._voter_index import empty_index
from learning.encoders import MAX_ABS_FEATURE, Encoder, VocabularyEncoder
from learning.errors import FeatureError
from learning.predictor import (
    BatchResult,
    Predictor,
    PredictorName,
    predict_codes,
    predictor_code,
)
from learning.sparse import CSRBatch

if TYPE_CHECKING:  # river ships no type information: mypy sees a plain base class.
    _ClassifierBase = object
else:
    from river.base import Classifier as _ClassifierBase

logger = logging.getLogger(__name__)

IN_KERNEL_CHECK_FACTOR = 4
DEFAULT_MAX_VOTERS = 64
DEFAULT_MAX_VOTER_BYTES = 4 * 2**20
"""4 MiB of update log: 262,144 binary entries (64 voters of 4,096 non-zeros each)."""


class LinearLearner(_ClassifierBase):
    """Base of the perceptron learners (not used directly)."""

    multiclass: ClassVar[bool] = False
    _learning_kernel: ClassVar[Callable[..., int]]
    """The compiled pass of :meth:`learn_batch` (``learn_binary`` or ``learn_multiclass``)."""
    encoder: Encoder
    predictor: PredictorName
    max_voters: int
    max_voter_bytes: int
    prequential_voted: bool
    _state: LinearState

    def _init_common(
        self,
        encoder: Encoder | None,
        predictor: PredictorName,
        max_voters: int,
        max_voter_bytes: int,
        prequential_voted: bool,
    ) -> None:
        predictor_code(predictor)
        if max_voters < 1:
            raise ValueError(f"max_voters must be at least 1, got {max_voters}")
        if max_voter_bytes < 0:
            raise ValueError(f"max_voter_bytes must be at least 0, got {max_voter_bytes}")
        self.encoder = encoder if encoder is not None else VocabularyEncoder()
        self.predictor = predictor
        self.max_voters = max_voters
        self.max_voter_bytes = max_voter_bytes
        self.prequential_voted = prequential_voted

    # ------------------------------------------------------------------ abstract-ish hooks

    def _rows(self) -> int:
        raise NotImplementedError

    def _check_targets(self, y: object, n: int) -> NDArray[Any]:
        raise NotImplementedError

    def encode_labels(self, labels: Sequence[Hashable], *, grow: bool = False) -> NDArray[Any]:
        """Labels → the codes :meth:`learn_batch` takes (±1 floats or class indices)."""
        raise NotImplementedError

    def decode_labels(self, codes: NDArray[Any]) -> list[Hashable]:
        """Codes (as in :attr:`BatchResult.predictions`) → labels."""
        return [self._decode(code) for code in np.asarray(codes).tolist()]

    def _decode(self, code: float) -> Hashable:
        raise NotImplementedError

    def _label_tuple(self) -> tuple[Hashable, ...]:
        raise NotImplementedError

    # ------------------------------------------------------------------ learning

    def learn_batch(self, X: NDArray[np.float64] | CSRBatch, y: NDArray[Any]) -> BatchResult:
        """Predict-then-learn every row of X in order, in one compiled pass.

        Parameters
        ----------
        X
            Encoded events x̃: a dense (n, dimension) matrix or a
            :class:`~learning.sparse.CSRBatch` (bit-identical results on the same vectors; a
            sparse row costs O(non-zeros)). Vocabulary encoders: any width up to the encoder's
            current dimension.
        y
            ±1 floats (binary) or class indices (multiclass), shape (n,).

        A batch is all or nothing: when X or y is invalid a :class:`FeatureError` /
        ``ValueError`` names the first bad row and the learner is left exactly as it was.
        """
        rows = self._fit_learning_width(learning_rows(X, check_values_now=False))
        n = rows.n_rows
        targets = self._check_targets(y, n)
        state = self._state
        # Checking each row inside the kernel, just before it is used, reads X from memory once;
        # keeping the batch atomic then needs a copy of the state, worth it only when X is large
        # next to the state. Otherwise X is checked up front.
        in_kernel = n > 1 and rows.values.nbytes >= IN_KERNEL_CHECK_FACTOR * state.nbytes
        if not in_kernel:
            check_values(rows)
        backup = state.copy() if in_kernel else None
        before = self._prequential_counts()
        state.ensure_shape(self._rows(), rows.dimension)
        longest = rows.longest()
        state.ensure_log_capacity(
            n,
            rows.max_new_entries(self.max_voters, longest),
            self.max_voters,
            min(self._max_entries, self.max_voters * max(longest, state.longest_entry())),
        )
        outputs = _one.outputs(n, self.multiclass)
        limit = MAX_ABS_FEATURE if in_kernel else NO_CHECK
        bad = self._run_kernel(rows.kernel_args(), targets, outputs, limit)
        if bad >= 0:
            assert backup is not None
            self._state = backup
            entry = int(np.argmax(~(np.abs(rows.row_values(bad)) <= MAX_ABS_FEATURE)))
            raise value_error(rows, rows.row_start(bad) + entry)
        after = self._prequential_counts()
        mistakes, predictions, margins = outputs
        return BatchResult(
            mistakes=mistakes,
            predictions=predictions,
            margins=margins,
            prequential_mistakes={name: after[name] - before[name] for name in after},
            n_classes=self._state.counter(k.ACTIVE_CLASSES) if self.multiclass else 0,
        )

    def _voter_columns(self) -> NDArray[np.float64]:
        """Dense voter copies for the binary kernel's prequential vote when small, else empty.

        Without ``prequential_voted`` nothing votes per event, so the copies are not kept up to
        date (that would cost O(d) per update) and are dropped: predictions rebuild them.
        """
        if self.multiclass or not self.prequential_voted:
            if self._state.voter_columns is not NO_COLUMNS:
                self._state.voter_columns = NO_COLUMNS
            return NO_COLUMNS
        return self._state.voter_columns_for(self.max_voters)

    @property
    def _max_entries(self) -> int:
        """Update-log entries the ``max_voter_bytes`` bound allows."""
        touched = MULTICLASS_ROWS_TOUCHED if self.multiclass else BINARY_ROWS_TOUCHED
        return self.max_voter_bytes // entry_bytes(touched)

    def _run_kernel(self, rows: KernelArgs, y: NDArray[Any], outputs: Outputs, limit: float) -> int:
        """Run the learning kernel (state sized beforehand); ``limit`` > 0 checks rows inside it.

        Returns the first bad row (the kernel stopped there) or -1.
        """
        state = self._state
        mistakes, predictions, margins = outputs
        voter_columns = self._voter_columns()
        column_newest, links = self._voter_index(rows[3] > 0, voter_columns)
        bad = self._learning_kernel(
            *rows,
            y,
            state.weights,
            state.weight_sums,
            state.row_sq,
            state.log_counts,
            state.log_rows,
            state.log_start,
            state.log_len,
            state.log_cols,
            state.log_old,
            state.counters,
            state.rng,
            voter_columns,
            column_newest,
            links,
            self.max_voters,
            self._max_entries,
            self.prequential_voted,
            limit,
            mistakes,
            predictions,
            margins,
        )
        if column_newest.shape[0] > 0:
            state.index_kept()
        return int(bad)

    def _voter_index(
        self, dense: bool, voter_columns: NDArray[np.float64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The log's per-column index for a sparse batch's prequential vote from the log, else
        empty (dense rows, multiclass, no vote, or dense voter copies in use)."""
        if dense or self.multiclass or not self.prequential_voted or voter_columns.shape[0] > 0:
            return empty_index()
        return self._state.voter_index()

    def _fit_learning_width(self, rows: Rows) -> Rows:
        """Apply the width rules: exact, or (vocabularies) up to the encoder's dimension.

        A narrower dense matrix is padded; a narrower CSR batch needs nothing; a wider one (still
        within the encoder) makes the weights grow.
        """
        width = rows.dimension
        dimension = self._state.dimension
        if width == dimension:
            return rows
        if not self.encoder.growable:
            raise FeatureError(
                "wrong_dimension", f"expected vectors of dimension {dimension}, got {width}"
            )
        if width > self.encoder.dimension:
            raise FeatureError(
                "wrong_dimension",
                f"X has {width} columns but the encoder knows only {self.encoder.dimension}; "
                "encode events with this learner's encoder (grow=True when learning)",
            )
        if width > dimension or rows.width == 0:
            return rows
        matrix = rows.values.reshape(rows.n_rows, width)
        return Rows.dense(fit_width(matrix, dimension, growable=True))

    def learn_one(self, x: Any, y: Hashable) -> bool:
        """Predict-then-learn one event (river style); True when it was a mistake (an update).

        Nothing changes when the label or the features are invalid.
        """
        self._validate_label(y)
        if getattr(self.encoder, "sparse", False):
            row = _one.sparse_row(self, x, grow=True)
            return _one.learn_sparse(self, row, self.encode_labels([y], grow=True))
        vector = self.encoder.encode(x, grow=True)
        return _one.learn_vector(self, vector, self.encode_labels([y], grow=True))

    def _validate_label(self, label: Hashable) -> None:
        """Raise before any state changes when ``label`` can never be accepted."""
        self.encode_labels([label])

    # ------------------------------------------------------------------ prediction

    def predict_one(self, x: Any, **kwargs: Any) -> Hashable:
        """The label predicted by the ``predictor`` hyperparameter; the model is not changed."""
        return _one.predict_one_general(self, x)

    def predict_batch(
        self, X: NDArray[np.float64] | CSRBatch, predictor: PredictorName | None = None
    ) -> tuple[list[Hashable], NDArray[np.float64]]:
        """(labels, scores) for encoded rows (dense or CSR), as :meth:`Predictor.predict_batch`."""
        which = predictor_code(predictor or self.predictor)
        rows = prediction_rows(X, self._state.dimension, self.encoder.growable)
        codes, scores = predict_codes(self._state, rows, which, self.multiclass)
        return self.decode_labels(codes), scores

    def snapshot(self) -> Predictor:
        """An immutable, thread-safe copy of everything needed to predict."""
        return Predictor(
            version=self.version,
            n_seen=self.n_seen,
            labels=self._label_tuple(),
            multiclass=self.multiclass,
            default_predictor=self.predictor,
            growable=self.encoder.growable,
            _state=self._state.compact_copy(),
        )

    # ------------------------------------------------------------------ learned state

    def _prequential_counts(self) -> dict[str, int]:
        counts = {
            "last": self._state.counter(k.PQ_LAST),
            "averaged": self._state.counter(k.PQ_AVERAGED),
        }
        if self.prequential_voted:
            counts["voted"] = self._state.counter(k.PQ_VOTED)
        return counts

    @property
    def prequential_mistakes(self) -> dict[str, int]:
        """Prequential mistakes of each tracked predictor since the start."""
        return self._prequential_counts()

    @property
    def n_seen(self) -> int:
        """Events learned from."""
        return self._state.counter(k.SEEN)

    @property
    def n_updates(self) -> int:
        """Perceptron updates (M_t, the mistakes the mistake bounds count)."""
        return self._state.counter(k.UPDATES)

    @property
    def version(self) -> int:
        """Increments with every update."""
        return self.n_updates

    @property
    def dimension(self) -> int:
        """len(x̃) the weights cover now."""
        return self._state.dimension

    @property
    def n_voters(self) -> int:
        """Finished voters kept for the vote (the live weights vote too)."""
        return self._state.counter(k.N_VOTERS)

    @property
    def dropped_voters(self) -> int:
        """Voters dropped at the ``max_voters`` / ``max_voter_bytes`` bounds (0: an exact vote)."""
        return self._state.counter(k.DROPPED_VOTERS)

    @property
    def dropped_votes(self) -> int:
        """Survival mass of the dropped voters."""
        return self._state.counter(k.DROPPED_VOTES)

    @property
    def voters(self) -> list[tuple[int, NDArray[np.float64]]]:
        """Kept finished voters (survival count, weights), oldest first (rebuilt: O(voters x d))."""
        return self._state.voter_list()

    # ------------------------------------------------------------------ persistence

    def _params(self) -> dict[str, Any]:
        return {
            "predictor": self.predictor,
            "max_voters": self.max_voters,
            "max_voter_bytes": self.max_voter_bytes,
            "prequential_voted": self.prequential_voted,
        }

    def __repr__(self) -> str:
        params = ", ".join(f"{name}={value!r}" for name, value in self._params().items())
        return f"{type(self).__name__}({params}, encoder={self.encoder!r})"

    @property
    def _multiclass(self) -> bool:
        """river: whether the classifier handles more than two classes."""
        return self.multiclass
