"""Topics novikoff creates get the configured replication factor, else the broker's default."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient
from kafka.errors import InvalidReplicationFactorError

from service.settings import load_settings
from service.topics import ensure_topics

pytestmark = pytest.mark.integration


def replicas(bootstrap: str, topic: str) -> int:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        (described,) = admin.describe_topics([topic])
    finally:
        admin.close()
    return len(described["partitions"][0]["replica_nodes"])


def test_unset_replication_factor_takes_the_brokers_default(
    kafka_bootstrap: str, topic_name: str
) -> None:
    kafka = load_settings(kafka={"bootstrap_servers": kafka_bootstrap}).kafka
    assert kafka.replication_factor is None
    assert ensure_topics(kafka, [topic_name], partitions=2) == [topic_name]
    assert replicas(kafka_bootstrap, topic_name) == 1
    assert ensure_topics(kafka, [topic_name]) == [], "an existing topic is left alone"


def test_an_explicit_replication_factor_reaches_the_broker(
    kafka_bootstrap: str, topic_name: str
) -> None:
    one = load_settings(kafka={"bootstrap_servers": kafka_bootstrap, "replication_factor": 1}).kafka
    assert ensure_topics(one, [topic_name]) == [topic_name]
    assert replicas(kafka_bootstrap, topic_name) == 1
    # Control: the factor is really sent; one broker cannot hold three replicas.
    three = load_settings(
        kafka={"bootstrap_servers": kafka_bootstrap, "replication_factor": 3}
    ).kafka
    with pytest.raises(InvalidReplicationFactorError):
        ensure_topics(three, [f"{topic_name}-three"])
