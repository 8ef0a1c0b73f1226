"""``novikoff broker`` as a real subprocess: the bootstrap line, a working broker, a clean stop on
SIGTERM and Ctrl-C, Apache Kafka's log kept across restarts, and a clear instruction when Apache
Kafka cannot run here."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.admin import NewTopic

from service.cli.brokers.distribution import CACHE_ENV_VAR, INSTALL_COMMAND, JAVA_HOME_ENV_VAR
from service.cli.brokers.net import LOOPBACK, accepts
from service.cli.main import BOOTSTRAP_LINE_PREFIX
from service.settings import BOOTSTRAP_ENV_VAR
from tests.support.broker import free_port

pytestmark = pytest.mark.integration

LINE_TIMEOUT_S = 120.0
EXIT_TIMEOUT_S = 60.0
CONSUME_TIMEOUT_MS = 30_000
RECORDS = 25
COMMITTED = 10


@dataclass
class BrokerCommand:
    """A running ``novikoff broker`` and the bootstrap line it printed."""

    proc: subprocess.Popen[str]
    bootstrap: str

    @property
    def port(self) -> int:
        return int(self.bootstrap.rsplit(":", 1)[1])

    def stop(self, signum: int = signal.SIGTERM) -> int:
        self.proc.send_signal(signum)
        return self.proc.wait(timeout=EXIT_TIMEOUT_S)


def broker_env(**overrides: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != BOOTSTRAP_ENV_VAR}
    env.update(overrides)
    return env


def first_line(proc: subprocess.Popen[str]) -> str:
    """The first stdout line, waiting at most ``LINE_TIMEOUT_S``; '' if the process ended."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout=LINE_TIMEOUT_S):
            raise AssertionError(f"no line within {LINE_TIMEOUT_S}s")
    return proc.stdout.readline()


@contextmanager
def novikoff_broker(*args: str, env: dict[str, str] | None = None) -> Iterator[BrokerCommand]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "broker", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env if env is not None else broker_env(),
    )
    try:
        line = first_line(proc)
        assert line.startswith(BOOTSTRAP_LINE_PREFIX), (line, proc.stderr and proc.stderr.read())
        yield BrokerCommand(proc, line.strip().removeprefix(BOOTSTRAP_LINE_PREFIX))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def create_topic(bootstrap: str, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        admin.close()


def topics(bootstrap: str) -> set[str]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for i in range(count):
            producer.send(topic, key=b"k%d" % i, value=b"v%d" % i)
        producer.flush()
    finally:
        producer.close()


def consume(bootstrap: str, topic: str, count: int, group: str | None = None) -> list[bytes]:
    """Up to ``count`` values from the start of ``topic``."""
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=CONSUME_TIMEOUT_MS,
    )
    try:
        values = []
        for record in consumer:
            values.append(record.value)
            if len(values) == count:
                break
        return values
    finally:
        consumer.close()


def commit(bootstrap: str, topic: str, group: str, offset: int) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    try:
        consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(offset, "", -1)})
    finally:
        consumer.close()


def committed(bootstrap: str, topic: str, group: str) -> int | None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    try:
        offset = consumer.committed(TopicPartition(topic, 0))
        return None if offset is None else int(offset)
    finally:
        consumer.close()


def test_apache_broker_prints_its_address_serves_and_stops_on_sigterm() -> None:
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    with novikoff_broker("--kind", "apache") as broker:
        assert broker.bootstrap.startswith(f"{LOOPBACK}:")
        create_topic(broker.bootstrap, topic)
        produce(broker.bootstrap, topic, RECORDS)
        assert consume(broker.bootstrap, topic, RECORDS) == [b"v%d" % i for i in range(RECORDS)]
        assert accepts(LOOPBACK, broker.port)  # control: the check below can fail
        assert broker.stop(signal.SIGTERM) == 0
        assert not accepts(LOOPBACK, broker.port)
        assert broker.proc.stdout is not None
        assert broker.proc.stdout.read() == ""  # exactly one line on stdout


def test_apache_broker_keeps_topics_records_and_offsets_across_restarts(tmp_path: Path) -> None:
    topic, group = f"kept-{uuid.uuid4().hex[:8]}", "kept-group"
    port = free_port()
    data = tmp_path / "kafka"
    with novikoff_broker("--port", str(port), "--data-dir", str(data)) as first:
        assert first.port == port
        create_topic(first.bootstrap, topic)
        produce(first.bootstrap, topic, RECORDS)
        commit(first.bootstrap, topic, group, COMMITTED)
        assert first.stop(signal.SIGINT) == 0  # Ctrl-C
    assert (data / "broker.log").stat().st_size > 0

    with novikoff_broker("--port", str(port), "--data-dir", str(data)) as again:
        assert topic in topics(again.bootstrap)
        assert consume(again.bootstrap, topic, RECORDS) == [b"v%d" % i for i in range(RECORDS)]
        assert committed(again.bootstrap, topic, group) == COMMITTED
        assert again.stop() == 0

    # Control: a new data directory on the same port has none of it.
    with novikoff_broker("--port", str(port), "--data-dir", str(tmp_path / "other")) as fresh:
        assert topic not in topics(fresh.bootstrap)
        assert fresh.stop() == 0


def test_a_temporary_data_directory_is_removed_at_exit(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    with novikoff_broker("--kind", "apache", env=broker_env(TMPDIR=str(scratch))) as broker:
        assert [p.name for p in scratch.iterdir() if p.name.startswith("novikoff-broker-")]
        assert broker.stop() == 0
    assert list(scratch.iterdir()) == []


def run_without_broker(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service", "broker", "--kind", "apache"],
        capture_output=True,
        text=True,
        env=env,
        timeout=EXIT_TIMEOUT_S,
        check=False,
    )


def test_missing_java_exits_non_zero_saying_what_to_run(tmp_path: Path) -> None:
    no_java = tmp_path / "bin"
    no_java.mkdir()
    env = broker_env(PATH=str(no_java))
    env.pop(JAVA_HOME_ENV_VAR, None)
    result = run_without_broker(env)
    assert result.returncode == 1, result.stderr
    assert "Java 17" in result.stderr
    assert "jars" not in result.stderr  # the jars are cached: only Java is named
    assert f"`{INSTALL_COMMAND}`" in result.stderr
    assert result.stdout == ""


def test_missing_jars_exit_non_zero_saying_what_to_run(tmp_path: Path) -> None:
    result = run_without_broker(broker_env(**{CACHE_ENV_VAR: str(tmp_path / "empty-cache")}))
    assert result.returncode == 1, result.stderr
    assert "jars" in result.stderr
    assert "Java 17" not in result.stderr  # java is here: only the jars are named
    assert f"`{INSTALL_COMMAND}`" in result.stderr
    assert result.stdout == ""


def test_tansu_broker_prints_its_address_serves_and_stops_on_ctrl_c() -> None:
    topic = f"tansu-{uuid.uuid4().hex[:8]}"
    with novikoff_broker("--kind", "tansu") as broker:
        create_topic(broker.bootstrap, topic)
        produce(broker.bootstrap, topic, RECORDS)
        assert consume(broker.bootstrap, topic, RECORDS) == [b"v%d" % i for i in range(RECORDS)]
        assert accepts(LOOPBACK, broker.port)
        assert broker.stop(signal.SIGINT) == 0
        assert not accepts(LOOPBACK, broker.port)


def test_tansu_refuses_a_data_directory(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "service", "broker", "--kind", "tansu", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=broker_env(),
        timeout=EXIT_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 2
    assert "memory only" in result.stderr
