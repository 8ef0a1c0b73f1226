"""The real ``novikoff serve`` and ``novikoff produce`` as subprocesses, for browser and scrape
tests.

The service gets a fresh topic, consumer group, HTTP port and checkpoint directory through its
documented environment variables, and a small TOML config whose reference separator is the one
the synthetic producer draws, so the bound it reports is meaningful.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from service.cli.broker import terminate_process
from service.cli.synthetic import SyntheticStream
from service.settings import load_settings
from service.topics import ensure_topics
from tests.support.broker import free_port

READY_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 90.0
PRODUCE_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0
POLL_INTERVAL_S = 0.2
TEST_GROUP_TIMING = {
    "session_timeout_ms": 6_000,
    "heartbeat_interval_ms": 1_000,
    "max_poll_interval_ms": 10_000,
}
"""``[kafka]`` group timing of the services the tests run: a killed instance leaves its group
within 6 s (Apache Kafka's smallest allowed session timeout), so a restart in the same group does
not wait out the 45 s production default; the 10 s poll interval also keeps group joins quick on
the embedded Tansu of the smoke tests (it joins in about max_poll_interval_ms / 13)."""


def group_timing_env() -> dict[str, str]:
    """:data:`TEST_GROUP_TIMING` as ``NOVIKOFF_KAFKA__*`` variables."""
    return {
        f"NOVIKOFF_KAFKA__{key.upper()}": str(value) for key, value in TEST_GROUP_TIMING.items()
    }


def group_timing_toml() -> str:
    """:data:`TEST_GROUP_TIMING` as ``[kafka]`` lines."""
    return "".join(f"{key} = {value}\n" for key, value in TEST_GROUP_TIMING.items())


def novikoff_command(*args: str) -> list[str]:
    """The ``novikoff`` console script of this environment, or its entry point through Python."""
    script = Path(sys.executable).with_name("novikoff")
    if script.exists():
        return [str(script), *args]
    found = shutil.which("novikoff")
    if found:
        return [found, *args]
    return [sys.executable, "-c", "from service.cli.main import main; main()", *args]


@dataclass(frozen=True)
class Stream:
    """A synthetic stream: ``count`` records, a ``malformed`` share of them broken."""

    dim: int = 4
    seed: int = 11
    margin: float = 0.05
    noise: float = 0.05
    count: int = 3_000
    malformed: float = 0.02
    rate: float = 0.0
    """Records per second; 0 publishes as fast as possible."""

    @property
    def reference(self) -> list[float]:
        weights: list[float] = SyntheticStream(dim=self.dim, seed=self.seed).reference.tolist()
        return weights

    def produce_args(self) -> list[str]:
        return [
            "--synthetic",
            "--dim",
            str(self.dim),
            "--seed",
            str(self.seed),
            "--margin",
            str(self.margin),
            "--noise",
            str(self.noise),
            "--malformed",
            str(self.malformed),
            "--count",
            str(self.count),
            "--rate",
            str(self.rate),
            "--partitions",
            "1",
            "--no-progress",
        ]

    def config_toml(self) -> str:
        weights = ", ".join(repr(w) for w in self.reference)
        return (
            f'[model]\nvariant = "binary"\ndim = {self.dim}\nbias = true\n\n'
            f'[[bound.references]]\nname = "u"\nweights = [{weights}]\n'
        )


@dataclass
class RunningService:
    """A ``novikoff serve`` subprocess on loopback."""

    workdir: Path
    bootstrap: str
    topic: str
    stream: Stream
    log_path: Path
    port: int = field(default_factory=free_port)
    create_topics: bool = True
    """Create the topic and its dead-letter topic before starting (off: the topic is missing)."""
    wait_until_ready: bool = True
    extra_env: dict[str, str] = field(default_factory=dict)
    _proc: subprocess.Popen[bytes] | None = None
    _client: httpx.Client | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        config = self.workdir / "novikoff.toml"
        config.write_text(self.stream.config_toml(), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("NOVIKOFF_")}
        env.update(
            {
                "NOVIKOFF_CONFIG": str(config),
                "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
                "NOVIKOFF_KAFKA__TOPIC": self.topic,
                "NOVIKOFF_KAFKA__GROUP_ID": f"novikoff-{uuid.uuid4().hex[:8]}",
                "NOVIKOFF_HTTP__HOST": "127.0.0.1",
                "NOVIKOFF_HTTP__PORT": str(self.port),
                "NOVIKOFF_CHECKPOINT__PATH": str(self.workdir / "state"),
                **group_timing_env(),
                **self.extra_env,
            }
        )
        return env

    def start(self) -> RunningService:
        # Topics first: a broker may auto-create a topic on the consumer's first metadata request,
        # with its own default partition count instead of the one partition the stream asks for.
        if self.create_topics:
            kafka = load_settings(kafka={"bootstrap_servers": self.bootstrap}).kafka
            ensure_topics(kafka, [self.topic, f"{self.topic}.dlq"])
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child process
        self._proc = subprocess.Popen(
            novikoff_command("serve"),
            cwd=self.workdir,
            env=self.environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self._client = httpx.Client(base_url=self.base_url, timeout=10.0)
        if self.wait_until_ready:
            self.wait_ready()
        return self

    def get(self, path: str) -> httpx.Response:
        if self._client is None:
            raise RuntimeError("service not started")
        return self._client.get(path)

    def post(self, path: str, body: object) -> httpx.Response:
        if self._client is None:
            raise RuntimeError("service not started")
        return self._client.post(path, json=body)

    def stats(self) -> dict[str, Any]:
        response = self.get("/stats")
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                response = self.get("/readyz")
                if response.status_code == 200:
                    return
                last = f"{response.status_code} {response.text}"
            except httpx.TransportError as exc:
                last = repr(exc)
            time.sleep(POLL_INTERVAL_S)
        raise TimeoutError(f"novikoff not ready after {timeout_s}s: {last}; see {self.log_path}")

    def wait_drained(self, produced: int, timeout_s: float = DRAIN_TIMEOUT_S) -> dict[str, Any]:
        """Wait until every produced record is learned or rejected and nothing lags."""
        deadline = time.monotonic() + timeout_s
        stats: dict[str, Any] = {}
        while time.monotonic() < deadline:
            self._check_alive()
            stats = self.stats()
            handled = stats["seen"] + sum(stats["invalid"].values())
            if handled >= produced and stats["lag"] == 0:
                return stats
            time.sleep(POLL_INTERVAL_S)
        raise TimeoutError(f"stream not drained after {timeout_s}s: {stats}")

    def _check_alive(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            raise RuntimeError(
                f"novikoff serve exited with {self._proc.returncode}; see {self.log_path}"
            )

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._proc is None:
            return
        terminate_process(self._proc, STOP_TIMEOUT_S)
        self._proc = None

    def __enter__(self) -> RunningService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def produce(bootstrap: str, topic: str, stream: Stream, log_path: Path) -> None:
    """Publish the stream with ``novikoff produce`` and wait for it to finish."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOVIKOFF_")}
    env["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
    env["NOVIKOFF_KAFKA__TOPIC"] = topic
    with open(log_path, "ab") as log:
        subprocess.run(
            novikoff_command("produce", *stream.produce_args()),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=True,
            timeout=PRODUCE_TIMEOUT_S,
        )
