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
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from kafka import KafkaConsumer, KafkaProducer

from consumers.checkpoint import CheckpointError, CheckpointStore, frame
from consumers.engine import Engine, RestoreReport
from consumers.events import Record
from learning.state import DIGEST_SIZE, PREAMBLE
from service.assembly import runner_settings
from service.model import build_learner, build_tracker
from service.settings import Settings, load_settings
from service.topics import ensure_topics
from tests.support.faults import ConfiguredStream, FaultyService
from tests.support.ledger import Planned, publish, record_figures
from tests.support.tls import Certificates, TlsListener, make_certificates

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("learning", "consumers", "service")
LOOPBACK_HEX = "0100007F"
LISTEN_STATE = "0A"
READ_ONLY_METHODS = {"get", "head"}
VOCABULARY_TOML = '[model]\nvariant = "binary"\nencoding = "vocabulary"\nbias = true\n'
LIMITS_TOML = "[http]\nmax_body_bytes = 65536\nmax_batch_size = 16\nmax_features = 32\n"
MAX_BODY = 65_536
MAX_BATCH = 16
MAX_FEATURES = 32
HUGE_BODY_BYTES = 50 * 1024 * 1024
CHUNK = 64 * 1024
SMALL_CHUNK = 4096
"""The chunk size for counting how far past the limit a chunked body got before its 413."""
LAST_PAYLOAD = b""
"""The empty chunk ends a chunked body."""
MAX_PEAK_RSS_GROWTH_BYTES = 4 * 1024 * 1024
"""Peak resident growth allowed while refusing 50 MB bodies (measured: 0.2-0.8 MB); buffering
one such body would need 50 MB."""
RESET_PEAK_RSS = "5"
"""Written to ``/proc/PID/clear_refs``: resets ``VmHWM`` to the current resident size."""
RECV_BYTES = 65_536
RAW_TIMEOUT_S = 10.0
TLS_TIMEOUT_S = 30.0
GOOD_SEEN = 100
NEWER_SEEN = 150
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


def rss_bytes(pid: int, field_name: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field_name}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field_name}")


def reset_peak_rss(pid: int) -> None:
    """Set the process's peak resident size (``VmHWM``) to its current one (proc(5), clear_refs)."""
    Path(f"/proc/{pid}/clear_refs").write_text(RESET_PEAK_RSS)


def transient_buffer_shows_in_peak_rss(size: int) -> bool:
    """The control of the memory measure: in this process, a buffer of ``size`` bytes that is
    filled and freed again raises the peak resident size by at least ``size``."""
    pid = os.getpid()
    before = rss_bytes(pid)
    reset_peak_rss(pid)
    buffer = bytearray(size)
    buffer[:] = b"x" * size
    del buffer
    return rss_bytes(pid, "VmHWM") - before >= size


@dataclass
class RawExchange:
    """One request written by hand: how many body bytes the client sent, and the answer."""

    body_bytes_sent: int
    answer: bytes

    @property
    def status_line(self) -> bytes:
        return self.answer.split(b"\r\n", 1)[0]


def read_head(sock: socket.socket) -> bytes:
    """Read until the end of the response head (or until the server hangs up)."""
    answer = b""
    try:
        while b"\r\n\r\n" not in answer:
            data = sock.recv(RECV_BYTES)
            if not data:
                break
            answer += data
    except OSError:
        pass
    return answer


def flood(port: int, head: bytes, pieces: Iterator[bytes]) -> RawExchange:
    """Send ``head`` then ``pieces`` until the server answers or hangs up; count what was sent.

    The client keeps pushing body bytes while no answer is readable, so the server has every
    chance to read (and buffer) the body: this is the memory test's load.
    """
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=RAW_TIMEOUT_S) as sock:
        sock.sendall(head)
        for piece in pieces:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                break
            try:
                sock.sendall(piece)
            except OSError:
                break
            sent += len(piece)
        return RawExchange(sent, read_head(sock))


