"""Security of the checkpoint loader: it never unpickles, reads only its own files, and refuses
crafted content even under a valid checksum, falling back to the previous checkpoint.

Every crafted case goes through the same helpers as its control: a genuine state is split,
re-encoded, re-framed with a fresh checksum, saved and restored. Untouched, it is loaded and
restores the writer's state; altered in any of the 16 ways, it is refused.
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from consumers.decoding.events import Record
from consumers.engine import Engine
from consumers.reports import RestoreReport
from consumers.state.checkpoint import CheckpointError, CheckpointStore, frame
from learning.state import DIGEST_SIZE, PREAMBLE
from service.model import build_learner, build_tracker
from service.settings import load_settings

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("learning", "consumers", "service")
GOOD_SEEN = 100
NEWER_SEEN = 150


def trained_engine(count: int = 100) -> Engine:
    settings = load_settings(model={"dim": 4})
    learner = build_learner(settings.model)
    engine = Engine(learner, build_tracker(settings, learner.encoder.dimension))
    rng = np.random.default_rng(count)
    records = [
        Record(
            "events",
            0,
            offset,
            json.dumps(
                {"features": rng.normal(size=4).tolist(), "label": 1 if offset % 3 else -1}
            ).encode(),
        )
        for offset in range(count)
    ]
    engine.apply(engine.decoder.decode_batch(records))
    return engine


def fresh_engine() -> Engine:
    settings = load_settings(model={"dim": 4})
    learner = build_learner(settings.model)
    return Engine(learner, build_tracker(settings, learner.encoder.dimension))


def test_checkpoint_paths_outside_the_directory_are_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = CheckpointStore(state)
    good = store.save(trained_engine().checkpoint_bytes()[0])
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "checkpoint-000000000009.ckpt").write_bytes(good.path.read_bytes())
    for path in (
        "../outside/checkpoint-000000000009.ckpt",
        str(outside / "checkpoint-000000000009.ckpt"),
        "/etc/passwd",
        "notes.txt",
        "checkpoint-1.ckpt",
    ):
        with pytest.raises(CheckpointError, match="refusing"):
            store.read(path)
    link = state / "checkpoint-000000000009.ckpt"
    link.symlink_to(outside / "checkpoint-000000000009.ckpt")
    with pytest.raises(CheckpointError, match="symbolic link"):
        store.read(link.name)
    engine = fresh_engine()
    report = engine.restore(CheckpointStore(state))
    assert report.path == str(good.path), "the symbolic link to a file outside was not used"
    assert [s.path.name for s in report.skipped] == [link.name]


def split_state(blob: bytes) -> tuple[dict[str, Any], bytearray]:
    _, _, length = PREAMBLE.unpack_from(blob)
    header = json.loads(blob[PREAMBLE.size : PREAMBLE.size + length])
    return header, bytearray(blob[PREAMBLE.size + length : -DIGEST_SIZE])


def join_state(template: bytes, header: dict[str, Any], payload: bytearray) -> bytes:
    """A state blob with valid magic, version and checksum around ``header`` and ``payload``."""
    magic, version, _ = PREAMBLE.unpack_from(template)
    header_bytes = json.dumps(header).encode()
    body = PREAMBLE.pack(magic, version, len(header_bytes)) + header_bytes + bytes(payload)
    return body + hashlib.sha256(body).digest()


def array_entry(header: dict[str, Any], name: str) -> dict[str, Any]:
    return next(a for a in header["arrays"] if a["group"] == "learner" and a["name"] == name)


def poke(header: dict[str, Any], payload: bytearray, name: str, index: int, value: Any) -> None:
    entry = array_entry(header, name)
    start = entry["offset"] + 8 * index
    payload[start : start + 8] = np.array([value], dtype=entry["dtype"]).tobytes()


def first_partition(header: dict[str, Any]) -> dict[str, Any]:
    partition: dict[str, Any] = header["extra"]["partitions"][0]
    return partition


Craft = Callable[[dict[str, Any], bytearray], None]
CRAFTED: dict[str, Craft] = {
    "learner_kind_os_system": lambda h, p: h["learner"].__setitem__("kind", "os.system"),
    "object_dtype": lambda h, p: array_entry(h, "weights").__setitem__("dtype", "|O"),
    "huge_shape": lambda h, p: array_entry(h, "weights").__setitem__("shape", [10**9, 10**9]),
    "nan_weight": lambda h, p: poke(h, p, "weights", 1, float("nan")),
    "infinite_weight": lambda h, p: poke(h, p, "weights", 2, float("-inf")),
    "nan_weight_sum": lambda h, p: poke(h, p, "weight_sums", 1, float("nan")),
    "negative_counter": lambda h, p: poke(h, p, "counters", 0, -5),
    "huge_margin_window": lambda h, p: h["tracker"].__setitem__("margin_window", 10**13),
    "negative_next_offset": lambda h, p: first_partition(h).__setitem__("next_offset", -7),
    "next_offset_past_applied": lambda h, p: first_partition(h).__setitem__("next_offset", 10**6),
    "overlapping_ranges": lambda h, p: first_partition(h).__setitem__(
        "applied", [[0, 60], [40, 100]]
    ),
    "counts_exceed_ranges": lambda h, p: first_partition(h).__setitem__("learned", 10**6),
    "negative_partition": lambda h, p: first_partition(h).__setitem__("partition", -1),
    "duplicate_partition": lambda h, p: h["extra"]["partitions"].append(dict(first_partition(h))),
    "negative_invalid_count": lambda h, p: h["extra"].__setitem__("invalid", {"not_json": -3}),
    "unknown_reason_code": lambda h, p: h["extra"].__setitem__("invalid", {"<script>": 3}),
}


@dataclass
class CraftedRestore:
    """A restore from a good checkpoint and, newer, a re-framed one holding more events."""

    good: Path
    newer: Path
    genuine: bytes
    engine: Engine
    report: RestoreReport


def restore_through_the_crafting_path(craft: Craft, directory: Path) -> CraftedRestore:
    """Split a genuine state of ``NEWER_SEEN`` events, apply ``craft``, re-frame it with a valid
    checksum, save it as the newest checkpoint and restore a fresh engine from the store."""
    store = CheckpointStore(directory)
    good = store.save(trained_engine(GOOD_SEEN).checkpoint_bytes()[0])
    genuine = trained_engine(NEWER_SEEN).checkpoint_bytes()[0]
    header, payload = split_state(genuine)
    craft(header, payload)
    newer = store.save(join_state(genuine, header, payload))
    engine = fresh_engine()
    return CraftedRestore(good.path, newer.path, genuine, engine, engine.restore(store))


def timeless(blob: bytes) -> tuple[dict[str, Any], bytearray]:
    """A state's header and payload without the moment it was saved."""
    header, payload = split_state(blob)
    del header["extra"]["saved_at"]
    return header, payload


