"""``novikoff serve`` under fault injection: SIGKILL, SIGTERM, CPU accounting, checkpoint files.

:class:`FaultyService` is :class:`~tests.support.running_service.RunningService` with what the
reliability tests need on top: a config of their own (checkpoint cadence, broker through a
proxy), one consumer group kept across restarts, SIGKILL, the process's CPU time from
``/proc``, and the log of each incarnation.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import httpx
import numpy as np

from consumers.state.checkpoint import unframe
from learning import load_state
from service.cli.synthetic import SyntheticStream
from service.model import build_learner, build_tracker
from service.settings import load_settings
from tests.support.running_service import RunningService, Stream, novikoff_command

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
UTIME_FIELD = 13
STIME_FIELD = 14
"""``utime`` and ``stime`` in ``/proc/PID/stat`` (0-based, after the command name)."""
KILL_POLL_S = 0.01


@dataclass(frozen=True)
class ConfiguredStream(Stream):
    """A :class:`Stream` whose service config gets extra TOML appended (e.g. ``[checkpoint]``),
    or is replaced altogether by ``model_toml`` (e.g. for a named-feature model)."""

    extra_toml: str = ""
    model_toml: str = ""

    def config_toml(self) -> str:
        base = self.model_toml or super().config_toml()
        return base + "\n" + self.extra_toml

    def synthetic(self) -> SyntheticStream:
        """The synthetic stream this config's reference separator belongs to."""
        return SyntheticStream(dim=self.dim, margin=self.margin, noise=self.noise, seed=self.seed)


