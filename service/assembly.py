"""Wiring: settings → registry, metrics, model, engine, consumer runner, HTTP app, one process.

:func:`build_service` builds everything from the one settings object; :class:`Service` runs the
consumer thread and uvicorn in this process; :func:`run_service` adds the signal handling of
``novikoff serve``: SIGTERM or Ctrl-C stop the HTTP server and the consumer within the shutdown
deadline, and the consumer writes its final checkpoint and commits before the process exits.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import Protocol

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from consumers.engine import Engine
from consumers.engine_state import IncompatibleCheckpointError
from consumers.kafka_clients import RunnerSettings
from consumers.mixing.options import MixingOptions
from consumers.mixing.runner import MixingRunner
from consumers.runner import ConsumerRunner
from consumers.state.checkpoint import CheckpointStore
from consumers.transactions import TransactionSettings, transaction_timeout_ms
from learning.mixing import DistributedBound
from service.http.app import create_app
from service.http.server import HttpServer
from service.model import ReferenceError, build_learner, build_tracker
from service.observability.logs import configure_logging
from service.observability.metrics import Metrics
from service.replica import Replica
from service.settings import Settings
from service.topics import ensure_contributions_topic, ensure_state_topic

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILURE = 1
SUPERVISE_INTERVAL_S = 0.5
HTTP_SHARE_OF_DEADLINE = 0.5
"""uvicorn gets at most this share of the deadline for in-flight requests."""
CONSUMER_SHARE_OF_DEADLINE = 0.8
"""The consumer's own stop deadline (last batch, final checkpoint, commit, close); both stop in
parallel, and the rest of the deadline is margin for the threads to end."""


class StartupError(RuntimeError):
    """The service cannot start (bad reference file, unreadable checkpoint directory...)."""


class Worker(Protocol):
    """The thread beside the HTTP server: the consumer runner, or a replica's state follower."""

    @property
    def running(self) -> bool: ...

    def start(self) -> None: ...

    def stop(self, timeout: float | None = None) -> bool: ...

    def join(self, timeout: float | None = None) -> bool: ...


@dataclass
class Service:
    """Everything the process runs, built from one settings object."""

    settings: Settings
    registry: CollectorRegistry
    metrics: Metrics
    engine: Engine
    runner: Worker
    app: FastAPI
    http: HttpServer

    @property
    def url(self) -> str:
        """Base URL of the HTTP API."""
        return self.http.url

    @property
    def running(self) -> bool:
        """Whether both the HTTP server and the worker (consumer or follower) still run."""
        return self.http.running and self.runner.running

    def start(self) -> None:
        """Start the consumer thread, then the HTTP server; return once both run."""
        self.runner.start()
        try:
            self.http.start()
        except Exception:
            self.runner.stop()
            self.runner.join(self.settings.service.shutdown_deadline_seconds)
            raise

    def stop(self, deadline_s: float | None = None) -> bool:
        """Stop serving and consuming within ``deadline_s``; return whether all stopped in time.

        Both are asked to stop at once: uvicorn finishes in-flight requests while the consumer
        finishes its batch, writes the final checkpoint and commits offsets.
        """
        deadline_s = deadline_s or self.settings.service.shutdown_deadline_seconds
        start = time.monotonic()
        self.http.request_stop()
        self.runner.stop()
        http_done = self.http.join(deadline_s * HTTP_SHARE_OF_DEADLINE)
        runner_done = self.runner.join(max(0.0, deadline_s - (time.monotonic() - start)))
        elapsed = time.monotonic() - start
        if http_done and runner_done:
            logger.info("stopped cleanly in %.2fs", elapsed)
        else:
            logger.error(
                "did not stop within %.1fs (http stopped: %s, consumer stopped: %s)",
                deadline_s,
                http_done,
                runner_done,
            )
        return http_done and runner_done