def send_then_wait(
    port: int, head: bytes, payloads: list[bytes], wire: Callable[[bytes], bytes] = bytes
) -> RawExchange:
    """Send ``head`` and exactly ``payloads`` (each framed by ``wire``), then nothing more, and
    wait for the answer; ``body_bytes_sent`` counts the payload bytes.

    Unless ``payloads`` completes the request, it stays incomplete (no final chunk, or fewer bytes
    than the declared length), so an answer can only have been decided on what was sent.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=RAW_TIMEOUT_S) as sock:
        sock.sendall(head)
        for payload in payloads:
            sock.sendall(wire(payload))
        return RawExchange(sum(len(p) for p in payloads), read_head(sock))


def chunk(payload: bytes) -> bytes:
    return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"


def chunked(total: int) -> Iterator[bytes]:
    for _ in range(total // CHUNK):
        yield chunk(b" " * CHUNK)
    yield chunk(LAST_PAYLOAD)


def padded_request(size: int) -> bytes:
    body = json.dumps({"features": {"f1": 1.0}}).encode()
    return body + b" " * (size - len(body))


def problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    return body


POST_HEAD = b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
CHUNKED_HEAD = POST_HEAD + b"Transfer-Encoding: chunked\r\n\r\n"


def declared_head(length: int) -> bytes:
    return POST_HEAD + f"Content-Length: {length}\r\n\r\n".encode()


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
    streamed = flood(service.port, CHUNKED_HEAD, chunked(HUGE_BODY_BYTES))
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


@dataclass
class CraftedRestore:
    """A restore from a good checkpoint and, newer, a re-framed one holding more events."""

    good: Path
    newer: Path
    genuine: bytes
    engine: Engine
    report: RestoreReport


def restore_through_the_crafting_path(craft: Craft, directory: Path) -> CraftedRestore:
    """Split a genuine state of ``NEWER_SEEN`` events, apply ``craft``, re-frame it with a valid
    checksum, save it as the newest checkpoint and restore a fresh engine from the store."""
    store = CheckpointStore(directory)
    good = store.save(trained_engine(GOOD_SEEN).checkpoint_bytes()[0])
    genuine = trained_engine(NEWER_SEEN).checkpoint_bytes()[0]
    header, payload = split_state(genuine)
    craft(header, payload)
    newer = store.save(join_state(genuine, header, payload))
    engine = fresh_engine()
    return CraftedRestore(good.path, newer.path, genuine, engine, engine.restore(store))


def timeless(blob: bytes) -> tuple[dict[str, Any], bytearray]:
    """A state's header and payload without the moment it was saved."""
    header, payload = split_state(blob)
    del header["extra"]["saved_at"]
    return header, payload


def untouched(header: dict[str, Any], payload: bytearray) -> None:
    """The identity craft: the state goes through split, JSON re-encoding and re-framing only."""


def test_an_untampered_checkpoint_passes_the_crafting_path_and_is_used(tmp_path: Path) -> None:
    """The control for the crafted cases: with nothing altered, the same split, re-encode,
    re-frame, save and restore yields the newer checkpoint: the restored engine's state is the
    one the writing engine saved (every array byte for byte, every header field but the time)."""
    restored = restore_through_the_crafting_path(untouched, tmp_path / "state")
    assert restored.report.path == str(restored.newer)
    assert restored.report.skipped == ()
    assert restored.engine.snapshot.seen == NEWER_SEEN
    assert timeless(restored.engine.checkpoint_bytes()[0]) == timeless(restored.genuine)
    assert not list((tmp_path / "state").glob("*.corrupt"))


@pytest.mark.parametrize("kind", list(CRAFTED))
def test_a_crafted_checkpoint_is_refused_and_the_previous_one_used(
    kind: str, tmp_path: Path
) -> None:
    restored = restore_through_the_crafting_path(CRAFTED[kind], tmp_path / "state")
    assert restored.report.path == str(restored.good), f"{kind}: loaded {restored.report.path}"
    assert [s.path for s in restored.report.skipped] == [restored.newer]
    assert restored.engine.snapshot.seen == GOOD_SEEN


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
