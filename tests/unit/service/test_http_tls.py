"""HTTPS with uvicorn's own options: the server's certificate, and mutual TLS refusing a client
certificate from another CA (certificates made with openssl, as for the Kafka TLS tests)."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from service.assembly import build_service
from service.http.app import create_app
from service.http.server import HttpServer
from service.observability.metrics import Metrics
from service.settings import Settings, SettingsError, load_settings
from tests.support.tls import Certificates, make_certificates
from tests.unit.service.engines import PLA_EVENTS, FakeRunner, trained_engine

TEST_CA = "novikoff-http-test-ca"
OTHER_CA = "another-ca"
STOP_S = 5.0
RECV_BYTES = 64


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("ours"), TEST_CA)


@pytest.fixture(scope="module")
def theirs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("theirs"), OTHER_CA)


def tls_settings(certificates: Certificates, **http: Any) -> Settings:
    return load_settings(
        model={"dim": 1},
        http={
            "port": 0,
            "ssl_certfile": str(certificates.server),
            "ssl_keyfile": str(certificates.server_key),
            **http,
        },
    )


def serve(settings: Settings, tmp_path: Path) -> Iterator[HttpServer]:
    metrics = Metrics(CollectorRegistry())
    engine = trained_engine(settings, PLA_EVENTS, tmp_path, metrics)
    app = create_app(settings, engine, FakeRunner(connected=True), metrics)
    server = HttpServer(
        app,
        settings.http.host,
        settings.http.port,
        graceful_timeout_s=1.0,
        ssl_options=settings.http.uvicorn_ssl_options(),
    )
    server.start()
    try:
        yield server
    finally:
        assert server.stop(STOP_S)


@pytest.fixture
def https_server(ours: Certificates, tmp_path: Path) -> Iterator[HttpServer]:
    yield from serve(tls_settings(ours), tmp_path)


@pytest.fixture
def mutual_tls_server(ours: Certificates, tmp_path: Path) -> Iterator[HttpServer]:
    settings = tls_settings(ours, ssl_ca_certs=str(ours.ca), require_client_cert=True)
    yield from serve(settings, tmp_path)


def client_context(trusted: Certificates, presenting: Certificates | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(trusted.ca))
    if presenting is not None:
        context.load_cert_chain(presenting.client, presenting.client_key)
    return context


def get(server: HttpServer, context: ssl.SSLContext) -> httpx.Response:
    with httpx.Client(verify=context, timeout=STOP_S) as client:
        return client.get(f"{server.url}/healthz")


def test_https_with_the_right_ca(https_server: HttpServer, ours: Certificates) -> None:
    assert https_server.url.startswith("https://127.0.0.1:")
    assert get(https_server, client_context(ours)).json() == {"status": "ok"}


def test_a_client_trusting_another_ca_refuses_the_server(
    https_server: HttpServer, theirs: Certificates
) -> None:
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        get(https_server, client_context(theirs))


def test_plain_http_gets_no_answer_from_the_https_port(https_server: HttpServer) -> None:
    plain = https_server.url.replace("https://", "http://")
    with httpx.Client(timeout=STOP_S) as client, pytest.raises(httpx.TransportError):
        client.get(f"{plain}/healthz")


def test_mutual_tls_accepts_a_client_certificate_of_its_ca(
    mutual_tls_server: HttpServer, ours: Certificates
) -> None:
    response = get(mutual_tls_server, client_context(ours, presenting=ours))
    assert response.json() == {"status": "ok"}


def raw_exchange(server: HttpServer, context: ssl.SSLContext) -> bytes | str:
    """The bytes answering ``GET /healthz`` over a raw TLS socket, or the TLS error that ended it.

    With TLS 1.3 the client's side of the handshake completes before the server has checked the
    client's certificate; a refused client then reads end-of-stream instead of an answer (the
    server closes without an alert, so no reason reaches the client).
    """
    with socket.create_connection(("127.0.0.1", server.port), timeout=STOP_S) as sock:
        try:
            with context.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
                tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                return tls.recv(RECV_BYTES)
        except ssl.SSLError as exc:
            return str(exc.reason)


def test_mutual_tls_refuses_a_client_certificate_from_another_ca(
    mutual_tls_server: HttpServer, ours: Certificates, theirs: Certificates
) -> None:
    assert raw_exchange(mutual_tls_server, client_context(ours, presenting=theirs)) == b""
    with pytest.raises(httpx.TransportError):
        get(mutual_tls_server, client_context(ours, presenting=theirs))
    # Control: the same exchange with a certificate of the trusted CA is answered.
    answer = raw_exchange(mutual_tls_server, client_context(ours, presenting=ours))
    assert isinstance(answer, bytes) and answer.startswith(b"HTTP/1.1 200 ")


def test_mutual_tls_refuses_a_client_without_a_certificate(
    mutual_tls_server: HttpServer, ours: Certificates
) -> None:
    assert raw_exchange(mutual_tls_server, client_context(ours)) == b""
    with pytest.raises(httpx.TransportError):
        get(mutual_tls_server, client_context(ours))


def test_the_service_serves_https_when_configured(ours: Certificates, tmp_path: Path) -> None:
    settings = tls_settings(ours, host="127.0.0.1")
    settings = settings.model_copy(
        update={"checkpoint": settings.checkpoint.model_copy(update={"path": tmp_path})}
    )
    service = build_service(settings)
    try:
        assert service.http.url.startswith("https://")
    finally:
        service.http.join(0.0)


@pytest.mark.parametrize(
    ("http", "problem"),
    [
        ({"ssl_keyfile": "k.pem"}, "ssl_keyfile needs ssl_certfile"),
        ({"ssl_certfile": "c.pem", "require_client_cert": True}, "needs ssl_ca_certs"),
        ({"ssl_ca_certs": "ca.pem"}, "needs ssl_certfile"),
    ],
)
def test_inconsistent_tls_settings_are_refused(http: dict[str, Any], problem: str) -> None:
    with pytest.raises(SettingsError, match=problem):
        load_settings(http=http)


def test_no_tls_options_without_a_certificate() -> None:
    assert load_settings().http.uvicorn_ssl_options() == {}
    options = load_settings(
        http={"ssl_certfile": "c.pem", "ssl_ca_certs": "ca.pem", "require_client_cert": True}
    ).http.uvicorn_ssl_options()
    assert options == {
        "ssl_certfile": "c.pem",
        "ssl_ca_certs": "ca.pem",
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
    }
