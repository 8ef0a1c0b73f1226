from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import broker

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """Where tests leave screenshots and logs for a person to look at."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def kafka_bootstrap(artifacts_dir: Path) -> Iterator[str]:
    """A real broker: ``KAFKA_BOOTSTRAP_SERVERS`` when set, else an embedded Tansu."""
    with broker.kafka_bootstrap(artifacts_dir / "tansu.log") as bootstrap:
        yield bootstrap


@pytest.fixture
def topic_name() -> str:
    """A fresh topic name per test, so tests sharing a broker never see each other's events."""
    return f"events-{uuid.uuid4().hex[:10]}"