@dataclass
class FaultyService(RunningService):
    """A ``novikoff serve`` subprocess that tests may kill, stop and restart.

    Every :meth:`start` opens a fresh log file (``<log stem>-<n>.log``), so the log of the
    incarnation that crashed stays readable.
    """

    group_id: str = field(default_factory=lambda: f"novikoff-{uuid.uuid4().hex[:8]}")
    incarnation: int = 0
    logs: list[Path] = field(default_factory=list)

    @classmethod
    def in_workdir(
        cls,
        root: Path,
        name: str,
        *,
        bootstrap: str,
        topic: str,
        stream: Stream,
        group_id: str,
        env: Mapping[str, str] | None = None,
    ) -> Self:
        """An instance working in the new directory ``root/name``, logging to ``serve.log``."""
        workdir = root / name
        workdir.mkdir()
        service = cls(
            workdir=workdir,
            bootstrap=bootstrap,
            topic=topic,
            stream=stream,
            log_path=workdir / "serve.log",
            group_id=group_id,
        )
        service.extra_env.update(env or {})
        return service

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env["NOVIKOFF_KAFKA__GROUP_ID"] = self.group_id
        return env

    def start(self, wait_ready: bool = True) -> FaultyService:
        self.incarnation += 1
        log_path = self.log_path.with_name(f"{self.log_path.stem}-{self.incarnation}.log")
        self.logs.append(log_path)
        with open(log_path, "ab") as log:
            self._proc = subprocess.Popen(
                self._command(),
                cwd=self.workdir,
                env=self.environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self._client = httpx.Client(base_url=self.base_url, timeout=10.0)
        if wait_ready:
            self.wait_ready()
        return self

    def _command(self) -> list[str]:
        return novikoff_command("serve")

    @property
    def log_text(self) -> str:
        """The log of the current incarnation."""
        return self.logs[-1].read_text(errors="replace") if self.logs else ""

    @property
    def all_logs(self) -> str:
        return "\n".join(path.read_text(errors="replace") for path in self.logs)

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("service not started")
        return self._proc.pid

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def post(self, path: str, body: Any, **kwargs: Any) -> httpx.Response:
        if self._client is None:
            raise RuntimeError("service not started")
        return self._client.post(path, json=body, **kwargs)

    def cpu_seconds(self) -> float:
        """User + system CPU time the process has used so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        # fields[0] is the state (field 3 of the man page); utime and stime are fields 14, 15.
        utime, stime = int(fields[UTIME_FIELD - 2]), int(fields[STIME_FIELD - 2])
        return (utime + stime) / CLOCK_TICKS_PER_S

    def kill(self) -> None:
        """SIGKILL: no checkpoint, no commit, no goodbye."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._proc is None:
            return
        self._proc.send_signal(signal.SIGKILL)
        self._proc.wait()
        self._proc = None

    def wait_dead(self, timeout_s: float) -> int:
        """Wait for the process to exit on its own; its exit code (negative: the signal)."""
        if self._proc is None:
            raise RuntimeError("service not started")
        code = self._proc.wait(timeout=timeout_s)
        if self._client is not None:
            self._client.close()
            self._client = None
        self._proc = None
        return code

    def kill_past_checkpoint(self, poll_s: float = 0.01) -> tuple[int, int]:
        """SIGKILL at a moment when the service has learned events its newest checkpoint lacks.

        The process is frozen (SIGSTOP) between reading ``/stats`` and reading its newest
        checkpoint from disk, so no batch or checkpoint can slip in between: when the checkpoint
        holds fewer events than ``/stats`` showed, the kill is certain to lose work that the
        restart must re-read. Returns (events learned at the kill, at least; events in the newest
        checkpoint).
        """
        state = self.workdir / "state"
        while True:
            learned = int(self.stats()["seen"])
            os.kill(self.pid, signal.SIGSTOP)
            on_disk = checkpoints_on_disk(state) if state.exists() else []
            newest = on_disk[0].seen if on_disk else 0
            if newest < learned:
                self.kill()
                return learned, newest
            os.kill(self.pid, signal.SIGCONT)
            time.sleep(poll_s)

    def terminate(self, timeout_s: float) -> tuple[int, float]:
        """SIGTERM; the exit code and how long the process took to exit."""
        if self._proc is None:
            raise RuntimeError("service not started")
        if self._client is not None:
            self._client.close()
            self._client = None
        started = time.monotonic()
        self._proc.send_signal(signal.SIGTERM)
        try:
            code = self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            raise
        finally:
            elapsed = time.monotonic() - started
            self._proc = None
        return code, elapsed

    def wait_for(self, what: str, condition: Any, timeout_s: float, poll_s: float = 0.05) -> Any:
        """Poll ``condition(stats)`` until it returns a truthy value; return that value."""
        deadline = time.monotonic() + timeout_s
        stats: dict[str, Any] = {}
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                stats = self.stats()
            except httpx.TransportError:
                time.sleep(poll_s)
                continue
            result = condition(stats)
            if result:
                return result
            time.sleep(poll_s)
        raise TimeoutError(f"not {what} after {timeout_s}s: {stats}; see {self.logs[-1]}")


PROBE_COUNT = 32
PROBE_SEED = 20261130


def probes(dim: int) -> list[list[float]]:
    """Fixed points on which the voted predictor's scores are compared (its voters are state
    that ``/model`` does not list, so equal votes on many points stand in for equal voters)."""
    rng = np.random.default_rng(PROBE_SEED)
    points: list[list[float]] = rng.standard_normal((PROBE_COUNT, dim)).tolist()
    return points


def offline_expectation(stream: Stream, X: Any, y: Any) -> dict[str, Any]:
    """What an uninterrupted learner with the service's settings makes of ``(X, y)`` in order.

    ``test_service_kafka`` proves the service equals this offline run on an uninterrupted stream,
    so equality with it after faults is equality with an uninterrupted run.
    """
    settings = load_settings(
        model={"dim": stream.dim},
        bound={"references": [{"name": "u", "weights": stream.reference}]},
    )
    learner = build_learner(settings.model)
    tracker = build_tracker(settings, learner.encoder.dimension)
    X = learner.encoder.encode_batch(X.tolist())
    result = learner.learn_batch(X, y)
    tracker.observe_batch(X, y, result)
    snapshot = learner.snapshot()
    status = tracker.status()[0]
    _, voted_scores = learner.predict_batch(
        learner.encoder.encode_batch(probes(stream.dim)), predictor="voted"
    )
    return {
        "last": snapshot.weights.tolist(),
        "averaged": snapshot.averaged_weights.tolist(),
        "seen": learner.n_seen,
        "mistakes": learner.n_updates,
        "prequential": dict(learner.prequential_mistakes),
        "bound": (
            status.name,
            status.bound,
            status.gamma,
            status.k,
            status.novikoff,
            status.min_margin,
        ),
        "radius": tracker.radius,
        "voted": {"voters": learner.n_voters, "dropped_voters": learner.dropped_voters},
        "voted_scores": np.asarray(voted_scores).tolist(),
    }


def served_model(service: RunningService) -> dict[str, Any]:
    """The same figures as :func:`offline_expectation`, read from ``/model`` and ``/stats``."""
    stats = service.stats()
    response = service.get("/model")
    response.raise_for_status()
    model = response.json()
    bound = stats["bounds"][0]
    dim = len(model["weights"]["last"]) - 1
    voted_scores = []
    for point in probes(dim):  # one request each: wide probes would pass the body limit together
        voted = httpx.post(
            f"{service.base_url}/predict", json={"features": point, "predictor": "voted"}
        )
        voted.raise_for_status()
        voted_scores.append(voted.json()["score"])
    return {
        "last": model["weights"]["last"],
        "averaged": model["weights"]["averaged"],
        "seen": stats["seen"],
        "mistakes": stats["mistakes"],
        "prequential": stats["prequential_mistakes"],
        "bound": (
            bound["name"],
            bound["bound"],
            bound["gamma"],
            bound["k"],
            bound["novikoff"],
            bound["min_margin"],
        ),
        "radius": stats["radius"],
        "voted": model["voted"],
        "voted_scores": voted_scores,
    }


@dataclass(frozen=True)
class CheckpointOnDisk:
    """One checkpoint file as the test reads it back independently of the service."""

    path: Path
    seen: int
    next_offsets: dict[tuple[str, int], int]


def checkpoints_on_disk(directory: Path) -> list[CheckpointOnDisk]:
    """The verified checkpoints in ``directory``, newest first.

    Read-only: unlike ``CheckpointStore``, it never removes a temporary file, so it is safe to
    call while the service is writing. A file pruned while being listed is skipped.
    """
    found = []
    for path in sorted(directory.glob("checkpoint-*.ckpt"), reverse=True):
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        learner, _, extra = load_state(unframe(data))
        offsets = {
            (p["topic"], int(p["partition"])): int(p["next_offset"]) for p in extra["partitions"]
        }
        found.append(CheckpointOnDisk(path, learner.n_seen, offsets))
    return found
