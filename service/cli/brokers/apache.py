"""An Apache Kafka broker (KRaft combined mode, one node) on free loopback ports.

The jars come from the cache ``scripts/kafka-deps.sh`` fills
(:mod:`service.cli.brokers.distribution`). Its data directory holds the generated
``server.properties``, the KRaft log directory and the controller port; a restart on the same
directory and port gives back every topic, record and committed offset, also after
:meth:`ApacheKafkaBroker.kill`.
"""

from __future__ import annotations

import base64
import json
import logging
import shutil
import subprocess
import tempfile
import time
import uuid
from contextlib import nullcontext
from pathlib import Path

from kafka import KafkaAdminClient

from service.cli.brokers.distribution import LOG_CONFIG_PATH, Distribution, require
from service.cli.brokers.net import LOOPBACK, PORT_POLL_S, accepts, free_port, terminate_process

logger = logging.getLogger(__name__)

HEAP_CAP = "512m"
"""The JVM's maximum heap: ample for one node serving tests, small beside the test processes."""
START_TIMEOUT_S = 90.0
"""From ``java`` to the first metadata answer; a cold JVM on a busy two-core machine is slow."""
FORMAT_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
NODE_ID = 1
SERVER_PROPERTIES = "server.properties"
LOG_DIR_NAME = "kraft-log"
PORTS_FILE = "novikoff-ports.json"
FORMATTED_MARKER = "meta.properties"
"""Written into the log directory by ``StorageTool format``; present means formatted."""
BROKER_MAIN = "kafka.Kafka"
STORAGE_TOOL_MAIN = "kafka.tools.StorageTool"
CLIENT_ID = "novikoff-broker-readiness"

BROKER_CONFIG: dict[str, str] = {
    "process.roles": "broker,controller",
    "node.id": str(NODE_ID),
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    # One node: every internal topic has one replica, and one in-sync replica suffices.
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "min.insync.replicas": "1",
    # One node and one disk: the default 50 partitions would only slow the first group join.
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    # Every topic is created explicitly; a metadata request for a missing one creates nothing.
    "auto.create.topics.enable": "false",
}


