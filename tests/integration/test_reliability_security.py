"""Security: loopback by default, no state-changing endpoint, limits that hold (an oversized body
refused before it is read), and Kafka SASL/TLS settings that really reach the client, which
refuses a broker certificate from another CA. The checkpoint loader is in
``test_reliability_security_checkpoints``.

No HTTP endpoint changes state (``POST /predict`` only reads a snapshot and never grows a
vocabulary): :func:`test_no_endpoint_changes_state` pins the set of operations and requires every
non-GET one to need a token scope (``service.http.auth.guard.ROUTE_SCOPES``), so any new non-GET
route fails it until it is given token protection and a test. Token checks per route are in
``tests/unit/service/test_auth_routes.py``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from kafka import KafkaConsumer, KafkaProducer

from service.assembly import runner_settings
from service.http.auth.guard import ROUTE_SCOPES
from service.settings import Settings, load_settings
from service.topics import ensure_topics
from tests.support.faults import ConfiguredStream, FaultyService
from tests.support.ledger import Planned, publish, record_figures
from tests.support.raw_http import (
    CHUNKED_HEAD,
    LAST_PAYLOAD,
    chunk,
    chunked,
    declared_head,
    flood,
    reset_peak_rss,
    rss_bytes,
    send_then_wait,
    transient_buffer_shows_in_peak_rss,
)
from tests.support.tls import Certificates, TlsListener, make_certificates

pytestmark = pytest.mark.integration

LOOPBACK_HEX = "0100007F"
LISTEN_STATE = "0A"
READ_ONLY_METHODS = {"get", "head"}
VOCABULARY_TOML = (
    '[model]\nvariant = "binary"\nencoding = "vocabulary"\nbias = true\n'
    "max_features_per_event = 32\n"
)
LIMITS_TOML = "[http]\nmax_body_bytes = 65536\nmax_batch_size = 16\n"
MAX_BODY = 65_536
MAX_BATCH = 16
MAX_FEATURES = 32
HUGE_BODY_BYTES = 50 * 1024 * 1024
CHUNK = 64 * 1024
SMALL_CHUNK = 4096
"""The chunk size for counting how far past the limit a chunked body got before its 413."""
MAX_PEAK_RSS_GROWTH_BYTES = 4 * 1024 * 1024
"""Peak resident growth allowed while refusing 50 MB bodies (measured: 0.2-0.8 MB); buffering
one such body would need 50 MB."""
TLS_TIMEOUT_S = 30.0
TLS_POLL_S = 0.1
TEST_CA = "novikoff-test-ca"
OTHER_CA = "another-ca"
REFUSED_ATTEMPTS = 2
"""Handshakes the client must abort: the first attempt and a reconnection after it."""
UNKNOWN_CA_ALERT = "TLSV1_ALERT_UNKNOWN_CA"
"""What the server sees when the client does not trust its certificate's issuer."""
API_VERSIONS_KEY = b"\x00\x12"
"""The api_key of ApiVersions (18), a Kafka client's first request, after the 4-byte size."""


# -- a service with a vocabulary model and small limits -------------------------------------------


@pytest.fixture(scope="module")
def vocabulary_service(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FaultyService]:
    workdir = tmp_path_factory.mktemp("security")
    topic = f"security-{os.urandom(5).hex()}"
    settings = load_settings(kafka={"bootstrap_servers": kafka_bootstrap})
    ensure_topics(settings.kafka, [topic, f"{topic}.dlq"])
    events = [
        Planned(
            f"v-{i}",
            json.dumps(
                {"features": {f"f{i % 7}": 1.0, "bias_free": -0.5}, "label": 1 if i % 2 else -1}
            ).encode(),
            0,
        )
        for i in range(40)
    ]
    publish(kafka_bootstrap, topic, events)
    service = FaultyService(
        workdir=workdir,
        bootstrap=kafka_bootstrap,
        topic=topic,
        stream=ConfiguredStream(model_toml=VOCABULARY_TOML, extra_toml=LIMITS_TOML),
        log_path=workdir / "serve.log",
    )
    try:
        service.start()
        service.wait_for("learned", lambda s: s["seen"] == len(events), 60.0)
        yield service
    finally:
        service.stop()


class DefaultHostService(FaultyService):
    """A service whose config and environment leave ``http.host`` at its default."""

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env.pop("NOVIKOFF_HTTP__HOST", None)
        return env


