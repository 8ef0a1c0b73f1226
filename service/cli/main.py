"""The ``novikoff`` command: ``serve``, ``produce``, ``fit``, ``demo`` and ``broker``."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from service.assembly import run_service
from service.cli import produce
from service.cli.broker import (
    BROKER_KINDS,
    BrokerKind,
    BrokerStartError,
    BrokerUnavailableError,
    make_broker,
)
from service.cli.brokers.net import LOOPBACK
from service.cli.demo import DemoOptions, run_demo
from service.cli.offline import fit_file
from service.cli.synthetic import SyntheticStream
from service.settings import ROLES, Settings, SettingsError, load_settings
from service.topics import ensure_topics

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

DEFAULT_SYNTHETIC_COUNT = 10_000
DEFAULT_EPOCHS = 10
DEFAULT_LABEL_COLUMN = "label"
DEFAULT_MARGIN = 0.1
DEFAULT_NOISE = 0.0
DEFAULT_SEED = 0
DEFAULT_MALFORMED = 0.0
DEFAULT_DEMO_RATE = 200.0
DEFAULT_DEMO_MALFORMED = 0.005
DEFAULT_DEMO_DIM = 10
DEFAULT_BROKER_KIND = "apache"
BROKER_LOG_NAME = "broker.log"
BOOTSTRAP_LINE_PREFIX = "KAFKA_BOOTSTRAP_SERVERS="
BROKER_WATCH_S = 1.0
KAFKA_CLIENT_LOGGER = "kafka"

DESCRIPTION = """\
novikoff learns a perceptron online from labelled events on a Kafka topic, serves predictions over
HTTP and tracks its mistakes against the perceptron mistake bounds."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    parser = argparse.ArgumentParser(prog="novikoff", description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_serve(commands)
    _add_produce(commands)
    _add_fit(commands)
    _add_demo(commands)
    _add_broker(commands)
    return parser


def _config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="TOML settings file (default: $NOVIKOFF_CONFIG, else built-in defaults; "
        "see config/default.toml)",
    )


def _label_column_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--label-column",
        default=DEFAULT_LABEL_COLUMN,
        help=f"CSV column holding the label (default: {DEFAULT_LABEL_COLUMN})",
    )


def _add_serve(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "serve",
        help="run the service: consume, learn, serve HTTP",
        description="Consume events from Kafka, learn online, and serve the HTTP API and "
        "metrics until SIGTERM or Ctrl-C (then checkpoint and stop).",
    )
    _config_option(parser)
    parser.add_argument("--host", help="override http.host")
    parser.add_argument("--port", type=int, help="override http.port (0 picks a free port)")
    parser.add_argument(
        "--role",
        choices=ROLES,
        help="override service.role: learner (consume and learn) or replica (follow the "
        "learner's model through the state topic and serve it; learns nothing)",
    )


def _add_stream_options(
    parser: argparse.ArgumentParser, *, dim: int | None, malformed: float
) -> None:
    """The synthetic stream's options; ``dim=None`` takes the config's ``model.dim``."""
    synthetic = parser.add_argument_group("synthetic stream")
    synthetic.add_argument(
        "--dim",
        type=int,
        default=dim,
        help="number of features "
        + ("(default: the config's model.dim)" if dim is None else f"(default {dim})"),
    )
    synthetic.add_argument(
        "--margin",
        type=float,
        default=DEFAULT_MARGIN,
        help=f"minimum normalised margin of the reference separator (default {DEFAULT_MARGIN})",
    )
    synthetic.add_argument(
        "--noise",
        type=float,
        default=DEFAULT_NOISE,
        help=f"fraction of labels flipped after sampling (default {DEFAULT_NOISE:g}: separable)",
    )
    synthetic.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help=f"random seed (default {DEFAULT_SEED})"
    )
    synthetic.add_argument(
        "--malformed",
        type=float,
        default=malformed,
        help=f"fraction of deliberately malformed records, for dead-letter demos "
        f"(default {malformed:g})",
    )


