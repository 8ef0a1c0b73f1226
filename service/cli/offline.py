"""``novikoff fit``: offline epochs over a file with the service's own decoder and learner.

Events are decoded by :class:`consumers.decoding.events.EventDecoder`, exactly as the consumer
decodes them, and learned by the learner the settings describe; the first epoch over a file in
stream order is therefore bit-identical to what the service learns from the same events.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson
from numpy.typing import NDArray

from consumers.decoding.events import (
    DecodedBatch,
    EventDecoder,
    LabelLookup,
    Matrix,
    Record,
    stack_rows,
)
from learning import BoundTracker, EpochReport, MulticlassPerceptron, fit_epochs
from service.cli.produce import file_records
from service.model import Learner, build_learner, build_tracker
from service.settings import Settings

logger = logging.getLogger(__name__)

OFFLINE_TOPIC = "file"
EXIT_OK = 0
EXIT_NO_EVENTS = 1


@dataclass
class DecodedFile:
    """The valid events of a file as (X, y) and the rejected ones counted by reason (X is CSR
    for object-valued encoders, as the consumer decodes it)."""

    X: Matrix
    y: NDArray[Any]
    invalid: Counter[str] = field(default_factory=Counter)


def decode_values(
    values: Sequence[bytes], decoder: EventDecoder, topic: str = OFFLINE_TOPIC
) -> DecodedFile:
    """Decode record values in order, in batches the decoder can hold."""
    size = decoder.max_batch_rows
    parts_X: list[Matrix] = []
    parts_y: list[NDArray[Any]] = []
    invalid: Counter[str] = Counter()
    for start in range(0, len(values), size):
        records = [
            Record(topic, 0, offset, value)
            for offset, value in enumerate(values[start : start + size], start=start)
        ]
        batch: DecodedBatch = decoder.decode_batch(records)
        parts_X.append(batch.X)
        parts_y.append(batch.y)
        invalid.update(rejection.reason for rejection in batch.rejections)
    X = stack_rows(parts_X, decoder.encoder.dimension) if parts_X else decoder.empty_matrix()
    y = np.concatenate(parts_y) if parts_y else np.empty(0)
    return DecodedFile(X, y, invalid)


def decoder_for(learner: Learner, labels_in_order: Iterable[Hashable] = ()) -> EventDecoder:
    """The consumer's decoder for ``learner``.

    A multiclass learner whose classes are not declared first learns the classes of
    ``labels_in_order`` in order of first appearance, as it would from the stream.
    """
    if isinstance(learner, MulticlassPerceptron):
        if not learner.n_classes:
            learner.encode_labels(list(dict.fromkeys(labels_in_order)), grow=True)
        return EventDecoder(
            learner.encoder, LabelLookup.multiclass(learner.class_labels), grow=True
        )
    return EventDecoder(learner.encoder, learner.label_map, grow=True)


def _labels_in_order(values: Sequence[bytes]) -> list[Hashable]:
    labels: list[Hashable] = []
    for value in values:
        try:
            event = orjson.loads(value)
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict) and isinstance(event.get("label"), str | int):
            labels.append(event["label"])
    return labels


def fit_file(
    settings: Settings,
    path: Path,
    *,
    epochs: int,
    shuffle_seed: int | None,
    label_column: str,
    out: IO[str] | None = None,
) -> int:
    """Decode ``path``, run up to ``epochs`` epochs and print what happened."""
    out = out or sys.stdout
    named = settings.model.encoding != "dense"
    values = [value for _, value in file_records(path, named, label_column)]
    learner = build_learner(settings.model)
    decoder = decoder_for(learner, _labels_in_order(values))
    decoded = decode_values(values, decoder)
    for reason, count in sorted(decoded.invalid.items()):
        print(f"skipped {count} invalid event(s): {reason}", file=sys.stderr)
    if decoded.X.shape[0] == 0:
        print(f"{path}: no valid events", file=sys.stderr)
        return EXIT_NO_EVENTS
    tracker = build_tracker(settings, learner.encoder.dimension)
    reports = fit_epochs(
        learner,
        decoded.X,
        decoded.y,
        epochs,
        shuffle_seed,
        tracker,
    )
    print(f"{decoded.X.shape[0]} events from {path}", file=out)
    for report in reports:
        print(format_epoch(report), file=out)
    print_model(learner, tracker, out)
    return EXIT_OK


def format_epoch(report: EpochReport) -> str:
    """One line per epoch: updates and the prequential mistakes of each predictor."""
    prequential = " ".join(f"{name}={count}" for name, count in report.prequential_mistakes.items())
    done = "  (converged: no update)" if report.converged else ""
    return (
        f"epoch {report.epoch}: {report.updates} updates (total {report.total_updates}); "
        f"prequential mistakes {prequential}{done}"
    )


def print_model(learner: Learner, tracker: BoundTracker, out: IO[str]) -> None:
    """The final weights (last and averaged) by coordinate name, and the bounds."""
    snapshot = learner.snapshot()
    names = [str(name) for name in learner.encoder.coordinate_names]
    for label, weights in (("last", snapshot.weights), ("averaged", snapshot.averaged_weights)):
        print(f"{label} weights:", file=out)
        rows = weights if weights.ndim == 2 else weights[None, :]
        classes = snapshot.labels if snapshot.multiclass else (None,)
        for cls, row in zip(classes, rows, strict=False):
            prefix = f"  [{cls}] " if cls is not None else "  "
            pairs = ", ".join(f"{n}={w:.6g}" for n, w in zip(names, row.tolist(), strict=False))
            print(prefix + pairs, file=out)
    print(f"R = {tracker.radius:.6g}, mistakes = {tracker.mistakes}", file=out)
    for status in tracker.status():
        print(
            f"bound[{status.name}] = {status.bound:.6g} (gamma {status.gamma:.4g}, k {status.k}, "
            f"violated: {status.violated})",
            file=out,
        )
