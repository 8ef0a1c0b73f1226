"""A real engine trained on given events, and a runner whose readiness the tests set."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from consumers.decoding.events import Record
from consumers.engine import Engine
from consumers.faults import ConsumerFault
from consumers.state.checkpoint import CheckpointStore
from service.model import build_learner, build_tracker
from service.observability.metrics import Metrics
from service.settings import Settings

PLA_EVENTS = [{"features": [2], "label": -1}, {"features": [-0.25], "label": 1}]
"""The PLA notes' two events: after them the last weights are (bias 0, w -2.25)."""


@dataclass
class FakeRunner:
    """Readiness as the tests set it."""

    connected: bool = True
    not_ready_reason: str | None = None
    fault: ConsumerFault | None = None


def trained_engine(
    settings: Settings,
    events: Sequence[Any],
    state_dir: Path,
    metrics: Metrics | None = None,
    topic: str = "events",
) -> Engine:
    """An engine restored from (empty) ``state_dir`` that has applied ``events`` in order."""
    learner = build_learner(settings.model)
    tracker = build_tracker(settings, learner.encoder.dimension)
    engine = Engine(learner, tracker, observer=metrics)
    engine.restore(CheckpointStore(state_dir))
    if metrics is not None:
        metrics.follow(lambda: engine.snapshot)
    records = [
        Record(topic, 0, offset, event if isinstance(event, bytes) else orjson.dumps(event))
        for offset, event in enumerate(events)
    ]
    if records:
        engine.apply(engine.decoder.decode_batch(records))
    return engine