def _add_produce(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "produce",
        help="publish a labelled stream (synthetic, Iris or a file)",
        description="Publish labelled events to the configured topic (or write them as JSON "
        "lines). The synthetic stream is labelled by a known reference separator; "
        "--print-reference prints it in the [[bound.references]] format.",
    )
    _config_option(parser)
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--synthetic", action="store_true", help="synthetic stream (the default source)"
    )
    source.add_argument("--iris", action="store_true", help="Fisher's Iris data (scikit-learn)")
    source.add_argument("--file", type=Path, metavar="PATH", help="a .csv or .jsonl file")
    _label_column_option(parser)
    parser.add_argument(
        "--count",
        type=int,
        help=f"records to publish (synthetic default {DEFAULT_SYNTHETIC_COUNT:,}; "
        "Iris default 150, repeating beyond; files: all)",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="records per second (default 0: as fast as possible)",
    )
    parser.add_argument("--topic", help="topic to publish to (default: the config's kafka.topic)")
    parser.add_argument(
        "--partitions",
        type=int,
        default=0,
        help="create the topic (and its dead-letter topic) with this many partitions if missing",
    )
    parser.add_argument(
        "--output",
        metavar="FILE",
        help="write JSON lines to FILE ('-' for stdout) instead of Kafka",
    )
    parser.add_argument(
        "--print-reference",
        action="store_true",
        help="print the synthetic reference separator as TOML and exit",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_stream_options(parser, dim=None, malformed=DEFAULT_MALFORMED)


def _add_fit(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "fit",
        help="train offline on a file, epoch by epoch",
        description="Run the same perceptron offline over a .csv or .jsonl file for several "
        "epochs, printing the updates (mistakes) of each epoch and the final weights. Events are "
        "decoded exactly as the service decodes them; invalid ones are counted and skipped.",
    )
    _config_option(parser)
    parser.add_argument("file", type=Path, help="a .csv or .jsonl file of events")
    parser.add_argument(
        "--epochs",
        type=int,
        default=DEFAULT_EPOCHS,
        help="maximum epochs; stops early after an epoch without updates "
        f"(default {DEFAULT_EPOCHS})",
    )
    parser.add_argument(
        "--shuffle-seed", type=int, help="shuffle each epoch with this seed (default: file order)"
    )
    _label_column_option(parser)


def _add_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "demo",
        help="embedded broker + service + synthetic producer, all in one",
        description="Start an embedded Tansu broker on a free loopback port (or use "
        "$KAFKA_BOOTSTRAP_SERVERS), create the topics, start the service and a synthetic "
        "producer whose reference separator is tracked by the bound, and print the URLs. "
        "Ctrl-C or SIGTERM stops everything.",
    )
    _config_option(parser)
    parser.add_argument("--port", type=int, help="HTTP port (default: the config's http.port)")
    parser.add_argument(
        "--rate",
        type=float,
        default=DEFAULT_DEMO_RATE,
        help=f"events per second (default {DEFAULT_DEMO_RATE:g})",
    )
    parser.add_argument(
        "--count", type=int, help="stop producing after this many events (default: never)"
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="checkpoint directory (default: a temporary directory removed on exit)",
    )
    _add_stream_options(parser, dim=DEFAULT_DEMO_DIM, malformed=DEFAULT_DEMO_MALFORMED)


def _add_broker(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "broker",
        help="run a development Kafka broker in the foreground",
        description="Start a single-node broker on loopback and print one line, "
        f"{BOOTSTRAP_LINE_PREFIX}{LOOPBACK}:PORT, once it accepts connections. "
        "SIGTERM or Ctrl-C stops it. Apache Kafka needs Java 17 and its jars "
        "(`make kafka-deps`).",
    )
    parser.add_argument(
        "--kind",
        choices=BROKER_KINDS,
        default=DEFAULT_BROKER_KIND,
        help=f"apache: Apache Kafka, KRaft, data on disk; tansu: embedded Tansu, memory only "
        f"(default {DEFAULT_BROKER_KIND})",
    )
    parser.add_argument("--port", type=int, help="port to listen on (default: a free one)")
    parser.add_argument(
        "--data-dir",
        type=Path,
        metavar="DIR",
        help="Apache Kafka's storage, kept across restarts, and its log "
        f"({BROKER_LOG_NAME}) (default: a temporary directory removed on exit)",
    )


# -- commands --------------------------------------------------------------------------------


def _settings(args: argparse.Namespace, **overrides: object) -> Settings:
    return load_settings(args.config, **{k: v for k, v in overrides.items() if v})


def cmd_serve(args: argparse.Namespace) -> int:
    """``novikoff serve``."""
    http = {
        key: value for key, value in (("host", args.host), ("port", args.port)) if value is not None
    }
    service = {"role": args.role} if args.role is not None else {}
    settings = _settings(args, http=http, service=service)
    return run_service(settings)


