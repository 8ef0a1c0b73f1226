"""Engines and runners for the HTTP tests (no broker)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from learning import Predictor
from learning.encoders import Encoder
from service.model import build_learner, build_tracker
from service.settings import Settings


@dataclass
class FakeRunner:
    """Readiness as the tests set it."""

    connected: bool = True
    not_ready_reason: str | None = None


@dataclass(frozen=True)
class _Snapshot:
    predictor: Predictor
    stats: dict[str, Any]
    model: dict[str, Any]


class _TrainedEngine:
    """A learner and tracker trained on fixed data (stand-in until consumers.engine exists)."""

    def __init__(self, settings: Settings, X: np.ndarray, y: np.ndarray) -> None:
        learner = build_learner(settings.model)
        tracker = build_tracker(settings, learner.encoder.dimension)
        if len(X):
            result = learner.learn_batch(X, y)
            tracker.observe_batch(X, y, result)
        self.encoder: Encoder = learner.encoder
        snapshot = learner.snapshot()
        self.snapshot = _Snapshot(
            snapshot,
            {
                "seen": learner.n_seen,
                "mistakes": learner.n_updates,
                "bounds": [status.as_dict() for status in tracker.status()],
            },
            {"weights": {"last": snapshot.weights.tolist()}},
        )


def trained_engine(settings: Settings, X: np.ndarray, y: np.ndarray) -> Any:
    """An engine whose model has learned ``X, y`` in order."""
    return _TrainedEngine(settings, X, y)
