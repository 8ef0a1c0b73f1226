"""The engine: exactly-once bookkeeping, immutable snapshots, checkpoint round trips, observers."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import orjson
import pytest

from consumers.decoding.events import Record
from consumers.engine import Engine, OffsetError
from consumers.engine_state import IncompatibleCheckpointError
from consumers.reports import BatchReport, CheckpointReport, PartitionProgress
from consumers.state.checkpoint import CheckpointStore
from learning import (
    BoundTracker,
    DenseEncoder,
    LabelMap,
    MulticlassPerceptron,
    Perceptron,
    Reference,
)

LABELS = LabelMap({"1": 1, "-1": -1})


def engine(dim: int = 1, observer: object = None, references: bool = True) -> Engine:
    refs = [Reference("u", [0.0] + [-1.0] * dim)] if references else []
    return Engine(
        Perceptron(LABELS, encoder=DenseEncoder(dim), predictor="averaged"),
        BoundTracker(refs),
        observer,  # type: ignore[arg-type]
    )


def ev(features: list[float], label: int) -> bytes:
    return orjson.dumps({"features": features, "label": label})


def batch(eng: Engine, values: list[bytes], start: int = 0, topic: str = "t", partition: int = 0):  # type: ignore[no-untyped-def]
    return eng.decoder.decode_batch(
        [Record(topic, partition, start + i, v) for i, v in enumerate(values)]
    )


def test_pla_notes_example() -> None:
    eng = engine()
    report = eng.apply(batch(eng, [ev([2], -1), ev([-0.25], 1)]))
    snap = eng.snapshot
    assert snap.predictor.weights.tolist() == [0.0, -2.25]
    assert (snap.mistakes, snap.seen, report.mistakes, report.learned) == (2, 2, 2, 2)
    stats = snap.stats
    assert stats["seen"] == 2 and stats["mistakes"] == 2
    assert set(stats) >= {
        "seen",
        "mistakes",
        "prequential_mistakes",
        "radius",
        "bounds",
        "margin_estimate",
        "invalid",
        "partitions",
        "lag",
        "model_version",
        "events_per_second",
    }
    assert set(stats["prequential_mistakes"]) == {"last", "averaged", "voted"}
    assert stats["bounds"][0]["name"] == "u"
    assert {"gamma", "k", "bound", "novikoff", "min_margin", "violated"} <= set(stats["bounds"][0])
    assert stats["partitions"] == [
        {
            "topic": "t",
            "partition": 0,
            "next_offset": 2,
            "highwater": None,
            "lag": None,
            "learned": 2,
            "rejected": 0,
            "applied": [[0, 2]],
        }
    ]
    model = snap.model
    assert model["weights"]["last"] == [0.0, -2.25]
    assert model["variant"] == "binary" and model["feature_names"] == ["bias", "x1"]
    assert orjson.loads(orjson.dumps(stats)) == stats


def test_offsets_ranges_and_counts() -> None:
    eng = engine()
    eng.apply(batch(eng, [ev([1], 1), b"bad", ev([2], -1)], start=0))
    eng.apply(batch(eng, [ev([1], 1)], start=3))
    eng.apply(batch(eng, [ev([1], 1), b"{}"], start=10))  # a gap (e.g. compaction)
    eng.apply(batch(eng, [ev([1], 1)], start=0, partition=1))
    (p0, p1) = eng.snapshot.partitions
    assert p0 == PartitionProgress("t", 0, 12, ((0, 4), (10, 12)), learned=4, rejected=2)
    assert p1 == PartitionProgress("t", 1, 1, ((0, 1),), learned=1, rejected=0)
    assert eng.snapshot.invalid == {"not_json": 1, "missing_features": 1}


def test_reapplying_an_offset_is_refused_and_changes_nothing() -> None:
    eng = engine()
    eng.apply(batch(eng, [ev([1], 1), ev([2], -1)]))
    before = eng.snapshot
    with pytest.raises(OffsetError):
        eng.apply(batch(eng, [ev([5], -1)], start=1))
    with pytest.raises(OffsetError):
        eng.apply(batch(eng, [ev([5], -1), ev([5], -1)], start=0))
    assert eng.snapshot is before
    assert eng.learner.n_seen == 2


def test_unapplied_drops_what_was_applied() -> None:
    eng = engine()
    eng.apply(batch(eng, [ev([1], 1)] * 5))
    recs = [Record("t", 0, o, ev([1], 1)) for o in range(3, 8)]
    assert [r.offset for r in eng.unapplied("t", 0, recs)] == [5, 6, 7]
    assert eng.unapplied("t", 1, recs) is recs


def test_snapshots_are_immutable_and_swapped_whole() -> None:
    eng = engine()
    eng.apply(batch(eng, [ev([2], -1)]))
    old = eng.snapshot
    weights = old.predictor.weights.copy()
    old_stats = dict(old.stats)
    eng.apply(batch(eng, [ev([-0.25], 1)], start=1))
    assert eng.snapshot is not old
    assert old.predictor.weights.tolist() == weights.tolist()
    assert old.stats == old_stats and old.seen == 1
    with pytest.raises(ValueError):
        old.predictor.weights[0] = 1.0
    with pytest.raises(AttributeError):
        old.seen = 5  # type: ignore[misc]


def test_checkpoint_round_trip_continues_bit_identically(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    values = [ev(rng.uniform(-1, 1, 3).tolist(), int(rng.choice([-1, 1]))) for _ in range(300)]
    values[17] = b"not json"
    whole = engine(3)
    whole.apply(batch(whole, values))

    first = engine(3)
    first.apply(batch(first, values[:150]))
    store = CheckpointStore(tmp_path)
    report = first.checkpoint(store)
    assert report.ok and report.offsets == {("t", 0): 150}
    second = engine(3)
    restored = second.restore(store)
    assert restored.restored and restored.seen == first.learner.n_seen
    assert second.next_offset("t", 0) == 150
    assert second.snapshot.invalid == {"not_json": 1}
    second.apply(batch(second, values[150:], start=150))
    assert second.snapshot.predictor.weights.tobytes() == whole.snapshot.predictor.weights.tobytes()
    assert second.snapshot.stats["bounds"] == whole.snapshot.stats["bounds"]
    assert second.snapshot.partitions == whole.snapshot.partitions


def test_restore_skips_a_checkpoint_whose_content_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    eng = engine()
    eng.apply(batch(eng, [ev([2], -1)]))
    store = CheckpointStore(tmp_path)
    eng.checkpoint(store)
    store.save(b"framed fine, but not a model")
    other = engine()
    with caplog.at_level(logging.ERROR):
        report = other.restore(store)
    assert report.restored and other.snapshot.seen == 1
    assert len(report.skipped) == 1 and "cannot be loaded" in caplog.text
    refused = report.skipped[0].path
    assert not refused.exists(), "the refused file is moved aside"
    assert refused.with_name(refused.name + ".corrupt").exists()
    assert len(store.files()) == 1, "only the good checkpoint is left to try"
    assert other.restore(store).skipped == (), "the refused file is not tried again"


def test_restore_without_checkpoint_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        report = engine().restore(CheckpointStore(tmp_path))
    assert not report.restored
    assert "NO usable checkpoint" in caplog.text


def test_restore_refuses_a_different_model(tmp_path: Path) -> None:
    eng = engine(1)
    eng.apply(batch(eng, [ev([2], -1)]))
    store = CheckpointStore(tmp_path)
    eng.checkpoint(store)
    with pytest.raises(IncompatibleCheckpointError, match="encoder"):
        engine(2).restore(store)
    multiclass = Engine(
        MulticlassPerceptron(["a", "b"], encoder=DenseEncoder(1)), BoundTracker(multiclass=True)
    )
    with pytest.raises(IncompatibleCheckpointError):
        multiclass.restore(store)


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.batches: list[BatchReport] = []
        self.rejected: list[tuple[str, int]] = []
        self.checkpoints: list[CheckpointReport] = []
        self.lags: list[object] = []
        self.fail = fail

    def on_batch(self, report: BatchReport) -> None:
        self.batches.append(report)
        if self.fail:
            raise RuntimeError("observer bug")

    def on_rejected(self, reason: str, count: int) -> None:
        self.rejected.append((reason, count))

    def on_checkpoint(self, report: CheckpointReport) -> None:
        self.checkpoints.append(report)

    def on_lag(self, partitions: object) -> None:
        self.lags.append(partitions)


def test_observer_is_called_once_per_batch(tmp_path: Path) -> None:
    recorder = Recorder()
    eng = engine(observer=recorder)
    eng.apply(batch(eng, [ev([1], 1), b"x", b"y", ev([2], -1)]))
    (report,) = recorder.batches
    assert (report.records, report.learned, report.rejected) == (4, 2, 2)
    assert report.snapshot is eng.snapshot
    assert recorder.rejected == [("not_json", 2)]
    eng.checkpoint(CheckpointStore(tmp_path))
    assert recorder.checkpoints[0].ok
    eng.set_highwaters({("t", 0): 10})
    assert eng.snapshot.partitions[0].lag == 6 and eng.snapshot.lag == 6
    assert len(recorder.lags) == 1
    eng.set_highwaters({("t", 0): 10})
    assert len(recorder.lags) == 1


def test_a_failing_observer_never_stops_learning(caplog: pytest.LogCaptureFixture) -> None:
    eng = engine(observer=Recorder(fail=True))
    with caplog.at_level(logging.ERROR):
        eng.apply(batch(eng, [ev([1], 1)]))
    assert eng.snapshot.seen == 1 and "observer" in caplog.text


def test_multiclass_engine() -> None:
    eng = Engine(
        MulticlassPerceptron(["a", "b", "c"], encoder=DenseEncoder(2)),
        BoundTracker(multiclass=True),
    )
    values = [
        orjson.dumps({"features": [1, 0], "label": "a"}),
        orjson.dumps({"features": [0, 1], "label": "c"}),
    ]
    eng.apply(batch(eng, values))
    assert eng.snapshot.seen == 2
    assert eng.snapshot.model["variant"] == "multiclass"
    assert len(eng.snapshot.model["weights"]["last"]) == 3


def test_a_multiclass_engine_discovers_its_classes() -> None:
    eng = Engine(MulticlassPerceptron(encoder=DenseEncoder(2)), BoundTracker(multiclass=True))
    values = [
        orjson.dumps({"features": [1, 0], "label": "a"}),
        orjson.dumps({"features": [1], "label": "never"}),
        orjson.dumps({"features": [0, 1], "label": "c"}),
        orjson.dumps({"features": [1, 1], "label": "a"}),
        orjson.dumps({"features": [2, 1], "label": 7}),
    ]
    decoded = batch(eng, values)
    assert decoded.y.tolist() == [0, 1, 0, 2]
    assert [r.reason for r in decoded.rejections] == ["wrong_dimension"]
    eng.apply(decoded)
    assert eng.snapshot.seen == 4
    assert eng.snapshot.model["classes"] == ["a", "c", 7]
    assert len(eng.snapshot.model["weights"]["last"]) == 3
    # The compiled tier now knows the discovered classes: a second batch needs no growth.
    again = batch(eng, [orjson.dumps({"features": [0, 1], "label": "c"})])
    assert again.y.tolist() == [1]


def test_declared_classes_never_grow() -> None:
    eng = Engine(
        MulticlassPerceptron(["a", "b"], encoder=DenseEncoder(2)), BoundTracker(multiclass=True)
    )
    decoded = batch(eng, [orjson.dumps({"features": [1, 0], "label": "z"})])
    assert [r.reason for r in decoded.rejections] == ["unknown_label"]
    assert eng.learner.n_classes == 2


def test_discovered_classes_restore_into_a_discovering_model_only(tmp_path: Path) -> None:
    def discovering() -> Engine:
        return Engine(MulticlassPerceptron(encoder=DenseEncoder(1)), BoundTracker(multiclass=True))

    eng = discovering()
    eng.apply(batch(eng, [orjson.dumps({"features": [1], "label": "a"})]))
    store = CheckpointStore(tmp_path)
    eng.checkpoint(store)
    grown = discovering()
    grown.apply(batch(grown, [orjson.dumps({"features": [2], "label": "b"})]))
    assert grown.restore(store).restored
    assert grown.snapshot.model["classes"] == ["a"]
    # Control: a model that declares the same classes is another model.
    declared = Engine(
        MulticlassPerceptron(["a"], encoder=DenseEncoder(1)), BoundTracker(multiclass=True)
    )
    with pytest.raises(IncompatibleCheckpointError, match="classes differ"):
        declared.restore(store)