def cmd_produce(args: argparse.Namespace) -> int:
    """``novikoff produce``."""
    settings = _settings(args)
    named = settings.model.encoding != "dense"
    if args.print_reference or not (args.iris or args.file):
        dim = args.dim or settings.model.dim
        stream = SyntheticStream(
            dim=dim,
            margin=args.margin,
            noise=args.noise,
            seed=args.seed,
            malformed=args.malformed,
            bias=settings.model.bias,
        )
        if args.print_reference:
            print(reference_toml("synthetic", stream.reference.tolist()))
            return EXIT_OK
        count = args.count if args.count is not None else DEFAULT_SYNTHETIC_COUNT
        records: Iterator[tuple[str, bytes]] = stream.records(count)
        total: int | None = count
    elif args.iris:
        records = produce.iris_records(args.count, args.seed, named)
        total = args.count or produce.IRIS_FLOWERS
    else:
        records = produce.limited(
            produce.file_records(args.file, named, args.label_column), args.count
        )
        total = args.count
    topic = args.topic or settings.kafka.topic
    if args.output:
        sink: produce.Sink = produce.FileSink(args.output)
    else:
        if args.partitions:
            dlq = settings.kafka.dlq_topic or f"{topic}.dlq"
            ensure_topics(settings.kafka, [topic, dlq], args.partitions)
        sink = produce.KafkaSink(settings.kafka, topic)
    progress = produce.Progress(total, enabled=not args.no_progress and args.output != "-")
    try:
        sent = produce.pump(records, sink, rate=args.rate or None, progress=progress)
    finally:
        failed = sink.close()
        progress.finish()
    where = args.output or f"topic {topic}"
    print(f"published {sent - failed:,} records to {where}", file=sys.stderr)
    if failed:
        print(f"{failed:,} records could not be delivered", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def reference_toml(name: str, weights: Sequence[float]) -> str:
    """A ``[[bound.references]]`` table for ``weights``."""
    numbers = ", ".join(repr(float(w)) for w in weights)
    return f'[[bound.references]]\nname = "{name}"\nweights = [{numbers}]'


def cmd_fit(args: argparse.Namespace) -> int:
    """``novikoff fit``."""
    settings = _settings(args)
    return fit_file(
        settings,
        args.file,
        epochs=args.epochs,
        shuffle_seed=args.shuffle_seed,
        label_column=args.label_column,
    )


def cmd_demo(args: argparse.Namespace) -> int:
    """``novikoff demo``."""
    options = DemoOptions(
        config=args.config,
        port=args.port,
        rate=args.rate,
        count=args.count,
        dim=args.dim,
        margin=args.margin,
        noise=args.noise,
        malformed=args.malformed,
        seed=args.seed,
        state_dir=args.state_dir,
    )
    return run_demo(options)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def cmd_broker(args: argparse.Namespace) -> int:
    """``novikoff broker``: runs until SIGTERM or Ctrl-C, then stops the broker (exit 0)."""
    if args.kind == "tansu":
        if args.data_dir is not None:
            print(
                "novikoff broker: Tansu keeps its data in memory only; --data-dir needs "
                "--kind apache",
                file=sys.stderr,
            )
            return EXIT_USAGE
        return _run_broker(args.kind, args.port, None)
    if args.data_dir is not None:
        return _run_broker(args.kind, args.port, args.data_dir)
    with tempfile.TemporaryDirectory(prefix="novikoff-broker-") as scratch:
        return _run_broker(args.kind, args.port, Path(scratch))


def _run_broker(kind: BrokerKind, port: int | None, data_dir: Path | None) -> int:
    """Start the broker, print the bootstrap line, wait for SIGTERM or Ctrl-C, stop it."""
    log_path = data_dir / BROKER_LOG_NAME if data_dir is not None else None
    # The readiness probe's client logs every connection step at INFO.
    logging.getLogger(KAFKA_CLIENT_LOGGER).setLevel(logging.WARNING)
    try:
        broker = make_broker(kind, port=port, data_dir=data_dir, log_path=log_path)
    except BrokerUnavailableError as exc:
        print(f"novikoff broker: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    # SIGTERM takes Ctrl-C's path, so a signal during start-up stops the broker too.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        broker.start()
        print(f"{BOOTSTRAP_LINE_PREFIX}{broker.bootstrap}", flush=True)
        print(f"novikoff broker: {broker.description}, log: {log_path}", file=sys.stderr)
        while broker.running:
            time.sleep(BROKER_WATCH_S)
        print("novikoff broker: the broker exited by itself", file=sys.stderr)
        return EXIT_FAILURE
    except BrokerStartError as exc:
        print(f"novikoff broker: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        broker.stop()


COMMANDS = {
    "serve": cmd_serve,
    "produce": cmd_produce,
    "fit": cmd_fit,
    "demo": cmd_demo,
    "broker": cmd_broker,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``novikoff`` script."""
    args = build_parser().parse_args(argv)
    if args.command != "serve":
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        return COMMANDS[args.command](args)
    except SettingsError as exc:
        print(f"novikoff {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except produce.SourceError as exc:
        print(f"novikoff {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_FAILURE
