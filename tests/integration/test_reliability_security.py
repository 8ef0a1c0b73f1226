"""Security: loopback by default, no state-changing endpoint, limits that hold, a checkpoint loader
that refuses crafted files, and Kafka SASL/TLS settings that really reach the client.

No HTTP endpoint changes state (``POST /predict`` only reads a snapshot and never grows a
vocabulary), so none needs a token: :func:`test_no_endpoint_changes_state` pins the set of
operations, and any new non-GET route fails it until it is given token protection and a test.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import select
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from kafka import KafkaConsumer, KafkaProducer

from consumers.checkpoint import CheckpointError, CheckpointStore, frame
from consumers.engine import Engine
from consumers.events import Record
from learning.state import DIGEST_SIZE, PREAMBLE
from service.assembly import runner_settings
from service.model import build_learner, build_tracker
from service.settings import Settings, load_settings
from service.topics import ensure_topics
from tests.support.broker import free_port
from tests.support.faults import ConfiguredStream, FaultyService
from tests.support.ledger import Planned, publish, record_figures

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("learning", "consumers", "service")
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
MAX_RSS_GROWTH_BYTES = 20 * 1024 * 1024
TLS_TIMEOUT_S = 30.0


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


def test_no_endpoint_changes_state(vocabulary_service: FaultyService) -> None:
    service = vocabulary_service
    spec = service.get("/openapi.json").json()
    writes = {
        (method.upper(), path)
        for path, operations in spec["paths"].items()
        for method in operations
        if method not in READ_ONLY_METHODS
    }
    assert writes == {("POST", "/predict")}, "a state-changing endpoint needs a token and a test"
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


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def raw_request(port: int, head: bytes, chunks: Iterator[bytes]) -> bytes:
    """Send a request by hand, stop sending once the server answers or hangs up; the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10.0) as sock:
        sock.sendall(head)
        for chunk in chunks:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                break
            try:
                sock.sendall(chunk)
            except OSError:
                break
        answer = b""
        try:
            while b"\r\n\r\n" not in answer:
                data = sock.recv(65536)
                if not data:
                    break
                answer += data
        except OSError:
            pass
        return answer