def listening_sockets(pid: int) -> list[tuple[str, int]]:
    """(hex address, port) of every TCP socket the process listens on (IPv4 and IPv6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            address, port = fields[1].split(":")
            if fields[3] == LISTEN_STATE and fields[9] in inodes:
                found.append((address, int(port, 16)))
    return found


def test_the_api_binds_loopback_unless_configured_otherwise(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path, artifacts_dir: Path
) -> None:
    assert Settings().http.host == "127.0.0.1"
    settings = load_settings(kafka={"bootstrap_servers": kafka_bootstrap})
    ensure_topics(settings.kafka, [topic_name, f"{topic_name}.dlq"])
    service = DefaultHostService(
        workdir=tmp_path,
        bootstrap=kafka_bootstrap,
        topic=topic_name,
        stream=ConfiguredStream(dim=4, seed=1),
        log_path=tmp_path / "serve.log",
    )
    try:
        service.start()
        sockets = listening_sockets(service.pid)
        assert (LOOPBACK_HEX, service.port) in sockets, sockets
        assert all(address == LOOPBACK_HEX for address, _ in sockets), sockets
        record_figures(artifacts_dir, "security_bind", listening=sockets)
    finally:
        service.stop()


# -- no endpoint changes state --------------------------------------------------------------------


def writes_of(spec: dict[str, Any]) -> set[tuple[str, str]]:
    """(method, path) of every operation of an OpenAPI document that is not a read."""
    return {
        (method.upper(), path)
        for path, operations in spec["paths"].items()
        for method in operations
        if method not in READ_ONLY_METHODS
    }


def unprotected(writes: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The operations whose route needs no token scope with ``http.auth = "token"``."""
    return {(method, path) for method, path in writes if path not in ROUTE_SCOPES}


def test_no_endpoint_changes_state(vocabulary_service: FaultyService) -> None:
    service = vocabulary_service
    spec = service.get("/openapi.json").json()
    writes = writes_of(spec)
    assert not unprotected(writes), f"{unprotected(writes)} change state without a token"
    assert writes == {("POST", "/predict")}, "a state-changing endpoint needs a token and a test"
    # Control: an operation with no scope in the table is caught.
    added = {"paths": {**spec["paths"], "/model/reset": {"post": {}}}}
    assert unprotected(writes_of(added)) == {("POST", "/model/reset")}
    for path in spec["paths"]:
        for method in ("PUT", "PATCH", "DELETE"):
            assert service._client is not None
            response = service._client.request(method, path)
            assert response.status_code == 405, (method, path, response.status_code)

    before_model, before_stats = service.get("/model").json(), service.stats()
    rng = np.random.default_rng(0)
    for i in range(200):
        names = {f"never-seen-{i}-{j}": float(rng.normal()) for j in range(MAX_FEATURES)}
        assert service.post("/predict", {"features": names}).status_code == 200
        batch = {"instances": [{"features": {"f1": 1.0, f"new-{i}": 2.0}}] * MAX_BATCH}
        assert service.post("/predict", batch).status_code == 200
    after_model, after_stats = service.get("/model").json(), service.stats()
    assert after_model == before_model, "predictions changed the model (vocabulary grew?)"
    for key in ("seen", "mistakes", "model_version", "invalid"):
        assert after_stats[key] == before_stats[key]


# -- limits ---------------------------------------------------------------------------------------


def padded_request(size: int) -> bytes:
    body = json.dumps({"features": {"f1": 1.0}}).encode()
    return body + b" " * (size - len(body))


def problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    return body


