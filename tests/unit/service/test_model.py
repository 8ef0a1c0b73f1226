"""Settings → learner, label map and reference separators (with file confinement)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import orjson
import pytest

from learning import MulticlassPerceptron, Perceptron
from service.model import (
    ReferenceError,
    build_label_map,
    build_learner,
    build_tracker,
    reference_weights,
)
from service.settings import ReferenceSettings, load_settings


def test_binary_learner_follows_the_settings() -> None:
    settings = load_settings(model={"dim": 3, "predictor": "voted", "max_voters": 5})
    learner = build_learner(settings.model)
    assert isinstance(learner, Perceptron)
    assert learner.encoder.dimension == 4
    assert learner.predictor == "voted"
    assert learner.max_voters == 5


def test_multiclass_learner_follows_the_settings() -> None:
    settings = load_settings(
        model={
            "variant": "multiclass",
            "encoding": "schema",
            "feature_names": ["a", "b"],
            "classes": ["x", "y", "z"],
            "bias": False,
        }
    )
    learner = build_learner(settings.model)
    assert isinstance(learner, MulticlassPerceptron)
    assert learner.class_labels == ("x", "y", "z")
    assert learner.encoder.coordinate_names == ("a", "b")


def test_boolean_label_keys_match_json_booleans() -> None:
    labels = build_label_map({"true": 1, "false": -1})
    assert labels.encode(True) == 1.0
    assert labels.encode(False) == -1.0


def test_inline_reference_is_loaded() -> None:
    settings = load_settings(
        model={"dim": 1}, bound={"references": [{"name": "u", "weights": [0.0, -2.0]}]}
    )
    tracker = build_tracker(settings, 2)
    assert tracker.references[0].name == "u"
    assert tracker.references[0].weights.tolist() == [0.0, -1.0]


def reference(path: str) -> ReferenceSettings:
    return ReferenceSettings(name="u", path=Path(path))


def test_reference_file_inside_the_directory_is_read(tmp_path: Path) -> None:
    (tmp_path / "u.json").write_bytes(orjson.dumps([0.5, 1.0, -1.0]))
    bound = load_settings(bound={"reference_dir": str(tmp_path)}).bound
    weights = reference_weights(reference("u.json"), bound, 3)
    assert weights.tolist() == [0.5, 1.0, -1.0]


def test_symlink_out_of_the_reference_directory_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_bytes(orjson.dumps([1.0, 1.0, 1.0]))
    refs = tmp_path / "refs"
    refs.mkdir()
    os.symlink(outside, refs / "u.json")
    bound = load_settings(bound={"reference_dir": str(refs)}).bound
    with pytest.raises(ReferenceError, match=r"outside bound\.reference_dir"):
        reference_weights(reference("u.json"), bound, 3)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[1.0, 2.0]", "shape"),
        (b'[1.0, "2", 3.0]', "must be numbers"),
        (b"[0.0, 0.0, 0.0]", "not all 0"),
        (b"{not json", "is not JSON"),
        (b'{"weights": [1, 2, 3]}', "must be numbers"),
    ],
)
def test_bad_reference_files_are_refused_clearly(
    tmp_path: Path, content: bytes, message: str
) -> None:
    (tmp_path / "u.json").write_bytes(content)
    bound = load_settings(bound={"reference_dir": str(tmp_path)}).bound
    with pytest.raises(ReferenceError, match=message):
        reference_weights(reference("u.json"), bound, 3)


def test_missing_reference_file_is_refused(tmp_path: Path) -> None:
    bound = load_settings(bound={"reference_dir": str(tmp_path)}).bound
    with pytest.raises(ReferenceError, match="cannot read"):
        reference_weights(reference("nope.json"), bound, 3)


def test_multiclass_reference_is_a_matrix() -> None:
    settings = load_settings(
        model={"variant": "multiclass", "dim": 1, "classes": ["a", "b"]},
        bound={"references": [{"name": "u", "weights": [[0.0, 1.0], [0.0, -1.0]]}]},
    )
    tracker = build_tracker(settings, 2)
    assert np.allclose(np.linalg.norm(tracker.references[0].weights), 1.0)