class BrokerStartError(RuntimeError):
    """The broker process exited, or never answered, while starting."""


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding, no leading ``-``
    (``StorageTool`` would read one as an option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


class ApacheKafkaBroker:
    """An Apache Kafka broker subprocess (KRaft, broker and controller in one JVM) on loopback.

    Parameters
    ----------
    data_dir
        Its storage (formatted on the first start only) and configuration. ``None``: a temporary
        directory, removed by :meth:`stop`.
    log_path
        Where the broker's log goes (appended); discarded when ``None``.
    port
        The port clients connect to (default: a free one).
    advertised_port
        The port clients are told to use, when they reach the broker through a proxy.
    heap
        The JVM's ``-Xmx``.
    """

    kind = "apache"

    def __init__(
        self,
        data_dir: Path | None = None,
        log_path: Path | None = None,
        *,
        port: int | None = None,
        advertised_port: int | None = None,
        heap: str = HEAP_CAP,
    ) -> None:
        self._java, self._dist = require()
        self._owns_data_dir = data_dir is None
        self.data_dir = data_dir if data_dir is not None else Path(tempfile.mkdtemp("-kafka"))
        self.log_path = log_path
        self.port = port if port is not None else free_port()
        self.advertised_port = advertised_port
        self.heap = heap
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` clients connect to."""
        return f"{LOOPBACK}:{self.advertised_port or self.port}"

    @property
    def distribution(self) -> Distribution:
        """The Apache Kafka version and jars this broker runs."""
        return self._dist

    @property
    def description(self) -> str:
        """What this broker is, for logs and benchmark records."""
        return (
            f"Apache Kafka {self._dist.version} (KRaft, one node, loopback, "
            f"heap {self.heap}, data on disk)"
        )

    @property
    def running(self) -> bool:
        """Whether the broker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The JVM's process id while it runs."""
        return self._proc.pid if self.running and self._proc is not None else None

    @property
    def log_dir(self) -> Path:
        """The KRaft log directory (topics, records, offsets, cluster metadata)."""
        return self.data_dir / LOG_DIR_NAME

    @property
    def formatted(self) -> bool:
        """Whether the storage is formatted already."""
        return (self.log_dir / FORMATTED_MARKER).is_file()

    def start(self) -> ApacheKafkaBroker:
        """Format the storage if it is new, start the broker and wait until it answers a
        metadata request naming itself."""
        if self.running:
            return self
        started = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        properties = self._write_properties(self._controller_port())
        if not self.formatted:
            self._format(properties)
        java_options = [f"-Xmx{self.heap}", f"-Dlog4j2.configurationFile={LOG_CONFIG_PATH}"]
        command = [self._java, *java_options, "-cp", self._dist.classpath, BROKER_MAIN]
        log = self.log_path.open("ab") if self.log_path else nullcontext(subprocess.DEVNULL)
        with log as output:
            # A session of its own: Ctrl-C in a terminal signals the whole foreground process
            # group, and the broker must outlive the service's final checkpoint and commit.
            self._proc = subprocess.Popen(
                [*command, str(properties)],
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_until_ready(started + START_TIMEOUT_S)
        except BaseException:
            self.kill()
            raise
        logger.info(
            "Apache Kafka %s on %s ready in %.1f s (data: %s, log: %s)",
            self._dist.version,
            self.bootstrap,
            time.monotonic() - started,
            self.data_dir,
            self.log_path,
        )
        return self

    def stop(self) -> None:
        """Stop the broker cleanly (SIGTERM, SIGKILL after a timeout); a temporary data
        directory goes with it."""
        if self._proc is not None:
            terminate_process(self._proc, STOP_TIMEOUT_S)
            self._proc = None
        if self._owns_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the broker, as a crash would; its data directory stays for a restart."""
        if self._proc is None:
            return
        self._proc.kill()
        self._proc.wait()
        self._proc = None

    def __enter__(self) -> ApacheKafkaBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _controller_port(self) -> int:
        """The KRaft controller's port: chosen on the first start and kept in the data directory,
        since formatting records it in the cluster's voter set."""
        ports = self.data_dir / PORTS_FILE
        if ports.is_file():
            return int(json.loads(ports.read_text())["controller"])
        port = free_port()
        ports.write_text(json.dumps({"controller": port}))
        return port

    def _write_properties(self, controller_port: int) -> Path:
        controller = f"{LOOPBACK}:{controller_port}"
        config = {
            **BROKER_CONFIG,
            "controller.quorum.bootstrap.servers": controller,
            "listeners": f"PLAINTEXT://{LOOPBACK}:{self.port},CONTROLLER://{controller}",
            "advertised.listeners": f"PLAINTEXT://{self.bootstrap},CONTROLLER://{controller}",
            "log.dirs": str(self.log_dir),
        }
        path = self.data_dir / SERVER_PROPERTIES
        path.write_text("".join(f"{key}={value}\n" for key, value in config.items()))
        return path

    def _format(self, properties: Path) -> None:
        """``StorageTool format --standalone``: a new cluster whose only voter is this node."""
        command = [
            self._java,
            f"-Xmx{self.heap}",
            f"-Dlog4j2.configurationFile={LOG_CONFIG_PATH}",
            "-cp",
            self._dist.classpath,
            STORAGE_TOOL_MAIN,
            "format",
            "--standalone",
            "--cluster-id",
            new_cluster_id(),
            "--config",
            str(properties),
        ]
        log = self.log_path.open("ab") if self.log_path else nullcontext(subprocess.DEVNULL)
        with log as output:
            result = subprocess.run(
                command,
                check=False,
                stdout=output,
                stderr=subprocess.STDOUT,
                timeout=FORMAT_TIMEOUT_S,
            )
        if result.returncode != 0:
            raise BrokerStartError(
                f"formatting {self.log_dir} failed (exit {result.returncode}); "
                f"see {self.log_path or 'the broker log'}"
            )

    def _wait_until_ready(self, deadline: float) -> None:
        """Until the broker port accepts, then until a metadata request sent there (not to the
        advertised port, whose proxy may not run yet) names this broker."""
        assert self._proc is not None
        while not accepts(LOOPBACK, self.port):
            code = self._proc.poll()
            if code is not None:
                raise BrokerStartError(
                    f"the Apache Kafka broker exited with {code} while starting; "
                    f"see {self.log_path or 'its log (none kept)'}"
                )
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    f"the Apache Kafka broker did not listen on {LOOPBACK}:{self.port} within "
                    f"{START_TIMEOUT_S:g} s; see {self.log_path or 'its log (none kept)'}"
                )
            time.sleep(PORT_POLL_S)
        remaining_ms = max(1, int((deadline - time.monotonic()) * 1000))
        try:
            admin = KafkaAdminClient(
                bootstrap_servers=f"{LOOPBACK}:{self.port}",
                client_id=CLIENT_ID,
                bootstrap_timeout_ms=remaining_ms,
            )
        except Exception as exc:
            raise BrokerStartError(
                f"the Apache Kafka broker on {LOOPBACK}:{self.port} listens but answered no "
                f"metadata request: {exc}; see {self.log_path or 'its log (none kept)'}"
            ) from exc
        admin.close()