def build_service(settings: Settings, registry: CollectorRegistry | None = None) -> Service:
    """Build the whole service from ``settings`` (nothing runs until :meth:`Service.start`).

    Raises
    ------
    StartupError
        When a reference separator or the checkpoint cannot be loaded.
    """
    registry = registry if registry is not None else CollectorRegistry()
    metrics = Metrics(registry)
    learner = build_learner(settings.model)
    try:
        tracker = build_tracker(settings, learner.encoder.dimension)
    except ReferenceError as exc:
        raise StartupError(str(exc)) from None
    engine = Engine(learner, tracker, observer=metrics)
    runner: Worker
    if settings.service.role == "replica":
        # A replica's model comes from Kafka only: no checkpoint, no events consumer. In mixing
        # mode it follows the contributions topic, otherwise the state topic.
        follower = (
            build_mixing_runner(settings, engine, metrics) if settings.mixing.enabled else None
        )
        replica = Replica(settings, engine, metrics, mixing=follower)
        runner = replica.follower
        app = create_app(settings, replica, replica, metrics)
    elif settings.mixing.enabled:
        # Mixing mode: the model lives in the contributions topic; no local checkpoint.
        mixing = build_mixing_runner(settings, engine, metrics)
        runner = mixing
        app = create_app(settings, engine, mixing, metrics)
    else:
        try:
            store = CheckpointStore(settings.checkpoint.path)
            engine.restore(store)
        except (IncompatibleCheckpointError, OSError) as exc:
            raise StartupError(f"checkpoint {settings.checkpoint.path}: {exc}") from None
        options = runner_settings(settings)
        consumer = ConsumerRunner(
            engine,
            store,
            options,
            fault_observer=metrics,
            ensure_state_topic=lambda: ensure_state_topic(settings.kafka),
        )
        runner = consumer
        app = create_app(settings, engine, consumer, metrics)
    metrics.follow(lambda: engine.snapshot)
    http = HttpServer(
        app,
        settings.http.host,
        settings.http.port,
        graceful_timeout_s=settings.service.shutdown_deadline_seconds * HTTP_SHARE_OF_DEADLINE,
        access_log=settings.http.access_log,
        ssl_options=settings.http.uvicorn_ssl_options(),
    )
    return Service(settings, registry, metrics, engine, runner, app, http)


def build_mixing_runner(settings: Settings, engine: Engine, metrics: Metrics) -> MixingRunner:
    """The mixing-mode worker (``[mixing] round_events > 0``); a replica's learns nothing."""
    template = engine.tracker
    return MixingRunner(
        engine,
        runner_settings(settings),
        MixingOptions(
            round_events=settings.mixing.round_events,
            round_seconds=settings.mixing.round_seconds,
            contributions_topic=settings.mixing.contributions_topic_name(settings.kafka.topic),
        ),
        lambda: build_learner(settings.model),
        lambda partitions: DistributedBound(
            [reference.name for reference in template.references],
            partitions,
            gamma_grid=template.gamma_grid,
            multiclass=template.multiclass,
        ),
        ensure_topics=lambda: ensure_contributions_topic(settings),
        learns=settings.service.role != "replica",
        fault_observer=metrics,
        refusal_observer=metrics,
    )


def transaction_settings(settings: Settings) -> TransactionSettings | None:
    """Exactly-once settings (``None`` when ``[kafka] transactions`` is off)."""
    if not settings.kafka.transactions:
        return None
    return TransactionSettings(
        state_topic=settings.kafka.state_topic_name,
        model_id=settings.kafka.topic,
        max_record_bytes=settings.kafka.state_record_max_bytes,
        transaction_timeout_ms=transaction_timeout_ms(settings.checkpoint.every_seconds),
        warm_standby=settings.kafka.warm_standby,
    )


def runner_settings(settings: Settings) -> RunnerSettings:
    """The consumer runner's settings from the service's."""
    return RunnerSettings(
        transactions=transaction_settings(settings),
        topic=settings.kafka.topic,
        consumer_config=settings.kafka.consumer_config(),
        producer_config=settings.kafka.producer_config(),
        dlq_topic=settings.kafka.dead_letter_topic,
        poll_timeout_ms=settings.kafka.poll_timeout_ms,
        missing_topic_grace_seconds=settings.kafka.missing_topic_grace_seconds,
        checkpoint_every_events=settings.checkpoint.every_events,
        checkpoint_every_seconds=settings.checkpoint.every_seconds,
        shutdown_deadline_seconds=settings.service.shutdown_deadline_seconds
        * CONSUMER_SHARE_OF_DEADLINE,
    )


def run_service(settings: Settings) -> int:
    """``novikoff serve``: run until SIGTERM or SIGINT, then stop cleanly; return the exit code."""
    configure_logging(settings.logging)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logger.info("received %s; stopping", signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            service = build_service(settings)
            service.start()
        except (StartupError, OSError, RuntimeError) as exc:
            logger.error("cannot start: %s", exc)
            return EXIT_FAILURE
        source = (
            f"following {settings.kafka.state_topic_name}"
            if settings.service.role == "replica"
            else f"consuming {settings.kafka.topic}"
        )
        logger.info(
            "novikoff %s serving %s, %s from %s",
            settings.service.role,
            service.url,
            source,
            settings.kafka.bootstrap_servers,
        )
        while not stop.wait(SUPERVISE_INTERVAL_S):
            if not service.running:
                logger.error("a component stopped unexpectedly; shutting down")
                service.stop()
                return EXIT_FAILURE
        return EXIT_OK if service.stop() else EXIT_FAILURE
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
