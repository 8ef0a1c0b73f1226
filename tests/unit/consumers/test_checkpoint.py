"""The checkpoint store: atomic saves, torn/truncated/altered files detected, previous kept."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from consumers.state.checkpoint import HEADER, CheckpointError, CheckpointStore, frame, unframe


def test_round_trip_and_previous_kept(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    for payload in (b"one", b"two", b"three"):
        store.save(payload)
    assert store.load_latest() == b"three"
    assert [p.name for p in store.files()] == [
        "checkpoint-000000000003.ckpt",
        "checkpoint-000000000002.ckpt",
    ]


def test_no_checkpoint_is_said_loudly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert CheckpointStore(tmp_path / "new").load_latest() is None
    assert "NO usable checkpoint" in caplog.text


def _damage_truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _damage_flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01
    path.write_bytes(bytes(data))


def _damage_header(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.write_bytes(bytes(data))


def _damage_empty(path: Path) -> None:
    path.write_bytes(b"")


def _damage_append(path: Path) -> None:
    with path.open("ab") as handle:
        handle.write(b"junk")


@pytest.mark.parametrize(
    "damage", [_damage_truncate, _damage_flip_byte, _damage_header, _damage_empty, _damage_append]
)
def test_damaged_latest_falls_back_to_previous(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: object
) -> None:
    store = CheckpointStore(tmp_path)
    store.save(b"good previous")
    latest = store.save(b"latest").path
    damage(latest)  # type: ignore[operator]
    with caplog.at_level(logging.ERROR):
        assert CheckpointStore(tmp_path).load_latest() == b"good previous"
    assert "is damaged" in caplog.text and latest.name in caplog.text
    assert (tmp_path / (latest.name + ".corrupt")).exists()
    assert not latest.exists()


def test_both_damaged_is_never_silent(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = CheckpointStore(tmp_path)
    for payload in (b"a", b"b"):
        _damage_flip_byte(store.save(payload).path)
    with caplog.at_level(logging.WARNING):
        assert CheckpointStore(tmp_path).load_latest() is None
    assert caplog.text.count("is damaged") == 2
    assert "NO usable checkpoint" in caplog.text and "2 damaged file(s)" in caplog.text


def test_a_crash_during_a_write_leaves_the_previous_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = CheckpointStore(tmp_path)
    store.save(b"before the crash")
    torn = tmp_path / ".checkpoint-000000000002.ckpt.tmp"
    torn.write_bytes(frame(b"half written", 2)[:20])
    with caplog.at_level(logging.WARNING):
        fresh = CheckpointStore(tmp_path)
        assert fresh.load_latest() == b"before the crash"
    assert "incomplete checkpoint" in caplog.text
    assert not torn.exists()
    fresh.save(b"after")
    assert fresh.load_latest() == b"after"


def test_a_failed_write_keeps_the_previous(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = CheckpointStore(tmp_path)
    store.save(b"safe")

    def broken_fsync(fd: int) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk on fire"):
        store.save(b"doomed")
    monkeypatch.undo()
    assert store.load_latest() == b"safe"
    assert not list(tmp_path.glob(".*.tmp"))


def test_sequence_survives_quarantined_files(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    _damage_flip_byte(store.save(b"x").path)
    assert store.load_latest() is None
    info = store.save(b"y")
    assert info.sequence == 2
    assert store.load_latest() == b"y"


def test_renamed_file_is_refused(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    info = store.save(b"payload")
    info.path.rename(tmp_path / "checkpoint-000000000009.ckpt")
    assert store.load_latest() is None


def test_paths_outside_the_directory_are_refused(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "state")
    info = store.save(b"payload")
    assert store.read(info.path.name) == b"payload"
    outside = tmp_path / "checkpoint-000000000001.ckpt"
    outside.write_bytes(frame(b"evil", 1))
    for path in (outside, "../checkpoint-000000000001.ckpt", tmp_path / "state" / "notes.txt"):
        with pytest.raises(CheckpointError, match="refusing"):
            store.read(path)
    link = tmp_path / "state" / "checkpoint-000000000005.ckpt"
    link.symlink_to(outside)
    with pytest.raises(CheckpointError, match="symbolic link"):
        store.read(link)
    assert store.load_latest() == b"payload"


def test_unframe_checks_every_field() -> None:
    data = frame(b"abc", 7)
    assert unframe(data, 7) == b"abc"
    with pytest.raises(CheckpointError, match="sequence"):
        unframe(data, 8)
    with pytest.raises(CheckpointError, match="truncated"):
        unframe(data[: HEADER.size - 1])
    with pytest.raises(CheckpointError, match="checksum"):
        unframe(data[:-1] + b"x")


def test_keep_must_leave_a_previous(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        CheckpointStore(tmp_path, keep=1)
