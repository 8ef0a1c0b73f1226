"""Torn and corrupt checkpoints: detected, said out loud, recovered from the previous good one.

The service learns a stream and stops, leaving its two newest checkpoints on disk. The test then
damages them the ways a crash or a disk can: a byte altered, the file truncated or empty, a
temporary file left by a crash in the middle of a write, a frame whose checksum is right around a
payload that is not a model, every checkpoint damaged at once. It also kills the service with
SIGKILL at the instant a checkpoint's temporary file appears, i.e. while it is being written.

On restart the service must say what it found (the damaged file, the reason) and resume from the
newest *good* checkpoint; with none left it must say loudly that it starts from an empty model
and re-read the topic from the start. Either way, after it drains, every event is learned exactly
once and the model is bit-identical to an uninterrupted run.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from consumers.state.checkpoint import HEADER, frame
from service.settings import load_settings
from service.topics import ensure_topics
from tests.support.faults import (
    ConfiguredStream,
    FaultyService,
    checkpoints_on_disk,
    offline_expectation,
    served_model,
)
from tests.support.ledger import EventPlan, Ledger, publish, read_dead_letters, record_figures

pytestmark = pytest.mark.integration

FIRST_EVENTS = 6_000
MORE_EVENTS = 1_500
CHECKPOINT_TOML = "[checkpoint]\nevery_events = 1000\nevery_seconds = 60.0\n"
STOP_TIMEOUT_S = 30.0
DRAIN_TIMEOUT_S = 90.0
RESTORED = re.compile(r"restored checkpoint (\S+): (\d+) events learned")

Damage = Callable[[list[Path]], None]
"""Damages checkpoint files (newest first) and/or the directory they are in."""


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[HEADER.size + (len(data) - HEADER.size) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def damage_newest_byte(files: list[Path]) -> None:
    flip_byte(files[0])


def damage_newest_truncated(files: list[Path]) -> None:
    truncate(files[0])


def damage_newest_empty(files: list[Path]) -> None:
    files[0].write_bytes(b"")


def damage_newest_header(files: list[Path]) -> None:
    data = bytearray(files[0].read_bytes())
    data[0] ^= 0xFF  # the magic
    files[0].write_bytes(bytes(data))


def damage_newest_payload_not_a_model(files: list[Path]) -> None:
    """A well-framed file (right length, right checksum) whose payload is a pickle, not a model."""
    sequence = int(files[0].name.split("-")[1].split(".")[0])
    pickle_payload = (
        b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x94\x8c\x06system\x94."
    )
    files[0].write_bytes(frame(pickle_payload, sequence))


def leave_torn_temp_file(files: list[Path]) -> None:
    """What a crash between writing and renaming leaves: a partial temporary file."""
    sequence = int(files[0].name.split("-")[1].split(".")[0]) + 1
    data = files[0].read_bytes()
    (files[0].parent / f".checkpoint-{sequence:012d}.ckpt.tmp").write_bytes(data[: len(data) // 3])


def damage_all(files: list[Path]) -> None:
    for path in files:
        flip_byte(path)


# kind -> (damage, what the log must say, which checkpoint must be used: index or None for none)
CASES: dict[str, tuple[Damage, str, int | None]] = {
    "altered_byte": (damage_newest_byte, "checksum mismatch", 1),
    "truncated": (damage_newest_truncated, "truncated or torn", 1),
    "empty_file": (damage_newest_empty, "truncated: 0 bytes", 1),
    "bad_magic": (damage_newest_header, "not a novikoff checkpoint", 1),
    "framed_pickle": (damage_newest_payload_not_a_model, "cannot be loaded", 1),
    "torn_temp_file": (leave_torn_temp_file, "removing incomplete checkpoint", 0),
    "all_damaged": (damage_all, "NO usable checkpoint", None),
}


def drained(total: int) -> Callable[[dict[str, Any]], bool]:
    def check(stats: dict[str, Any]) -> bool:
        return bool(stats["seen"] == total and stats["lag"] == 0)

    return check


def make_service(tmp_path: Path, bootstrap: str, topic: str) -> FaultyService:
    stream = ConfiguredStream(dim=4, seed=5, margin=0.05, noise=0.05, extra_toml=CHECKPOINT_TOML)
    return FaultyService(
        workdir=tmp_path,
        bootstrap=bootstrap,
        topic=topic,
        stream=stream,
        log_path=tmp_path / "serve.log",
        group_id=f"{topic}-group",
    )


@pytest.mark.parametrize("kind", list(CASES))
def test_a_damaged_checkpoint_is_detected_reported_and_skipped(
    kind: str, kafka_bootstrap: str, topic_name: str, tmp_path: Path, artifacts_dir: Path
) -> None:
    damage, said, used = CASES[kind]
    settings = load_settings(kafka={"bootstrap_servers": kafka_bootstrap})
    ensure_topics(settings.kafka, [topic_name, f"{topic_name}.dlq"], partitions=1)
    service = make_service(tmp_path, kafka_bootstrap, topic_name)
    plan = EventPlan(service.stream.synthetic(), partitions=1)  # type: ignore[attr-defined]
    ledger = Ledger(topic_name, publish(kafka_bootstrap, topic_name, plan.valid(FIRST_EVENTS)))
    try:
        service.start()
        service.wait_for("drained", drained(FIRST_EVENTS), DRAIN_TIMEOUT_S)
        code, _ = service.terminate(STOP_TIMEOUT_S)
        assert code == 0, service.log_text
        state = tmp_path / "state"
        on_disk = checkpoints_on_disk(state)
        assert len(on_disk) == 2, "the store keeps the previous good checkpoint"
        assert on_disk[0].seen == FIRST_EVENTS
        assert on_disk[1].seen < on_disk[0].seen
        damage([c.path for c in on_disk])
        ledger.extend(
            publish(kafka_bootstrap, topic_name, plan.valid(MORE_EVENTS, start=FIRST_EVENTS))
        )

        service.start()
        log = service.log_text
        assert said in log, log
        restored = RESTORED.search(log)
        if used is None:
            assert restored is None, log
            assert re.search(r"WARNING .*NO usable checkpoint .*starting from an empty model", log)
            assert "2 damaged file(s) moved aside" in log, log
        else:
            assert restored is not None, log
            assert restored.group(1) == on_disk[used].path.name, log
            assert int(restored.group(2)) == on_disk[used].seen, log
        if used != 0:
            assert re.search(r"ERROR .*checkpoint-\d+\.ckpt", log), "a damaged file is an ERROR"
            assert len(list(state.glob("*.corrupt"))) == (2 if used is None else 1), "moved aside"

        total = FIRST_EVENTS + MORE_EVENTS
        service.wait_for("drained", drained(total), DRAIN_TIMEOUT_S)
        time.sleep(1.0)
        stats = service.stats()
        report = ledger.check(stats, read_dead_letters(kafka_bootstrap, f"{topic_name}.dlq", 0))
        assert report.missing == [] and report.problems == [], report.problems
        X, y = ledger.valid_arrays(0)
        assert served_model(service) == offline_expectation(service.stream, X, y)
        code, _ = service.terminate(STOP_TIMEOUT_S)
        assert code == 0, service.log_text
        # Checked once nothing writes any more (a running service has a temporary file
        # of its own while it writes a checkpoint).
        assert not list(state.glob(".*.tmp")), "the torn temporary file is removed"
        record_figures(
            artifacts_dir,
            "damaged_checkpoint",
            kind=kind,
            resumed_from=None if used is None else on_disk[used].seen,
            replayed=total - (0 if used is None else on_disk[used].seen),
            learned=stats["seen"],
            missing=len(report.missing),
        )
    finally:
        service.stop()


def test_sigkill_while_a_checkpoint_is_being_written(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path, artifacts_dir: Path
) -> None:
    """Kill at the instant a checkpoint's temporary file exists: the write is torn for real.

    A wide model (10,000 features, 64 voters: ~5 MB per checkpoint) keeps each write open for
    milliseconds, long enough for the test to see the temporary file and kill the writer.
    """
    settings = load_settings(kafka={"bootstrap_servers": kafka_bootstrap})
    ensure_topics(settings.kafka, [topic_name, f"{topic_name}.dlq"], partitions=1)
    stream = ConfiguredStream(
        dim=WIDE_DIM, seed=9, margin=0.05, noise=0.05, extra_toml=WIDE_CHECKPOINT_TOML
    )
    service = FaultyService(
        workdir=tmp_path,
        bootstrap=kafka_bootstrap,
        topic=topic_name,
        stream=stream,
        log_path=tmp_path / "serve.log",
        group_id=f"{topic_name}-group",
    )
    plan = EventPlan(stream.synthetic(), partitions=1)
    ledger = Ledger(topic_name, publish(kafka_bootstrap, topic_name, plan.valid(WIDE_EVENTS)))
    state = tmp_path / "state"
    try:
        torn = None
        for _ in range(CATCH_ATTEMPTS):
            service.start(wait_ready=False)
            torn = kill_during_a_write(service, state)
            if torn:
                break
        assert torn, f"no kill landed during a checkpoint write; see {service.logs}"
        service.start()
        log = service.log_text
        assert f"removing incomplete checkpoint {torn} left by a crash during a write" in log, log
        service.wait_for("drained", drained(WIDE_EVENTS), DRAIN_TIMEOUT_S)
        time.sleep(1.0)
        report = ledger.check(
            service.stats(), read_dead_letters(kafka_bootstrap, f"{topic_name}.dlq", 0)
        )
        assert report.missing == [] and report.problems == [], report.problems
        X, y = ledger.valid_arrays(0)
        assert served_model(service) == offline_expectation(stream, X, y)
        size = max(p.stat().st_size for p in state.glob("checkpoint-*.ckpt"))
        record_figures(
            artifacts_dir,
            "kill_during_checkpoint_write",
            torn=torn,
            checkpoint_bytes=size,
            incarnations=len(service.logs),
        )
    finally:
        service.stop()


WIDE_DIM = 10_000
WIDE_EVENTS = 400
WIDE_CHECKPOINT_TOML = "[checkpoint]\nevery_events = 40\nevery_seconds = 60.0\n"
CATCH_ATTEMPTS = 5
CATCH_TIMEOUT_S = 60.0


def kill_during_a_write(service: FaultyService, state: Path) -> str | None:
    """Spin on the checkpoint directory and SIGKILL as soon as a temporary file shows up.

    Returns the temporary file's name when it still existed after the process was dead (the
    write was torn); ``None`` when the rename won the race (the service is dead either way).
    """
    deadline = time.monotonic() + CATCH_TIMEOUT_S
    while time.monotonic() < deadline:
        if not service.alive:
            raise AssertionError(f"the service died on its own; see {service.logs[-1]}")
        try:
            names = os.listdir(state)
        except FileNotFoundError:
            continue
        torn = [name for name in names if name.endswith(".tmp")]
        if torn:
            os.kill(service.pid, signal.SIGKILL)
            service.kill()  # reaps it
            return torn[0] if (state / torn[0]).exists() else None
    raise AssertionError(f"no checkpoint was written in {CATCH_TIMEOUT_S}s")
