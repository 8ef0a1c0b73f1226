"""The live mistake-bound tracker.

After every event the tracker knows

* R_t = max ‖x̃‖ over the events so far (x̃ includes the bias coordinate);
* M_t, the perceptron's own mistakes (its updates);
* for each reference separator u (named, normalised to unit length): k_t(gamma), the number of
  events so far whose margin y·u·x̃ is below gamma, and the online bound

      B_t = min over gamma of (R_t/gamma)² + k_t(gamma)·(1 + 2R_t/gamma)

  (the slides' bound for data that is not separable), with the gamma that attains it, and Novikoff's
  (R_t/gamma_min)² while every margin so far is positive (gamma_min = the smallest margin).

Why these are certificates: for a fixed unit u and any gamma > 0 the perceptron's proof gives
u·w_M ≥ (M - k)gamma - kR (a bad event still has margin ≥ -R) and ‖w_M‖² ≤ M R², hence
M ≤ (R/gamma)² + k(1 + 2R/gamma) for every gamma separately. The minimum over any set of gamma
values is therefore valid too, whichever set is used. M_t ≤ B_t is a theorem, so a violation
means a bug or a reference that is not what it claims; the tracker flags it and logs an error.

The gamma grid. By default a fixed geometric grid from 10⁻⁶ to 10⁶ with 12 points per decade
(145 values): adjacent values differ by a factor 10^(1/12) ≈ 1.21, so the grid minimum is within
that factor of the best gamma in range, for data at any scale within twelve orders of magnitude. The
grid is fixed because k_t(gamma) is kept as a histogram of margins over it (O(log G) per event,
O(G) per mistake to recheck the bound).

Multiclass uses the Kesler construction: the reference is a matrix U (one row per class) of unit
Frobenius norm, an event's margin is min_{c≠y} (u_y - u_c)·x̃, and the radius of the constructed
vectors is R' = √2·R, which the bounds use in place of R. Classes the reference has no row for
have u_c = 0 (zero rows keep U of unit norm).

Since R_t and k_t only grow, B_t never decreases, so checking M_t ≤ B_t at each mistake checks it
at every t.

The tracker also reports a *margin estimate* of the current model: the smallest normalised
prequential margin y·w·x̃/‖w‖ of the learner over its last ``margin_window`` events. It is a
diagnostic, not a certificate.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from learning import _kernels as k
from learning import _scoring
from learning._rows import learning_rows
from learning.errors import StateError
from learning.predictor import BatchResult
from learning.sparse import CSRBatch

logger = logging.getLogger(__name__)

GAMMA_GRID_LOW = 1e-6
GAMMA_GRID_HIGH = 1e6
GAMMA_GRID_PER_DECADE = 12
KESLER_FACTOR = math.sqrt(2.0)
VIOLATION_TOLERANCE = 1e-9
DEFAULT_MARGIN_WINDOW = 1000
MARGIN_NOTE = "diagnostic, not a certificate"


def default_gamma_grid() -> NDArray[np.float64]:
    """The default gamma grid: 10⁻⁶ … 10⁶, 12 geometric steps per decade.

    Examples
    --------
    >>> grid = default_gamma_grid()
    >>> len(grid), float(grid[0]), float(grid[-1])
    (145, 1e-06, 1000000.0)
    """
    decades = math.log10(GAMMA_GRID_HIGH / GAMMA_GRID_LOW)
    count = round(decades * GAMMA_GRID_PER_DECADE) + 1
    grid = np.geomspace(GAMMA_GRID_LOW, GAMMA_GRID_HIGH, count)
    grid[0], grid[-1] = GAMMA_GRID_LOW, GAMMA_GRID_HIGH
    return grid


def checked_gamma_grid(gamma_grid: ArrayLike | None) -> NDArray[np.float64]:
    """``gamma_grid`` as a strictly increasing vector of finite positive values (``None``: the
    default grid); :class:`ValueError` otherwise."""
    grid = default_gamma_grid() if gamma_grid is None else np.array(gamma_grid, dtype=float)
    if grid.ndim != 1 or grid.size == 0 or not (grid > 0).all() or not np.isfinite(grid).all():
        raise ValueError("gamma_grid must be a non-empty vector of finite positive values")
    if (np.diff(grid) <= 0).any():
        raise ValueError("gamma_grid must be strictly increasing")
    return grid


def check_state_arrays(
    owner: str,
    arrays: Mapping[str, NDArray[Any]],
    expected: Mapping[str, tuple[tuple[int, ...], type[np.generic]]],
) -> None:
    """:class:`StateError` unless every named array of a saved state has its expected shape and
    dtype (``owner`` names the saved object in the message)."""
    for name, (shape, dtype) in expected.items():
        array = arrays[name]
        if array.shape != shape or array.dtype != dtype:
            raise StateError(
                f"{owner} array {name!r} is {array.dtype}{array.shape}, expected "
                f"{np.dtype(dtype)}{shape}"
            )


@dataclass(frozen=True, init=False)
class Reference:
    """A named reference separator, normalised to unit length on construction.

    Parameters
    ----------
    name
        Shown in the bound statuses.
    weights
        A vector over x̃ (binary) or a matrix with one row per class index (multiclass, unit
        Frobenius norm after normalisation).

    Examples
    --------
    >>> Reference("u", [3.0, 4.0]).weights.tolist()
    [0.6, 0.8]
    """

    name: str
    weights: NDArray[np.float64]

    def __init__(self, name: str, weights: ArrayLike) -> None:
        array = np.array(weights, dtype=np.float64)
        if array.ndim not in (1, 2) or array.size == 0:
            raise ValueError(f"reference {name!r} must be a non-empty vector or matrix")
        if not np.isfinite(array).all() or not array.any():
            raise ValueError(f"reference {name!r} must be finite and non-zero")
        scaled = array / np.abs(array).max()  # no underflow or overflow in the norm
        unit = scaled / np.linalg.norm(scaled)
        unit.flags.writeable = False
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "weights", unit)

    @property
    def multiclass(self) -> bool:
        """Whether this is a class matrix."""
        return self.weights.ndim == 2


@dataclass(frozen=True)
class Violation:
    """Where M_t first exceeded B_t for a reference."""

    event: int
    mistakes: int
    bound: float


@dataclass(frozen=True)
class BoundStatus:
    """The bound for one reference after the events seen so far.

    ``radius`` is R_t (multiclass bounds use R' = √2·R_t); ``novikoff`` is ``None`` once some
    margin is ≤ 0 (and ``inf`` when the smallest margin is so tiny the ratio overflows);
    ``min_margin`` is ``None`` before any event.
    """

    name: str
    radius: float
    mistakes: int
    seen: int
    gamma: float
    k: int
    bound: float
    novikoff: float | None
    min_margin: float | None
    violated: bool
    violation: Violation | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form (the violation as a nested dict or ``None``)."""
        data = dict(self.__dict__)
        data["violation"] = None if self.violation is None else dict(self.violation.__dict__)
        return data


@dataclass(frozen=True)
class MarginEstimate:
    """Smallest normalised prequential margin of the learner over its recent events."""

    value: float | None
    window: int
    count: int
    note: str = MARGIN_NOTE

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return dict(self.__dict__)


class BoundTracker:
    """Tracks R_t, M_t and the mistake bounds of reference separators (see module docs).

    Parameters
    ----------
    references
        Reference separators (unique names); may be empty (then only R_t and M_t are tracked).
    gamma_grid
        Increasing positive gamma values; ``None`` for :func:`default_gamma_grid`.
    multiclass
        Whether y holds class indices (Kesler construction) rather than ±1.
    margin_window
        How many recent events the margin estimate looks at.

    Examples
    --------
    >>> import numpy as np
    >>> tracker = BoundTracker([Reference("u", [0.0, -1.0])])
    >>> X = np.array([[1.0, 2.0], [1.0, -0.25]])
    >>> tracker.observe_batch(X, np.array([-1.0, 1.0]), np.array([True, True]))
    >>> status = tracker.status()[0]
    >>> status.mistakes, round(status.radius, 4), status.min_margin, round(status.novikoff, 2)
    (2, 2.2361, 0.25, 80.0)
    """

    def __init__(
        self,
        references: Sequence[Reference] = (),
        gamma_grid: ArrayLike | None = None,
        multiclass: bool = False,
        margin_window: int = DEFAULT_MARGIN_WINDOW,
    ) -> None:
        names = [reference.name for reference in references]
        if len(set(names)) != len(names):
            raise ValueError(f"reference names must be unique, got {names}")
        for reference in references:
            if reference.multiclass != multiclass:
                kind = "a class matrix" if multiclass else "a vector"
                raise ValueError(f"reference {reference.name!r} must be {kind}")
        if margin_window < 1:
            raise ValueError(f"margin_window must be at least 1, got {margin_window}")
        grid = checked_gamma_grid(gamma_grid)
        self.references = tuple(references)
        self.gamma_grid = grid
        self.multiclass = multiclass
        self.margin_window = margin_window
        self._stack = self._stack_references(self.references, multiclass)
        n_refs = len(self.references)
        self._histograms = np.zeros((n_refs, grid.size + 1), dtype=np.int64)
        self._min_margins = np.full(n_refs, math.inf)
        self._radius_sq = np.zeros(1)
        self._counters = np.zeros(k.N_TRACK_COUNTERS, dtype=np.int64)
        self._violation_event = np.full(n_refs, k.NO_VIOLATION, dtype=np.int64)
        self._violation_mistakes = np.zeros(n_refs, dtype=np.int64)
        self._violation_bound = np.zeros(n_refs)
        self._n_classes = self._stack.shape[1] if multiclass else 0
        self._margins = np.full(margin_window, math.nan)
        self._margin_position = 0

    @staticmethod
    def _stack_references(references: Sequence[Reference], multiclass: bool) -> NDArray[np.float64]:
        if not references:
            return np.zeros((0, 1, 1))
        rows = max(r.weights.shape[0] if multiclass else 1 for r in references)
        width = max(r.weights.shape[-1] for r in references)
        stack = np.zeros((len(references), rows, width))
        for i, reference in enumerate(references):
            matrix = reference.weights if multiclass else reference.weights[None, :]
            stack[i, : matrix.shape[0], : matrix.shape[1]] = matrix
        return stack

    # ------------------------------------------------------------------ observing

    def observe_batch(
        self,
        X: NDArray[np.float64] | CSRBatch,
        y: NDArray[Any],
        mistakes: NDArray[np.bool_] | BatchResult,
        *,
        n_classes: int | None = None,
        model_margins: NDArray[np.float64] | None = None,
    ) -> None:
        """Account for a batch the learner has just learned (same X, y, in the same order).

        Parameters
        ----------
        X, y
            The batch given to ``learn_batch`` (dense or CSR: the same statuses on the same
            vectors; ‖x̃‖ and the reference margins cost O(non-zeros) per sparse row).
        mistakes
            ``BatchResult.mistakes`` — or the :class:`BatchResult` itself, which also supplies
            the model margins and (multiclass) the learner's class count.
        n_classes
            Multiclass: the learner's number of classes (every class it could predict).
        model_margins
            ``BatchResult.margins``, for :meth:`margin_estimate`.
        """
        if isinstance(mistakes, BatchResult):
            model_margins = mistakes.margins if model_margins is None else model_margins
            n_classes = mistakes.n_classes if n_classes is None else n_classes
            mistakes = mistakes.mistakes
        rows = learning_rows(X)
        n = rows.n_rows
        flags = np.ascontiguousarray(mistakes, dtype=np.bool_)
        if flags.shape != (n,):
            raise ValueError(f"mistakes must have shape ({n},), got {flags.shape}")
        targets = self._targets(y, n, n_classes)
        before = self._violation_event.copy()
        _scoring.observe(
            *rows.kernel_args(),
            targets,
            flags,
            self._stack,
            self._n_classes,
            KESLER_FACTOR if self.multiclass else 1.0,
            self.gamma_grid,
            self._histograms,
            self._min_margins,
            self._radius_sq,
            self._counters,
            self._violation_event,
            self._violation_mistakes,
            self._violation_bound,
            VIOLATION_TOLERANCE,
        )
        self._report_new_violations(before)
        if model_margins is not None:
            self._remember_margins(np.asarray(model_margins, dtype=np.float64))

    def _targets(self, y: object, n: int, n_classes: int | None) -> NDArray[np.float64]:
        raw = np.asarray(y)
        if raw.shape != (n,):
            raise ValueError(f"y must have shape ({n},), got {raw.shape}")
        targets = np.ascontiguousarray(raw, dtype=np.float64)
        if not self.multiclass:
            if ((targets != 1.0) & (targets != -1.0)).any():
                raise ValueError("binary targets must be +1 or -1")
            return targets
        if raw.dtype.kind not in "iu" or (n and raw.min() < 0):
            raise ValueError("multiclass targets must be non-negative class indices")
        seen_classes = int(raw.max()) + 1 if n else 0
        self._n_classes = max(self._n_classes, seen_classes, n_classes or 0)
        return targets

    def _report_new_violations(self, before: NDArray[np.int64]) -> None:
        for r in np.flatnonzero(before != self._violation_event):
            logger.error(
                "MISTAKE BOUND VIOLATED for reference %r: M_t = %d > B_t = %.9g at event %d. "
                "M_t <= B_t is a theorem: this is a bug or the reference is not what it claims.",
                self.references[r].name,
                self._violation_mistakes[r],
                self._violation_bound[r],
                self._violation_event[r],
            )

    def _remember_margins(self, margins: NDArray[np.float64]) -> None:
        finite = margins[np.isfinite(margins)][-self.margin_window :]
        count = finite.shape[0]
        # count ≤ margin_window, so the ring positions written are distinct.
        start = self._margin_position
        self._margins[(start + np.arange(count)) % self.margin_window] = finite
        self._margin_position = (start + count) % self.margin_window

    # ------------------------------------------------------------------ reading

    @property
    def seen(self) -> int:
        """Events observed."""
        return int(self._counters[k.TRACK_SEEN])

    @property
    def mistakes(self) -> int:
        """M_t."""
        return int(self._counters[k.TRACK_MISTAKES])

    @property
    def radius(self) -> float:
        """R_t = max ‖x̃‖ so far."""
        return math.sqrt(float(self._radius_sq[0]))

    @property
    def violated(self) -> bool:
        """Whether any reference's bound has been violated."""
        return bool((self._violation_event != k.NO_VIOLATION).any())

    def status(self) -> list[BoundStatus]:
        """The bound of every reference now."""
        radius = self.radius
        effective = radius * (KESLER_FACTOR if self.multiclass else 1.0)
        return [self._status(r, radius, effective) for r in range(len(self.references))]

    def _status(self, r: int, radius: float, effective: float) -> BoundStatus:
        bound, index, k_at = _scoring.grid_bound(self._histograms[r], self.gamma_grid, effective)
        min_margin = float(self._min_margins[r])
        seen = self.seen
        novikoff = None
        if seen and min_margin > 0.0:
            ratio = effective / min_margin
            novikoff = ratio * ratio  # inf when a margin is tiny beyond float range
        event = int(self._violation_event[r])
        violation = None
        if event != k.NO_VIOLATION:
            violation = Violation(
                event, int(self._violation_mistakes[r]), float(self._violation_bound[r])
            )
        return BoundStatus(
            name=self.references[r].name,
            radius=radius,
            mistakes=self.mistakes,
            seen=seen,
            gamma=float(self.gamma_grid[index]),
            k=int(k_at),
            bound=float(bound),
            novikoff=novikoff,
            min_margin=min_margin if seen else None,
            violated=violation is not None,
            violation=violation,
        )

    def margin_estimate(self) -> MarginEstimate:
        """Smallest normalised prequential margin over the recent window (not a certificate)."""
        recent = self._margins[np.isfinite(self._margins)]
        value = float(recent.min()) if recent.size else None
        return MarginEstimate(value=value, window=self.margin_window, count=int(recent.size))

    # ------------------------------------------------------------------ persistence

    def to_state(self) -> tuple[dict[str, Any], dict[str, NDArray[Any]]]:
        """(JSON-able metadata, arrays) for :func:`learning.dump_state`."""
        meta = {
            "names": [reference.name for reference in self.references],
            "multiclass": self.multiclass,
            "margin_window": self.margin_window,
            "n_classes": self._n_classes,
            "margin_position": self._margin_position,
        }
        arrays: dict[str, NDArray[Any]] = {
            "references": self._stack,
            "gamma_grid": self.gamma_grid,
            "histograms": self._histograms,
            "min_margins": self._min_margins,
            "radius_sq": self._radius_sq,
            "counters": self._counters,
            "violation_event": self._violation_event,
            "violation_mistakes": self._violation_mistakes,
            "violation_bound": self._violation_bound,
            "margins": self._margins,
        }
        return meta, arrays

    @classmethod
    def from_state(
        cls, meta: Mapping[str, Any], arrays: Mapping[str, NDArray[Any]]
    ) -> BoundTracker:
        """Inverse of :meth:`to_state`; :class:`StateError` when the pieces do not fit."""
        names = list(meta["names"])
        stack = arrays["references"]
        if stack.ndim != 3 or stack.shape[0] != len(names):
            raise StateError(f"tracker references have shape {stack.shape} for {len(names)} names")
        multiclass = bool(meta["multiclass"])
        margin_window = int(meta["margin_window"])
        # Checked before the tracker allocates its window, so a crafted size cannot exhaust memory.
        if arrays["margins"].shape != (margin_window,):
            raise StateError(
                f"margin window {margin_window} does not match the saved margins "
                f"{arrays['margins'].shape}"
            )
        tracker = cls(
            [],
            gamma_grid=arrays["gamma_grid"],
            multiclass=multiclass,
            margin_window=margin_window,
        )
        n_refs = len(names)
        grid_size = tracker.gamma_grid.size
        expected = {
            "histograms": ((n_refs, grid_size + 1), np.int64),
            "min_margins": ((n_refs,), np.float64),
            "radius_sq": ((1,), np.float64),
            "counters": ((k.N_TRACK_COUNTERS,), np.int64),
            "violation_event": ((n_refs,), np.int64),
            "violation_mistakes": ((n_refs,), np.int64),
            "violation_bound": ((n_refs,), np.float64),
            "margins": ((tracker.margin_window,), np.float64),
        }
        check_state_arrays("tracker", arrays, expected)
        references = []
        for i, name in enumerate(names):
            matrix = stack[i] if multiclass else stack[i, 0]
            reference = Reference.__new__(Reference)
            unit = np.array(matrix, dtype=np.float64)
            unit.flags.writeable = False
            object.__setattr__(reference, "name", name)
            object.__setattr__(reference, "weights", unit)
            references.append(reference)
        tracker.references = tuple(references)
        tracker._stack = np.ascontiguousarray(stack, dtype=np.float64).copy()
        tracker._histograms = arrays["histograms"].copy()
        tracker._min_margins = arrays["min_margins"].copy()
        tracker._radius_sq = arrays["radius_sq"].copy()
        tracker._counters = arrays["counters"].copy()
        tracker._violation_event = arrays["violation_event"].copy()
        tracker._violation_mistakes = arrays["violation_mistakes"].copy()
        tracker._violation_bound = arrays["violation_bound"].copy()
        tracker._margins = arrays["margins"].copy()
        tracker._n_classes = int(meta["n_classes"])
        tracker._margin_position = int(meta["margin_position"]) % tracker.margin_window
        return tracker
