"""Broker outage: predictions keep flowing, readiness says why not, the consumer comes back alone.

The outage is a cut network path: the service reaches a dedicated Apache Kafka broker through a
:class:`~tests.support.proxy.FaultProxy` (the broker advertises the proxy's port), and ``cut()``
resets every connection and refuses new ones, exactly what a dead broker looks like to a client
(the broker-process faults themselves are in ``test_broker_faults``). While the path is cut:

* ``POST /predict`` answers 200 every time;
* ``/readyz`` answers 503 with a problem body that says why;
* the process stays up (same PID), rebuilds its consumer at most a bounded number of times
  (with backoff), and burns little CPU (measured from ``/proc/PID/stat``: a
  resource bound, not a timing one).

After ``restore()`` the consumer reconnects by itself and everything produced is learned once.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from consumers.runner_health import COORDINATOR_UNREACHABLE
from service.cli.brokers.apache import ApacheKafkaBroker
from service.settings import load_settings
from service.topics import ensure_topics
from tests.support.broker import ApacheBrokerFactory, free_port
from tests.support.faults import ConfiguredStream, FaultyService, offline_expectation, served_model
from tests.support.ledger import (
    EventPlan,
    Ledger,
    Produced,
    publish,
    read_dead_letters,
    record_figures,
)
from tests.support.proxy import FaultProxy

pytestmark = pytest.mark.integration

OUTAGE_S = 20.0
PROBE_INTERVAL_S = 0.1
MAX_RECONNECTS = 20
"""Consumer rebuilds allowed in the outage: kafka-python usually reconnects the one it has; when
a poll raises instead, the rebuilds back off from 0.5 s doubling to 10 s (~6 in 20 s)."""
LOST_CONNECTION = re.compile(
    rf"^not ready: ({re.escape(COORDINATOR_UNREACHABLE)}|cannot reach Kafka at "
    r"|consumer error: KafkaConnectionError)"
)
"""What ``/readyz`` may say while the path is cut: each reason names the lost connection."""
MAX_CPU_SHARE = 0.15
"""Share of one core the service may use while the broker is away. A client spinning on a dead
connection uses ~1.0; the service answers ~20 requests/s from the probe meanwhile."""
RECOVERY_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 90.0
STOP_DEADLINE_S = 15.0
FIRST_EVENTS = 3_000
MORE_EVENTS = 2_000
NO_PERIODIC_CHECKPOINTS = "[checkpoint]\nevery_events = 1000000\nevery_seconds = 3600\n"
"""Only the final checkpoint at the stop saves the applied events."""


@dataclass
class CutBroker:
    """A dedicated Apache Kafka reached only through a proxy that can be cut."""

    broker: ApacheKafkaBroker
    proxy: FaultProxy

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap


@pytest.fixture(scope="module")
def cut_broker(
    tmp_path_factory: pytest.TempPathFactory, artifacts_dir: Path
) -> Iterator[CutBroker]:
    proxy_port = free_port()
    factory = ApacheBrokerFactory(tmp_path_factory.mktemp("outage"), artifacts_dir, "outage")
    broker = factory(advertised_port=proxy_port)
    try:
        with FaultProxy(listen_port=proxy_port, target_port=broker.port) as proxy:
            broker.start()
            yield CutBroker(broker, proxy)
    finally:
        factory.close()


@pytest.fixture
def outage(cut_broker: CutBroker) -> Iterator[CutBroker]:
    """The proxy, always restored after the test."""
    try:
        yield cut_broker
    finally:
        if cut_broker.proxy._server is None:
            cut_broker.proxy.restore()


@dataclass
class Probe:
    """Calls ``POST /predict`` and ``GET /readyz`` every 100 ms on a thread, recording answers."""

    base_url: str
    answers: list[tuple[float, str, int, str]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Probe:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=5.0) as client:
            while not self._stop.wait(PROBE_INTERVAL_S):
                self._call(
                    client, "predict", "POST", "/predict", {"features": [0.1, 0.2, 0.3, 0.4]}
                )
                self._call(client, "readyz", "GET", "/readyz", None)

    def _call(self, client: httpx.Client, name: str, method: str, path: str, body: object) -> None:
        now = time.monotonic()
        try:
            response = client.request(method, path, json=body)
            self.answers.append((now, name, response.status_code, response.text))
        except httpx.HTTPError as exc:
            self.answers.append((now, name, 0, repr(exc)))

    def between(self, name: str, start: float, stop: float) -> list[tuple[int, str]]:
        return [
            (s, text) for t, n, s, text in list(self.answers) if n == name and start <= t < stop
        ]


def make_service(tmp_path: Path, bootstrap: str, topic: str, extra_toml: str = "") -> FaultyService:
    return FaultyService(
        workdir=tmp_path,
        bootstrap=bootstrap,
        topic=topic,
        stream=ConfiguredStream(dim=4, seed=21, margin=0.05, noise=0.05, extra_toml=extra_toml),
        log_path=tmp_path / "serve.log",
        group_id=f"{topic}-group",
    )


def service_with_first_events(
    outage: CutBroker, topic: str, tmp_path: Path, extra_toml: str = ""
) -> tuple[FaultyService, EventPlan, list[Produced]]:
    """A (not yet started) service on a one-partition topic holding FIRST_EVENTS valid events."""
    settings = load_settings(kafka={"bootstrap_servers": outage.bootstrap})
    ensure_topics(settings.kafka, [topic, f"{topic}.dlq"], partitions=1)
    service = make_service(tmp_path, outage.bootstrap, topic, extra_toml)
    plan = EventPlan(service.stream.synthetic(), partitions=1)  # type: ignore[attr-defined]
    return service, plan, publish(outage.bootstrap, topic, plan.valid(FIRST_EVENTS))


def reconnects(log: str) -> int:
    return len(re.findall(r"consumer created for topic", log))


def test_a_broker_outage_keeps_predictions_up_and_recovers_by_itself(
    outage: CutBroker, topic_name: str, tmp_path: Path, artifacts_dir: Path
) -> None:
    service, plan, produced = service_with_first_events(outage, topic_name, tmp_path)
    ledger = Ledger(topic_name, produced)
    probe = Probe(service.base_url)
    try:
        service.start()
        service.wait_for("drained", lambda s: s["seen"] == FIRST_EVENTS, DRAIN_TIMEOUT_S)
        pid = service.pid
        before = reconnects(service.log_text)
        probe.start()
        time.sleep(1.0)

        cpu_before, cut_at = service.cpu_seconds(), time.monotonic()
        outage.proxy.cut()
        time.sleep(OUTAGE_S)
        cpu_used, restored_at = service.cpu_seconds() - cpu_before, time.monotonic()
        outage.proxy.restore()
        outage_reconnects = reconnects(service.log_text) - before

        service.wait_for("ready again", lambda s: s["ready"], RECOVERY_TIMEOUT_S)
        recovered_at = time.monotonic()
        probe.stop()
        assert service.alive and service.pid == pid, "the process never restarted"

        predicts = probe.between("predict", cut_at, restored_at)
        assert len(predicts) >= OUTAGE_S / PROBE_INTERVAL_S / 4
        assert {status for status, _ in predicts} == {200}, predicts[:5]
        ready = probe.between("readyz", cut_at, restored_at)
        second_half = probe.between("readyz", cut_at + OUTAGE_S / 2, restored_at)
        assert second_half and {status for status, _ in second_half} == {503}, second_half
        reasons = set()
        for status, text in ready:
            if status == 503:
                problem = json.loads(text)
                assert problem["status"] == 503 and problem["detail"].startswith("not ready: ")
                reasons.add(problem["detail"])
        assert reasons and all(LOST_CONNECTION.match(reason) for reason in reasons), reasons
        assert cpu_used < MAX_CPU_SHARE * OUTAGE_S, f"{cpu_used:.2f}s of CPU in {OUTAGE_S}s"
        assert outage_reconnects <= MAX_RECONNECTS, f"{outage_reconnects} consumer rebuilds"

        ledger.extend(
            publish(outage.bootstrap, topic_name, plan.valid(MORE_EVENTS, start=FIRST_EVENTS))
        )
        total = FIRST_EVENTS + MORE_EVENTS
        service.wait_for("drained", lambda s: s["seen"] >= total and s["lag"] == 0, DRAIN_TIMEOUT_S)
        time.sleep(1.0)
        report = ledger.check(
            service.stats(), read_dead_letters(outage.bootstrap, f"{topic_name}.dlq", 0)
        )
        assert report.missing == [] and report.problems == [], report.problems
        X, y = ledger.valid_arrays(0)
        assert served_model(service) == offline_expectation(service.stream, X, y)
        record_figures(
            artifacts_dir,
            "broker_outage",
            outage_s=OUTAGE_S,
            predictions_during_outage=len(predicts),
            predict_non_200=sum(1 for s, _ in predicts if s != 200),
            readyz_503_reasons=sorted(reasons),
            cpu_seconds_during_outage=round(cpu_used, 3),
            consumer_rebuilds=outage_reconnects,
            ready_again_after_s=round(recovered_at - restored_at, 2),
            learned=report.learned,
            missing=len(report.missing),
        )
    finally:
        probe.stop()
        service.stop()


@pytest.mark.parametrize("transactions", [False, True], ids=["local-checkpoint", "transactions"])
def test_sigterm_during_an_outage_still_stops_in_time_with_a_checkpoint(
    outage: CutBroker, topic_name: str, tmp_path: Path, transactions: bool
) -> None:
    """Periodic checkpoints are off, so at the SIGTERM all FIRST_EVENTS are applied and not yet
    checkpointed: the stop has a final checkpoint to make while the broker is away.

    Local-checkpoint mode (``kafka.transactions = false``): the final checkpoint is the local
    file, written although the broker is away; the restart resumes from it and reads nothing
    again. Transactions: the final transaction cannot reach the broker, so it is abandoned
    within its share of the deadline and its events are void; the restart, with the broker back,
    learns them again. Either way the stop keeps its deadline, and every event is learned once.
    """
    service, _, produced = service_with_first_events(
        outage, topic_name, tmp_path, extra_toml=NO_PERIODIC_CHECKPOINTS
    )
    service.extra_env["NOVIKOFF_KAFKA__TRANSACTIONS"] = str(transactions).lower()
    try:
        service.start()
        service.wait_for("drained", lambda s: s["seen"] == FIRST_EVENTS, DRAIN_TIMEOUT_S)
        outage.proxy.cut()
        time.sleep(3.0)
        code, elapsed = service.terminate(STOP_DEADLINE_S + 10.0)
        log = service.log_text
        assert elapsed < STOP_DEADLINE_S, f"{elapsed:.1f}s; {log}"
        assert code == 0, log
        if transactions:
            # Void either by the final transaction, abandoned within its share of the deadline,
            # or already by the consumer error the cut caused (then no final one is due).
            assert f"{FIRST_EVENTS} applied record(s) void" in log, log
            assert re.search(r"consumer stopped \(final checkpoint (FAILED|not due)\)", log), log
        else:
            # Written at the stop, or already after the consumer error the cut caused.
            assert re.search(r"consumer stopped \(final checkpoint (written|not due)\)", log), log

        outage.proxy.restore()
        service.start()
        service.wait_for(
            "drained", lambda s: s["seen"] == FIRST_EVENTS and s["lag"] == 0, DRAIN_TIMEOUT_S
        )
        if not transactions:
            assert f": {FIRST_EVENTS} events learned" in service.log_text, service.log_text
        report = Ledger(topic_name, produced).check(
            service.stats(), read_dead_letters(outage.bootstrap, f"{topic_name}.dlq", 0)
        )
        assert report.missing == [] and report.problems == [], report.problems
    finally:
        service.stop()


def test_the_service_starts_while_the_broker_is_away(
    outage: CutBroker, topic_name: str, tmp_path: Path
) -> None:
    """Serving does not wait for Kafka: /healthz and /predict answer, /readyz says why not."""
    service, _, _ = service_with_first_events(outage, topic_name, tmp_path)
    outage.proxy.cut()
    try:
        service.start(wait_ready=False)
        deadline = time.monotonic() + RECOVERY_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if service.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        assert service.post("/predict", {"features": [0.1, 0.2, 0.3, 0.4]}).status_code == 200
        time.sleep(2.0)
        readyz = service.get("/readyz")
        assert readyz.status_code == 503, readyz.text
        assert readyz.headers["content-type"].startswith("application/problem+json")
        assert readyz.json()["detail"].startswith("not ready: ")
        outage.proxy.restore()
        service.wait_for("drained", lambda s: s["seen"] == FIRST_EVENTS, DRAIN_TIMEOUT_S)
    finally:
        service.stop()
