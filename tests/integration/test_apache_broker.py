"""The Apache Kafka broker the suite runs on (:class:`service.cli.broker.ApacheKafkaBroker`): no
topic is created by a metadata request, a SIGKILL then a restart on the same port and data directory
gives back every topic, record and committed offset, and clients can reach it through a proxy
whose port it advertises."""

from __future__ import annotations

import os
import signal
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError

from service.cli.brokers.net import LOOPBACK, accepts
from tests.support.broker import ApacheBrokerFactory, free_port
from tests.support.proxy import FaultProxy

pytestmark = pytest.mark.integration

RECORDS = 40
COMMITTED = 17
CONSUME_TIMEOUT_MS = 30_000


def read_all(bootstrap: str, topic: str) -> list[bytes]:
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=CONSUME_TIMEOUT_MS,
    )
    try:
        values = []
        for record in consumer:
            values.append(record.value)
            if len(values) == RECORDS:
                break
        return values
    finally:
        consumer.close()


def test_sigkill_and_restart_keep_topics_records_and_offsets(
    apache_broker_factory: ApacheBrokerFactory,
) -> None:
    broker = apache_broker_factory().start()
    port, topic, group = broker.port, f"crash-{uuid.uuid4().hex[:8]}", "crash-group"
    partition = TopicPartition(topic, 0)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    for i in range(RECORDS):
        producer.send(topic, value=b"r%d" % i)
    producer.flush()
    producer.close()
    committer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group)
    committer.commit({partition: OffsetAndMetadata(COMMITTED, "", -1)})
    committer.close()

    pid = broker.pid
    assert pid is not None
    broker.kill()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, signal.SIG_DFL)  # gone: no clean shutdown happened
    assert not accepts(LOOPBACK, port)

    broker.start()
    assert broker.port == port
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert topic in admin.list_topics()
    finally:
        admin.close()
    assert read_all(broker.bootstrap, topic) == [b"r%d" % i for i in range(RECORDS)]
    reader = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group)
    try:
        assert reader.committed(partition) == COMMITTED
    finally:
        reader.close()


def test_metadata_requests_create_no_topic(apache_broker_factory: ApacheBrokerFactory) -> None:
    broker = apache_broker_factory().start()
    missing, created = f"missing-{uuid.uuid4().hex[:8]}", f"made-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(created, 1, 1)])
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
        try:
            assert not consumer.partitions_for_topic(missing)  # a metadata request for it
            assert consumer.partitions_for_topic(created) == {0}  # control
        finally:
            consumer.close()
        assert missing not in admin.list_topics()
        assert created in admin.list_topics()
    finally:
        admin.close()


def test_clients_reach_an_advertised_proxy_port(apache_broker_factory: ApacheBrokerFactory) -> None:
    proxy_port = free_port()
    broker = apache_broker_factory(advertised_port=proxy_port).start()  # before its proxy runs
    assert broker.bootstrap == f"{LOOPBACK}:{proxy_port}"
    topic = f"proxied-{uuid.uuid4().hex[:8]}"
    with FaultProxy(listen_port=proxy_port, target_port=broker.port) as proxy:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            admin.create_topics([NewTopic(topic, 1, 1)])
        finally:
            admin.close()
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        producer.send(topic, value=b"through the proxy")
        producer.flush()
        producer.close()
        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            auto_offset_reset="earliest",
            consumer_timeout_ms=CONSUME_TIMEOUT_MS,
        )
        try:
            assert next(consumer).value == b"through the proxy"
        finally:
            consumer.close()
        proxy.cut()  # control: with the path cut, the advertised address answers nothing
        with pytest.raises(KafkaError):
            KafkaAdminClient(bootstrap_servers=broker.bootstrap, bootstrap_timeout_ms=2000)
