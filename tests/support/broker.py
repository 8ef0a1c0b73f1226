"""Real Kafka-protocol brokers for tests, started through the service's own code
(:mod:`service.cli.broker`): Apache Kafka (KRaft, one node, data on disk) for the suite, Tansu (the
embedded broker of ``novikoff demo``) for the smoke subset, or the cluster named by
``KAFKA_BOOTSTRAP_SERVERS``.

Apache Kafka keeps its log on disk, so a broker killed with SIGKILL and restarted on its data
directory and port gives back its topics, records and committed offsets
(:class:`ApacheBrokerFactory`). Outage tests can also cut the network path instead
(``tests/support/proxy.py``) and keep the broker running.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from service.cli.broker import (
    ApacheKafkaBroker,
    external_bootstrap,
    free_port,
    kafka_bootstrap,
    wait_for_port,
)
from service.cli.broker import EmbeddedBroker as TansuBroker

__all__ = [
    "ApacheBrokerFactory",
    "ApacheKafkaBroker",
    "TansuBroker",
    "external_bootstrap",
    "free_port",
    "kafka_bootstrap",
    "session_broker",
    "wait_for_port",
]

KAFKA_ARTIFACTS = "kafka"
SESSION_DATA = "session-data"
SESSION_LOG = "session-broker.log"
UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


def session_broker(artifacts_dir: Path) -> ApacheKafkaBroker:
    """The test session's Apache Kafka broker (not started): fresh storage and a fresh log under
    ``test-artifacts/kafka/``."""
    directory = artifacts_dir / KAFKA_ARTIFACTS
    shutil.rmtree(directory / SESSION_DATA, ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / SESSION_LOG
    log.unlink(missing_ok=True)
    return ApacheKafkaBroker(directory / SESSION_DATA, log)


class ApacheBrokerFactory:
    """Dedicated Apache Kafka brokers for one test, for faults the shared broker must not see
    (SIGKILL, restarts). Data under the test's ``tmp_path``, logs under
    ``test-artifacts/kafka/``; :meth:`close` stops every broker made.
    """

    def __init__(self, tmp_path: Path, artifacts_dir: Path, test_name: str) -> None:
        self._tmp_path = tmp_path
        self._logs = artifacts_dir / KAFKA_ARTIFACTS
        self._test = UNSAFE_FILE_CHARS.sub("_", test_name)
        self._brokers: list[ApacheKafkaBroker] = []

    def __call__(
        self, name: str = "broker", *, advertised_port: int | None = None
    ) -> ApacheKafkaBroker:
        """A new broker (not started) with its own data directory; ``advertised_port`` when
        clients reach it through a proxy."""
        self._logs.mkdir(parents=True, exist_ok=True)
        log = self._logs / f"{self._test}-{name}.log"
        log.unlink(missing_ok=True)
        broker = ApacheKafkaBroker(
            self._tmp_path / f"kafka-{name}", log, advertised_port=advertised_port
        )
        self._brokers.append(broker)
        return broker

    def close(self) -> None:
        for broker in self._brokers:
            broker.stop()
