"""The consumer through a broker outage: not ready with a reason, no busy loop, reconnects alone.

The broker is reached through a TCP proxy (``tests/support/proxy.py``) that the test cuts for a
while, which to the client is exactly a dead broker.
"""

from __future__ import annotations

import resource
import time
from pathlib import Path

import pytest

from tests.integration.test_consumer_kafka import (
    create_topic,
    event,
    make_harness,
    produce,
)
from tests.support.broker import ApacheBrokerFactory, free_port
from tests.support.proxy import FaultProxy

pytestmark = pytest.mark.integration

OUTAGE_S = 8.0
MAX_CPU_SHARE_WHILE_DOWN = 0.25


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def test_consumer_reports_the_outage_and_reconnects(
    tmp_path: Path, apache_broker_factory: ApacheBrokerFactory
) -> None:
    proxy_port = free_port()
    broker = apache_broker_factory(advertised_port=proxy_port)
    proxy = FaultProxy(listen_port=proxy_port, target_port=broker.port)
    with proxy, broker:
        bootstrap = broker.bootstrap
        topic = "outage-events"
        create_topic(bootstrap, topic)
        produce(bootstrap, topic, [event([float(i % 5)], 1 if i % 2 else -1) for i in range(100)])
        harness = make_harness(bootstrap, topic, tmp_path, dim=1)
        harness.runner.start()
        try:
            harness.wait_for_records(100)
            harness.wait_for(lambda: harness.runner.connected)

            proxy.cut()
            harness.wait_for(lambda: not harness.runner.connected, timeout=30)
            reason = harness.runner.not_ready_reason
            assert reason
            cpu_before, wall_before = _cpu_seconds(), time.monotonic()
            time.sleep(OUTAGE_S)
            cpu_share = (_cpu_seconds() - cpu_before) / (time.monotonic() - wall_before)
            assert harness.runner.running
            assert not harness.runner.connected
            assert cpu_share < MAX_CPU_SHARE_WHILE_DOWN, f"busy loop: {cpu_share:.0%} CPU"
            assert harness.engine.snapshot.seen == 100  # the model is still served

            proxy.restore()
            harness.wait_for(lambda: harness.runner.connected, timeout=60)
            produce(bootstrap, topic, [event([1.0], 1)] * 10)
            harness.wait_for_records(110)
            (progress,) = harness.engine.snapshot.partitions
            assert progress.applied == ((0, 110),)
        finally:
            harness.runner.stop(timeout=30)