def test_an_oversized_body_is_refused_before_it_is_read(vocabulary_service: FaultyService) -> None:
    """What the client could send before the 413 came, counted on the client's side.

    * A declared ``Content-Length`` over the limit: the client sends the head and **no body
      byte**, then waits; the 413 arrives anyway, so the server decided on the head alone.
    * A chunked body: the client sends 4 KB chunks until the body is one chunk past the limit
      (``limit + 4 KB`` bytes), sends nothing more (no final chunk) and waits; the 413 arrives,
      so the server refused as soon as the limit was passed, without waiting for the body's end.

    The controls use the same sockets and the same waiting: a declared length at the limit with
    its body, and a chunked body of exactly the limit with its final chunk, get 200.
    """
    port = vocabulary_service.port
    at_limit = padded_request(MAX_BODY)

    declared = send_then_wait(port, declared_head(HUGE_BODY_BYTES), [])
    assert declared.status_line.startswith(b"HTTP/1.1 413 "), declared.answer[:200]
    assert declared.body_bytes_sent == 0
    control = send_then_wait(port, declared_head(MAX_BODY), [at_limit])
    assert control.status_line.startswith(b"HTTP/1.1 200 "), control.answer[:200]

    past_limit = [b" " * SMALL_CHUNK] * (MAX_BODY // SMALL_CHUNK + 1)
    streamed = send_then_wait(port, CHUNKED_HEAD, past_limit, chunk)
    assert streamed.status_line.startswith(b"HTTP/1.1 413 "), streamed.answer[:200]
    assert MAX_BODY < streamed.body_bytes_sent <= MAX_BODY + SMALL_CHUNK
    within = [at_limit[i : i + SMALL_CHUNK] for i in range(0, MAX_BODY, SMALL_CHUNK)]
    control = send_then_wait(port, CHUNKED_HEAD, [*within, LAST_PAYLOAD], chunk)
    assert control.status_line.startswith(b"HTTP/1.1 200 "), control.answer[:200]


def test_body_batch_and_feature_limits_hold(
    vocabulary_service: FaultyService, artifacts_dir: Path
) -> None:
    """Limits, and the peak memory while 50 MB bodies are pushed at the server and refused.

    The peak resident size (``VmHWM``, reset just before) bounds what the server buffered at
    any moment, not only what it kept afterwards.
    """
    service = vocabulary_service
    headers = {"content-type": "application/json"}
    assert service._client is not None
    client = service._client

    assert (
        client.post("/predict", content=padded_request(MAX_BODY), headers=headers).status_code
        == 200
    )
    problem(client.post("/predict", content=padded_request(MAX_BODY + 1), headers=headers), 413)

    rss_before = rss_bytes(service.pid)
    reset_peak_rss(service.pid)
    streamed = flood(service.port, CHUNKED_HEAD, chunked(HUGE_BODY_BYTES, CHUNK))
    assert streamed.status_line.startswith(b"HTTP/1.1 413"), streamed.answer[:200]
    declared = flood(
        service.port,
        declared_head(HUGE_BODY_BYTES),
        iter([b" " * CHUNK] * (HUGE_BODY_BYTES // CHUNK)),
    )
    assert declared.status_line.startswith(b"HTTP/1.1 413"), declared.answer[:200]
    peak_growth = rss_bytes(service.pid, "VmHWM") - rss_before
    assert peak_growth < MAX_PEAK_RSS_GROWTH_BYTES, f"peak RSS grew {peak_growth} bytes"
    assert transient_buffer_shows_in_peak_rss(HUGE_BODY_BYTES), "the measure cannot see a buffer"

    one = {"features": {"f1": 1.0}}
    assert service.post("/predict", {"instances": [one] * MAX_BATCH}).status_code == 200
    body = problem(service.post("/predict", {"instances": [one] * (MAX_BATCH + 1)}), 422)
    assert body["errors"][0]["code"] == "batch_too_large"

    names = {f"n{i}": 1.0 for i in range(MAX_FEATURES)}
    assert service.post("/predict", {"features": names}).status_code == 200
    too_many = {**names, "one-more": 1.0}
    body = problem(service.post("/predict", {"features": too_many}), 422)
    assert body["errors"][0]["code"] == "too_many_features"
    body = problem(service.post("/predict", {"instances": [one, {"features": too_many}]}), 422)
    assert body["errors"][0]["code"] == "too_many_features"
    assert service.get("/healthz").status_code == 200
    record_figures(
        artifacts_dir,
        "security_limits",
        max_body_bytes=MAX_BODY,
        refused_body_bytes=HUGE_BODY_BYTES,
        flood_bytes_sent_before_413={
            "chunked": streamed.body_bytes_sent,
            "declared": declared.body_bytes_sent,
        },
        peak_rss_growth_bytes=peak_growth,
        max_batch_size=MAX_BATCH,
        max_features=MAX_FEATURES,
    )


# -- Kafka SASL / TLS -----------------------------------------------------------------------------


SECURE_ENV = {
    "NOVIKOFF_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
    "NOVIKOFF_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
    "NOVIKOFF_KAFKA__SASL_PLAIN_USERNAME": "novikoff",
    "NOVIKOFF_KAFKA__SASL_PLAIN_PASSWORD": "s3cret-value",
    "NOVIKOFF_KAFKA__SSL_CAFILE": "/etc/novikoff/ca.pem",
    "NOVIKOFF_KAFKA__SSL_CERTFILE": "/etc/novikoff/client.pem",
    "NOVIKOFF_KAFKA__SSL_KEYFILE": "/etc/novikoff/client.key",
    "NOVIKOFF_KAFKA__SSL_PASSWORD": "key-pass",
    "NOVIKOFF_KAFKA__SSL_CHECK_HOSTNAME": "false",
}
EXPECTED_CLIENT = {
    "security_protocol": "SASL_SSL",
    "sasl_mechanism": "SCRAM-SHA-512",
    "sasl_plain_username": "novikoff",
    "sasl_plain_password": "s3cret-value",
    "ssl_cafile": "/etc/novikoff/ca.pem",
    "ssl_certfile": "/etc/novikoff/client.pem",
    "ssl_keyfile": "/etc/novikoff/client.key",
    "ssl_password": "key-pass",
    "ssl_check_hostname": False,
}


def test_kafka_sasl_and_tls_settings_pass_through_to_kafka_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in SECURE_ENV.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert "s3cret-value" not in repr(settings) and "key-pass" not in repr(settings)
    runner = runner_settings(settings)
    consumer, producer = runner.kafka_consumer_config(), runner.kafka_producer_config()
    for config, known in (
        (consumer, KafkaConsumer.DEFAULT_CONFIG),
        (producer, KafkaProducer.DEFAULT_CONFIG),
        (settings.kafka.client_config(), KafkaConsumer.DEFAULT_CONFIG),
    ):
        assert {k: config[k] for k in EXPECTED_CLIENT} == EXPECTED_CLIENT
        assert set(config) <= set(known), set(config) - set(known)
    assert consumer["enable_auto_commit"] is False


def tls_service(
    workdir: Path, listener: TlsListener, trusted: Certificates, topic: str
) -> FaultyService:
    """``novikoff serve`` with ``security_protocol = "SSL"``, trusting ``trusted``'s CA and
    presenting its client certificate, pointed at ``listener``."""
    tls_toml = (
        '[kafka]\nsecurity_protocol = "SSL"\n'
        f'ssl_cafile = "{trusted.ca}"\nssl_certfile = "{trusted.client}"\n'
        f'ssl_keyfile = "{trusted.client_key}"\n'
    )
    return FaultyService(
        workdir=workdir,
        bootstrap=f"127.0.0.1:{listener.port}",
        topic=topic,
        stream=ConfiguredStream(dim=4, seed=1, extra_toml=tls_toml),
        log_path=workdir / "serve.log",
    )


def wait_until(what: str, service: FaultyService, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TLS_TIMEOUT_S
    while not condition():
        assert service.alive, service.log_text
        assert time.monotonic() < deadline, f"{what}: {service.log_text[-3000:]}"
        time.sleep(TLS_POLL_S)


def test_tls_settings_reach_the_wire(topic_name: str, tmp_path: Path, artifacts_dir: Path) -> None:
    """``novikoff serve`` with ``security_protocol = "SSL"`` verifies the broker with the
    configured CA and presents the configured client certificate (mutual TLS)."""
    certificates = make_certificates(tmp_path / "ca", TEST_CA)
    listener = TlsListener.serving(certificates, trusted_clients=certificates).start()
    service = tls_service(tmp_path, listener, certificates, topic_name)
    try:
        service.start(wait_ready=False)
        wait_until("no TLS exchange", service, lambda: bool(listener.first_bytes))
        assert listener.handshakes, listener.failures
        subject = dict(item for rdn in listener.handshakes[0]["subject"] for item in rdn)
        assert subject["commonName"] == "novikoff-client"
        assert listener.first_bytes[0][4:6] == API_VERSIONS_KEY, "a Kafka request over TLS"
        readyz = service.get("/readyz")
        assert readyz.status_code == 503
        record_figures(artifacts_dir, "security_tls", client_certificate=subject["commonName"])
    finally:
        service.stop()
        listener.stop()


def test_a_broker_certificate_from_another_ca_is_refused(
    topic_name: str, tmp_path: Path, artifacts_dir: Path
) -> None:
    """The same listener and service as above, but the listener's certificate is signed by
    another CA: the service's Kafka client aborts every handshake with an ``unknown CA`` alert
    and never sends a Kafka request. (The listener trusts the service's client certificate, so
    the server certificate is the only thing wrong.)"""
    certificates = make_certificates(tmp_path / "ca", TEST_CA)
    other = make_certificates(tmp_path / "other-ca", OTHER_CA)
    listener = TlsListener.serving(other, trusted_clients=certificates).start()
    service = tls_service(tmp_path, listener, certificates, topic_name)
    try:
        service.start(wait_ready=False)
        wait_until(
            "the client made too few attempts",
            service,
            lambda: len(listener.failures) >= REFUSED_ATTEMPTS,
        )
        failures = list(listener.failures)
        assert all(failure == UNKNOWN_CA_ALERT for failure in failures), failures
        assert listener.handshakes == [] and listener.first_bytes == []
        assert service.get("/readyz").status_code == 503
        record_figures(artifacts_dir, "security_tls_other_ca", refused_handshakes=len(failures))
    finally:
        service.stop()
        listener.stop()
