"""The broker helpers that need no broker: ports, and the named cluster taking precedence."""

from __future__ import annotations

import pytest

from service.cli import broker
from service.settings import BOOTSTRAP_ENV_VAR


def test_a_free_port_has_no_listener() -> None:
    port = broker.free_port()
    with pytest.raises(TimeoutError, match=str(port)):
        broker.wait_for_port(broker.LOOPBACK, port, timeout_s=0.2)


def test_the_named_cluster_is_used_without_starting_a_broker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(BOOTSTRAP_ENV_VAR, " kafka-1:9092,kafka-2:9092 ")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("no broker may start when a cluster is named")

    monkeypatch.setattr(broker.EmbeddedBroker, "start", refuse)
    with broker.kafka_bootstrap() as bootstrap:
        assert bootstrap == "kafka-1:9092,kafka-2:9092"


@pytest.mark.parametrize("value", ["", "   "])
def test_a_blank_variable_names_no_cluster(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(BOOTSTRAP_ENV_VAR, value)
    assert broker.external_bootstrap() is None


def test_clients_are_told_the_advertised_port() -> None:
    embedded = broker.EmbeddedBroker(port=9001, advertised_port=9002)
    assert embedded.bootstrap == f"{broker.LOOPBACK}:9002"
    assert broker.EmbeddedBroker(port=9001).bootstrap == f"{broker.LOOPBACK}:9001"
