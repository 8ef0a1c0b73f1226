"""Read replicas: ``POST /predict`` requests/s of two replica processes against one.

One broker (as in :mod:`bench.bench_e2e`: Apache Kafka by default, ``BENCH_BROKER``, or the cluster
``KAFKA_BOOTSTRAP_SERVERS`` names) holds one state record: the model of
:mod:`bench.bench_predict` (dense binary, ``DIMENSION`` features, trained on a synthetic stream,
averaged predictor) in the state topic. ``MAX_REPLICAS`` ``novikoff serve --role replica``
processes follow it; the benchmark waits until each is ready and answers with the trained model
(a correctness check).

The load generator is the same for every configuration: one ``wrk`` process, ``WRK_THREADS``
threads and ``CONNECTIONS`` connections in all; a Lua ``setup`` pins thread *i* to replica
*i mod n*, so the same load is spread over ``n`` replicas (no load balancer in the path: it
would take a core of this 2-core machine). Every replica process runs in every configuration (the
idle ones too), so the only change is how many share the load. Each configuration gets a warm-up
run and then ``ROUNDS`` timed runs of ``DURATION_S`` seconds, in turns; the best run is kept.

Record ``predict_replicas2_vs_1``: requests/s with two replicas against one (bar 1.4x); the
details hold every configuration's requests/s up to ``MAX_REPLICAS`` (how throughput grows and
where it stops on this machine).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import numpy as np
import orjson
from kafka import KafkaProducer

from bench import BenchRecord, ResultMismatchError
from bench.bench_e2e import broker
from bench.bench_predict import (
    DIMENSION,
    DURATION_S,
    PREDICT_PATH,
    QUICK_DURATION_S,
    QUICK_ROUNDS,
    ROUNDS,
    SEED,
    LoadResult,
    best_of,
    interleaved,
    parse_wrk,
    trained_engine,
    wrk_binary,
    wrk_version,
)
from consumers.state.topic import encode_state_record, state_key
from service.cli.broker import free_port, terminate_process
from service.cli.synthetic import SyntheticStream
from service.settings import Settings, load_settings
from service.topics import ensure_state_topic

logger = logging.getLogger(__name__)

TOPIC = "bench-replicas"
GROUP = "bench-replicas"
HOST = "127.0.0.1"
MAX_REPLICAS = 3
WRK_THREADS = 6
"""Divisible by 1, 2 and 3: every replica gets the same share of threads and connections."""
CONNECTIONS = 18
"""Three per wrk thread (wrk gives each thread connections // threads)."""
RATE_BAR = 1.4
READY_TIMEOUT_S = 90.0
POLL_INTERVAL_S = 0.2
STOP_TIMEOUT_S = 20.0
STATE_SEQUENCE = 1
SEND_TIMEOUT_S = 30.0

_LUA = """local ports = {{{ports}}}
local next_thread = 0
function setup(thread)
  local port = ports[next_thread % #ports + 1]
  thread.addr = wrk.lookup("{host}", tostring(port))[1]
  next_thread = next_thread + 1
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("{body}", "rb")
wrk.body = f:read("*a")
f:close()
"""


def replica_config(directory: Path, stream: SyntheticStream) -> Path:
    """The replicas' TOML: the benchmark model and its reference separator."""
    weights = ", ".join(repr(float(w)) for w in stream.reference)
    path = directory / "replica.toml"
    path.write_text(
        f'[model]\ndim = {DIMENSION}\n\n[[bound.references]]\nname = "teacher"\n'
        f"weights = [{weights}]\n",
        encoding="utf-8",
    )
    return path


def publish_state(settings: Settings, payload: bytes) -> None:
    """Write one state record of the benchmark model to the (created) state topic."""
    ensure_state_topic(settings.kafka)
    producer = KafkaProducer(**settings.kafka.producer_config())
    try:
        producer.send(
            settings.kafka.state_topic_name,
            key=state_key(settings.kafka.group_id, settings.kafka.topic),
            value=encode_state_record(payload, STATE_SEQUENCE),
        ).get(timeout=SEND_TIMEOUT_S)
    finally:
        producer.close()


@contextmanager
def replica_process(config: Path, bootstrap: str, log: Path) -> Iterator[str]:
    """One ``novikoff serve --role replica`` on a free loopback port; yields its URL once ready."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOVIKOFF_")}
    env.update(
        {
            "NOVIKOFF_CONFIG": str(config),
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "NOVIKOFF_KAFKA__TOPIC": TOPIC,
            "NOVIKOFF_KAFKA__GROUP_ID": GROUP,
            "NOVIKOFF_HTTP__HOST": HOST,
            "NOVIKOFF_HTTP__PORT": str(port),
            "NOVIKOFF_LOGGING__LEVEL": "WARNING",
        }
    )
    command = [sys.executable, "-m", "service", "serve", "--role", "replica"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://{HOST}:{port}"
    try:
        wait_ready(url, proc, log)
        yield url
    finally:
        terminate_process(proc, STOP_TIMEOUT_S)


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until ``/readyz`` answers 200; the replica's log names why when it exits first."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"replica exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(url + "/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(POLL_INTERVAL_S)
    raise TimeoutError(f"replica {url} not ready after {READY_TIMEOUT_S}s; see {log}")


def check_same_model(urls: list[str], version: int, body: bytes, expected: object) -> None:
    """Every replica serves the published model and answers the benchmark request alike."""
    headers = {"content-type": "application/json"}
    for url in urls:
        served = httpx.get(url + "/stats").json()["model_version"]
        answer = httpx.post(url + PREDICT_PATH, content=body, headers=headers).json()
        if served != version or answer != expected:
            raise ResultMismatchError(
                f"{url} serves version {served} (want {version}) and answers {answer} "
                f"(want {expected})"
            )


def run_spread(url: str, script: Path, duration_s: int) -> LoadResult:
    """One wrk run of the same load, spread as ``script`` says (wrk first checks ``url``)."""
    command = [
        wrk_binary(),
        f"-t{WRK_THREADS}",
        f"-c{CONNECTIONS}",
        f"-d{duration_s}s",
        "--latency",
        "-s",
        str(script),
        url + PREDICT_PATH,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return parse_wrk(done.stdout)


def spread_script(directory: Path, urls: list[str], body_path: Path) -> Path:
    """A wrk script pinning threads to the replicas of ``urls`` in turn."""
    ports = ", ".join(url.rpartition(":")[2] for url in urls)
    script = directory / f"spread-{len(urls)}.lua"
    script.write_text(_LUA.format(ports=ports, host=HOST, body=body_path), encoding="utf-8")
    return script


def run(quick: bool = False) -> list[BenchRecord]:
    """Requests/s with 1 .. ``MAX_REPLICAS`` replicas under the same load."""
    duration = QUICK_DURATION_S if quick else DURATION_S
    rounds = QUICK_ROUNDS if quick else ROUNDS
    stream = SyntheticStream(dim=DIMENSION, margin=0.05, noise=0.05, seed=SEED)
    rng = np.random.default_rng(SEED)
    body = orjson.dumps({"features": rng.uniform(-1, 1, DIMENSION).tolist()})
    with tempfile.TemporaryDirectory(prefix="novikoff-bench-replicas-") as tmp:
        directory = Path(tmp)
        body_path = directory / "one.json"
        body_path.write_bytes(body)
        config = replica_config(directory, stream)
        with broker(directory) as (bootstrap, broker_name, _), ExitStack() as stack:
            settings = load_settings(
                config,
                kafka={"bootstrap_servers": bootstrap, "topic": TOPIC, "group_id": GROUP},
            )
            engine = trained_engine(settings, stream)
            publish_state(settings, engine.checkpoint_bytes()[0])
            urls = [
                stack.enter_context(
                    replica_process(config, bootstrap, directory / f"replica-{index}.log")
                )
                for index in range(MAX_REPLICAS)
            ]
            expected = httpx.post(
                urls[0] + PREDICT_PATH, content=body, headers={"content-type": "application/json"}
            ).json()
            version = engine.snapshot.model_version
            check_same_model(urls, version, body, expected)
            sides: dict[str, Callable[[int], LoadResult]] = {}
            for count in range(1, MAX_REPLICAS + 1):
                script = spread_script(directory, urls[:count], body_path)
                sides[str(count)] = lambda s, script=script: run_spread(urls[0], script, s)
            results = interleaved(sides, rounds, duration)
    best = {count: best_of(runs) for count, runs in results.items()}
    one, two = best["1"], best["2"]
    return [
        BenchRecord(
            "predict_replicas2_vs_1",
            two.requests_per_s,
            one.requests_per_s,
            "requests/s",
            "one replica process under the same wrk load",
            bar=RATE_BAR,
            details={
                "load_generator": f"{wrk_version()}; {WRK_THREADS} threads, {CONNECTIONS} "
                "connections in all, thread i pinned to replica i mod n",
                "replica": "novikoff serve --role replica (uvicorn, 1 worker each), loopback",
                "broker": broker_name,
                "dimension": DIMENSION,
                "model_version": engine.snapshot.model_version,
                "duration_s": duration,
                "rounds": rounds,
                "cpus": os.cpu_count(),
                "requests_per_s_by_replicas": {n: r.requests_per_s for n, r in best.items()},
                "p99_ms_by_replicas": {n: r.p99_ms for n, r in best.items()},
                "errors_by_replicas": {n: r.errors for n, r in best.items()},
                "runs_rps": {n: [r.requests_per_s for r in runs] for n, runs in results.items()},
            },
        )
    ]