def untouched(header: dict[str, Any], payload: bytearray) -> None:
    """The identity craft: the state goes through split, JSON re-encoding and re-framing only."""


def test_an_untampered_checkpoint_passes_the_crafting_path_and_is_used(tmp_path: Path) -> None:
    """The control for the crafted cases: with nothing altered, the same split, re-encode,
    re-frame, save and restore yields the newer checkpoint: the restored engine's state is the
    one the writing engine saved (every array byte for byte, every header field but the time)."""
    restored = restore_through_the_crafting_path(untouched, tmp_path / "state")
    assert restored.report.path == str(restored.newer)
    assert restored.report.skipped == ()
    assert restored.engine.snapshot.seen == NEWER_SEEN
    assert timeless(restored.engine.checkpoint_bytes()[0]) == timeless(restored.genuine)
    assert not list((tmp_path / "state").glob("*.corrupt"))


@pytest.mark.parametrize("kind", list(CRAFTED))
def test_a_crafted_checkpoint_is_refused_and_the_previous_one_used(
    kind: str, tmp_path: Path
) -> None:
    restored = restore_through_the_crafting_path(CRAFTED[kind], tmp_path / "state")
    assert restored.report.path == str(restored.good), f"{kind}: loaded {restored.report.path}"
    assert [s.path for s in restored.report.skipped] == [restored.newer]
    assert restored.engine.snapshot.seen == GOOD_SEEN


def test_a_pickle_is_never_unpickled(tmp_path: Path) -> None:
    """A framed pickle whose reduce would create a file: refused, and the file never appears."""
    marker = tmp_path / "pwned"
    payload = (
        b"\x80\x04\x95" + b"\x00" * 8 + b"cos\nsystem\n(V touch " + str(marker).encode() + b"\ntR."
    )
    store = CheckpointStore(tmp_path / "state")
    good = store.save(trained_engine().checkpoint_bytes()[0])
    (tmp_path / "state" / "checkpoint-000000000002.ckpt").write_bytes(frame(payload, 2))
    report = fresh_engine().restore(store)
    assert report.path == str(good.path)
    assert not marker.exists()


def test_no_module_can_unpickle() -> None:
    """No import of pickle-family modules and no ``allow_pickle=True`` in the service's code."""
    banned = {"pickle", "cPickle", "dill", "shelve", "marshal", "joblib", "cloudpickle"}
    offenders = []
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name.split(".")[0] for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module.split(".")[0]]
                elif (
                    isinstance(node, ast.keyword)
                    and node.arg == "allow_pickle"
                    and not (isinstance(node.value, ast.Constant) and node.value.value is False)
                ):
                    offenders.append(f"{path}:{node.value.lineno} allow_pickle")
                offenders.extend(f"{path}:{node.lineno} {n}" for n in names if n in banned)  # type: ignore[attr-defined]
    assert not offenders, offenders