def chunked(total: int) -> Iterator[bytes]:
    payload = b" " * CHUNK
    for _ in range(total // CHUNK):
        yield f"{len(payload):x}\r\n".encode() + payload + b"\r\n"
    yield b"0\r\n\r\n"


def padded_request(size: int) -> bytes:
    body = json.dumps({"features": {"f1": 1.0}}).encode()
    return body + b" " * (size - len(body))


def problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    return body


def test_body_batch_and_feature_limits_hold(
    vocabulary_service: FaultyService, artifacts_dir: Path
) -> None:
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
    head = (
        b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    answer = raw_request(service.port, head, chunked(HUGE_BODY_BYTES))
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    lying = (
        f"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {HUGE_BODY_BYTES}\r\n\r\n"
    ).encode()
    answer = raw_request(service.port, lying, iter([b" " * CHUNK] * (HUGE_BODY_BYTES // CHUNK)))
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    rss_growth = rss_bytes(service.pid) - rss_before
    assert rss_growth < MAX_RSS_GROWTH_BYTES, f"RSS grew {rss_growth} bytes on refused bodies"

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
        rss_growth_bytes=rss_growth,
        max_batch_size=MAX_BATCH,
        max_features=MAX_FEATURES,
    )


# -- the checkpoint loader ------------------------------------------------------------------------


def trained_engine(count: int = 100) -> Engine:
    settings = load_settings(model={"dim": 4})
    learner = build_learner(settings.model)
    engine = Engine(learner, build_tracker(settings, learner.encoder.dimension))
    rng = np.random.default_rng(count)
    records = [
        Record(
            "events",
            0,
            offset,
            json.dumps(
                {"features": rng.normal(size=4).tolist(), "label": 1 if offset % 3 else -1}
            ).encode(),
        )
        for offset in range(count)
    ]
    engine.apply(engine.decoder.decode_batch(records))
    return engine


def fresh_engine() -> Engine:
    settings = load_settings(model={"dim": 4})
    learner = build_learner(settings.model)
    return Engine(learner, build_tracker(settings, learner.encoder.dimension))


def test_checkpoint_paths_outside_the_directory_are_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = CheckpointStore(state)
    good = store.save(trained_engine().checkpoint_bytes()[0])
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "checkpoint-000000000009.ckpt").write_bytes(good.path.read_bytes())
    for path in (
        "../outside/checkpoint-000000000009.ckpt",
        str(outside / "checkpoint-000000000009.ckpt"),
        "/etc/passwd",
        "notes.txt",
        "checkpoint-1.ckpt",
    ):
        with pytest.raises(CheckpointError, match="refusing"):
            store.read(path)
    link = state / "checkpoint-000000000009.ckpt"
    link.symlink_to(outside / "checkpoint-000000000009.ckpt")
    with pytest.raises(CheckpointError, match="symbolic link"):
        store.read(link.name)
    engine = fresh_engine()
    report = engine.restore(CheckpointStore(state))
    assert report.path == str(good.path), "the symbolic link to a file outside was not used"
    assert [s.path.name for s in report.skipped] == [link.name]


def split_state(blob: bytes) -> tuple[dict[str, Any], bytearray]:
    _, _, length = PREAMBLE.unpack_from(blob)
    header = json.loads(blob[PREAMBLE.size : PREAMBLE.size + length])
    return header, bytearray(blob[PREAMBLE.size + length : -DIGEST_SIZE])


def join_state(template: bytes, header: dict[str, Any], payload: bytearray) -> bytes:
    """A state blob with valid magic, version and checksum around ``header`` and ``payload``."""
    magic, version, _ = PREAMBLE.unpack_from(template)
    header_bytes = json.dumps(header).encode()
    body = PREAMBLE.pack(magic, version, len(header_bytes)) + header_bytes + bytes(payload)
    return body + hashlib.sha256(body).digest()


def array_entry(header: dict[str, Any], name: str) -> dict[str, Any]:
    return next(a for a in header["arrays"] if a["group"] == "learner" and a["name"] == name)


def poke(header: dict[str, Any], payload: bytearray, name: str, index: int, value: Any) -> None:
    entry = array_entry(header, name)
    start = entry["offset"] + 8 * index
    payload[start : start + 8] = np.array([value], dtype=entry["dtype"]).tobytes()


def first_partition(header: dict[str, Any]) -> dict[str, Any]:
    partition: dict[str, Any] = header["extra"]["partitions"][0]
    return partition


Craft = Callable[[dict[str, Any], bytearray], None]
CRAFTED: dict[str, Craft] = {
    "learner_kind_os_system": lambda h, p: h["learner"].__setitem__("kind", "os.system"),
    "object_dtype": lambda h, p: array_entry(h, "weights").__setitem__("dtype", "|O"),
    "huge_shape": lambda h, p: array_entry(h, "weights").__setitem__("shape", [10**9, 10**9]),
    "nan_weight": lambda h, p: poke(h, p, "weights", 1, float("nan")),
    "infinite_weight": lambda h, p: poke(h, p, "weights", 2, float("-inf")),
    "nan_weight_sum": lambda h, p: poke(h, p, "weight_sums", 1, float("nan")),
    "negative_counter": lambda h, p: poke(h, p, "counters", 0, -5),
    "huge_margin_window": lambda h, p: h["tracker"].__setitem__("margin_window", 10**13),
    "negative_next_offset": lambda h, p: first_partition(h).__setitem__("next_offset", -7),
    "next_offset_past_applied": lambda h, p: first_partition(h).__setitem__("next_offset", 10**6),
    "overlapping_ranges": lambda h, p: first_partition(h).__setitem__(
        "applied", [[0, 60], [40, 100]]
    ),
    "counts_exceed_ranges": lambda h, p: first_partition(h).__setitem__("learned", 10**6),
    "negative_partition": lambda h, p: first_partition(h).__setitem__("partition", -1),
    "duplicate_partition": lambda h, p: h["extra"]["partitions"].append(dict(first_partition(h))),
    "negative_invalid_count": lambda h, p: h["extra"].__setitem__("invalid", {"not_json": -3}),
    "unknown_reason_code": lambda h, p: h["extra"].__setitem__("invalid", {"<script>": 3}),
}


@pytest.mark.parametrize("kind", list(CRAFTED))
def test_a_crafted_checkpoint_is_refused_and_the_previous_one_used(
    kind: str, tmp_path: Path
) -> None:
    store = CheckpointStore(tmp_path / "state")
    good = store.save(trained_engine(100).checkpoint_bytes()[0])
    genuine = trained_engine(150).checkpoint_bytes()[0]
    header, payload = split_state(genuine)
    CRAFTED[kind](header, payload)
    crafted = store.save(join_state(genuine, header, payload))
    engine = fresh_engine()
    report = engine.restore(store)
    assert report.path == str(good.path), f"{kind}: loaded {report.path}"
    assert [s.path for s in report.skipped] == [crafted.path]
    assert engine.snapshot.seen == 100


def test_a_pickle_is_never_unpickled(tmp_path: Path) -> None:
    """A framed pickle whose reduce would create a file: refused, and the file never appears."""
    marker = tmp_path / "pwned"
    payload = (
        b"\x80\x04\x95" + b"\x00" * 8 + b"cos\nsystem\n(V touch " + str(marker).encode() + b"\ntR."
    )
    store = CheckpointStore(tmp_path / "state")
    good = store.save(trained_engine().checkpoint_bytes()[0])
    (tmp_path / "state" / "checkpoint-000000000002.ckpt").write_bytes(frame(payload, 2))
    report = fresh_engine().restore(store)
    assert report.path == str(good.path)
    assert not marker.exists()


def test_no_module_can_unpickle() -> None:
    """No import of pickle-family modules and no ``allow_pickle=True`` in the service's code."""
    banned = {"pickle", "cPickle", "dill", "shelve", "marshal", "joblib", "cloudpickle"}
    offenders = []
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name.split(".")[0] for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module.split(".")[0]]
                elif (
                    isinstance(node, ast.keyword)
                    and node.arg == "allow_pickle"
                    and not (isinstance(node.value, ast.Constant) and node.value.value is False)
                ):
                    offenders.append(f"{path}:{node.value.lineno} allow_pickle")
                offenders.extend(f"{path}:{node.lineno} {n}" for n in names if n in banned)  # type: ignore[attr-defined]
    assert not offenders, offenders


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


@dataclass
class TlsListener:
    """A TLS server that requires a client certificate from the test CA and records handshakes."""

    context: ssl.SSLContext
    port: int = field(default_factory=free_port)
    handshakes: list[dict[str, Any]] = field(default_factory=list)
    first_bytes: list[bytes] = field(default_factory=list)
    _server: socket.socket | None = None

    def start(self) -> TlsListener:
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._server.settimeout(0.2)
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    def _serve(self) -> None:
        while self._server is not None:
            try:
                client, _ = self._server.accept()
            except (TimeoutError, OSError):
                continue
            try:
                with self.context.wrap_socket(client, server_side=True) as tls:
                    self.handshakes.append(tls.getpeercert() or {})
                    tls.settimeout(2.0)
                    self.first_bytes.append(tls.recv(64))
            except (ssl.SSLError, OSError):
                continue


def make_certificates(directory: Path) -> dict[str, Path]:
    """A throwaway CA, a server certificate for 127.0.0.1 and a client certificate."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "1", "-subj", "/CN=novikoff-test-ca",
    )  # fmt: skip
    (directory / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    for name, subject in (("server", "/CN=127.0.0.1"), ("client", "/CN=novikoff-client")):
        openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
            f"{name}.csr", "-subj", subject,
        )  # fmt: skip
        openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "1", "-extfile", "san.cnf",
        )  # fmt: skip
    return {
        name: directory / name
        for name in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")
    }


def test_tls_settings_reach_the_wire(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path, artifacts_dir: Path
) -> None:
    """``novikoff serve`` with ``security_protocol = "SSL"`` verifies the broker with the
    configured CA and presents the configured client certificate (mutual TLS)."""
    certs = make_certificates(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(certs["ca.pem"]))
    context.load_cert_chain(certs["server.pem"], certs["server.key"])
    context.verify_mode = ssl.CERT_REQUIRED
    listener = TlsListener(context).start()
    tls_toml = (
        '[kafka]\nsecurity_protocol = "SSL"\n'
        f'ssl_cafile = "{certs["ca.pem"]}"\nssl_certfile = "{certs["client.pem"]}"\n'
        f'ssl_keyfile = "{certs["client.key"]}"\n'
    )
    service = FaultyService(
        workdir=tmp_path,
        bootstrap=f"127.0.0.1:{listener.port}",
        topic=topic_name,
        stream=ConfiguredStream(dim=4, seed=1, extra_toml=tls_toml),
        log_path=tmp_path / "serve.log",
    )
    try:
        service.start(wait_ready=False)
        deadline = time.monotonic() + TLS_TIMEOUT_S
        while not listener.first_bytes and time.monotonic() < deadline:
            assert service.alive, service.log_text
            time.sleep(0.1)
        assert listener.handshakes, f"no TLS handshake completed; {service.log_text[-3000:]}"
        subject = dict(item for rdn in listener.handshakes[0]["subject"] for item in rdn)
        assert subject["commonName"] == "novikoff-client"
        assert listener.first_bytes[0][4:6] == b"\x00\x12", "a Kafka ApiVersions request over TLS"
        readyz = service.get("/readyz")
        assert readyz.status_code == 503
        record_figures(artifacts_dir, "security_tls", client_certificate=subject["commonName"])
    finally:
        service.stop()
        listener.stop()
