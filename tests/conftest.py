from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support import broker

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
HYPOTHESIS_PROFILE = "novikoff"


def pytest_configure(config: pytest.Config) -> None:
    """Hypothesis without its per-example deadline: tests never assert speed (benchmarks under
    bench/ measure it), and a first example that compiles or loads a numba kernel on a loaded
    machine would otherwise fail a correct property."""
    settings.register_profile(HYPOTHESIS_PROFILE, deadline=None)
    settings.load_profile(HYPOTHESIS_PROFILE)


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """Where tests leave screenshots and logs for a person to look at."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def kafka_bootstrap(artifacts_dir: Path) -> Iterator[str]:
    """A real broker: ``KAFKA_BOOTSTRAP_SERVERS`` when set, else one Apache Kafka for the whole
    session (storage and log under ``test-artifacts/kafka/``)."""
    external = broker.external_bootstrap()
    if external:
        yield external
        return
    with broker.session_broker(artifacts_dir) as apache:
        yield apache.bootstrap


@pytest.fixture(scope="session")
def tansu_bootstrap(artifacts_dir: Path) -> Iterator[str]:
    """The embedded Tansu of ``novikoff demo``, for the smoke subset that keeps it covered."""
    with broker.TansuBroker(artifacts_dir / "tansu.log") as tansu:
        yield tansu.bootstrap


@pytest.fixture
def apache_broker_factory(
    tmp_path: Path, artifacts_dir: Path, request: pytest.FixtureRequest
) -> Iterator[broker.ApacheBrokerFactory]:
    """Makes dedicated, restartable Apache Kafka brokers for one test; stops them after it."""
    factory = broker.ApacheBrokerFactory(tmp_path, artifacts_dir, request.node.name)
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture
def topic_name() -> str:
    """A fresh topic name per test, so tests sharing a broker never see each other's events."""
    return f"events-{uuid.uuid4().hex[:10]}"
