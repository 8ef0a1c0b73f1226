"""The settings' sections: one frozen model per TOML table (``[kafka]``, ``[model]``, ...), with
their defaults and per-field checks. :mod:`service.settings.loading` assembles them into the one
:class:`~service.settings.loading.Settings` object; cross-section rules live there."""

from __future__ import annotations

import itertools
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from consumers.mixing.contribution import default_contributions_topic
from consumers.state.chunks import DEFAULT_MAX_RECORD_BYTES, MIN_RECORD_BYTES
from consumers.state.topic import default_state_topic
from learning.encoders import DEFAULT_HASH, DEFAULT_MAX_FEATURES_PER_EVENT, HashName
from learning.predictor import PredictorName
from service.cli.brokers.distribution import CACHE_ENV_VAR as BROKER_CACHE_ENV_VAR

CONFIG_ENV_VAR = "NOVIKOFF_CONFIG"
ENV_PREFIX = "NOVIKOFF_"
ENV_NESTED_DELIMITER = "__"
BOOTSTRAP_ENV_VAR = "KAFKA_BOOTSTRAP_SERVERS"

# Group timing: Apache Kafka's own consumer defaults (KIP-735 raised the session timeout to 45 s).
# A member is declared dead after a session timeout without heartbeats, so this bounds how long a
# crashed instance holds its partitions; heartbeats go at a third of it (Kafka's rule of thumb);
# the poll interval bounds one poll-learn-checkpoint cycle before the member is presumed stuck.
DEFAULT_SESSION_TIMEOUT_MS = 45_000
DEFAULT_HEARTBEAT_INTERVAL_MS = 3_000
DEFAULT_MAX_POLL_INTERVAL_MS = 300_000
DEFAULT_MAX_POLL_RECORDS = 2_000
DEFAULT_POLL_TIMEOUT_MS = 200
DEFAULT_MISSING_TOPIC_GRACE_SECONDS = 10.0

DEFAULT_HTTP_PORT = 8000
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_BATCH_SIZE = 10_000
DEFAULT_MAX_FEATURES = 10_000
DEFAULT_TOKENS_RELOAD_SECONDS = 1.0
# A client address that presents 20 wrong tokens within a minute is refused for a minute.
DEFAULT_AUTH_FAILURE_LIMIT = 20
DEFAULT_AUTH_FAILURE_WINDOW_SECONDS = 60.0
DEFAULT_AUTH_LOCKOUT_SECONDS = 60.0
DEFAULT_AUTH_MAX_TRACKED_CLIENTS = 10_000
TOKENS_ENV_VAR = "NOVIKOFF_HTTP_TOKENS"
"""Bearer tokens of the HTTP API (see :mod:`service.http.auth.tokens`); never read from the TOML."""
NON_SETTING_ENV_VARS = frozenset({CONFIG_ENV_VAR, BROKER_CACHE_ENV_VAR, TOKENS_ENV_VAR})
"""novikoff's variables that are no setting: the config file, the Apache Kafka jar cache, the
HTTP tokens."""
ProbePath = Literal["/metrics", "/healthz", "/readyz"]
PROBE_PATHS: tuple[ProbePath, ...] = ("/metrics", "/healthz", "/readyz")
"""The routes that are open by default (probes and Prometheus) and can be closed."""
MOVED_SETTINGS = {"max_features": "model.max_features_per_event"}
"""HTTP settings that moved, and where to: naming one gives that hint instead of "unknown"."""

DEFAULT_CHECKPOINT_EVERY_EVENTS = 10_000
DEFAULT_CHECKPOINT_EVERY_SECONDS = 5.0
DEFAULT_SHUTDOWN_DEADLINE_SECONDS = 15.0
# A replica is not ready once it has not confirmed for this long that its model is the newest in
# the state topic (four learner checkpoint intervals of 5 s, plus margin for a broker hiccup).
DEFAULT_REPLICA_MAX_MODEL_AGE_SECONDS = 30.0
DEFAULT_MARGIN_WINDOW = 1_000
DEFAULT_MAX_VOTERS = 64
DEFAULT_VOCABULARY_SIZE = 65_536
MAX_HASHING_BITS = 24
MAX_REFERENCES = 16

# Reference names become Prometheus label values and dashboard keys: short and plain.
REFERENCE_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$"
PERCEPTRON_LABELS = (-1, 1)


class SettingsError(ValueError):
    """The configuration cannot be used; the message lists every problem and how to fix it."""


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class KafkaSettings(_Section):
    """Where events come from, where rejected events go, and how the consumer talks to Kafka."""

    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = Field(default="events", min_length=1, max_length=249)
    group_id: str = Field(default="novikoff", min_length=1)
    dlq_topic: str | None = Field(default=None, min_length=1, max_length=249)
    state_topic: str | None = Field(default=None, min_length=1, max_length=249)
    state_record_max_bytes: int = Field(
        default=DEFAULT_MAX_RECORD_BYTES, ge=MIN_RECORD_BYTES, le=DEFAULT_MAX_RECORD_BYTES
    )
    transactions: bool = True
    warm_standby: bool = True
    client_id: str = "novikoff"
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    session_timeout_ms: int = Field(default=DEFAULT_SESSION_TIMEOUT_MS, gt=0)
    heartbeat_interval_ms: int = Field(default=DEFAULT_HEARTBEAT_INTERVAL_MS, gt=0)
    max_poll_interval_ms: int = Field(default=DEFAULT_MAX_POLL_INTERVAL_MS, gt=0)
    max_poll_records: int = Field(default=DEFAULT_MAX_POLL_RECORDS, gt=0)
    poll_timeout_ms: int = Field(default=DEFAULT_POLL_TIMEOUT_MS, gt=0)
    missing_topic_grace_seconds: float = Field(default=DEFAULT_MISSING_TOPIC_GRACE_SECONDS, gt=0)
    replication_factor: int | None = Field(default=None, ge=1)
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_plain_username: str | None = None
    sasl_plain_password: SecretStr | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_password: SecretStr | None = None
    ssl_check_hostname: bool = True

    @field_validator("bootstrap_servers")
    @classmethod
    def _host_port_list(cls, value: str) -> str:
        servers = [part.strip() for part in value.split(",") if part.strip()]
        if not servers:
            raise ValueError("name at least one broker as host:port")
        for server in servers:
            host, sep, port = server.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"{server!r} is not host:port (e.g. 127.0.0.1:9092)")
        return ",".join(servers)

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSettings:
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be below session_timeout_ms")
        sasl = self.security_protocol.startswith("SASL")
        if sasl and self.sasl_mechanism is None:
            raise ValueError(f"security_protocol {self.security_protocol} needs sasl_mechanism")
        if sasl and (self.sasl_plain_username is None or self.sasl_plain_password is None):
            raise ValueError("SASL needs sasl_plain_username and sasl_plain_password")
        return self

    @property
    def dead_letter_topic(self) -> str:
        """``dlq_topic``, or ``<topic>.dlq`` when it is not set."""
        return self.dlq_topic or f"{self.topic}.dlq"

    @property
    def state_topic_name(self) -> str:
        """``state_topic``, or ``<topic>.state`` when it is not set (compacted; see DESIGN.md)."""
        return self.state_topic or default_state_topic(self.topic)

    def client_config(self) -> dict[str, Any]:
        """Keyword arguments shared by every kafka-python client (connection and security)."""
        config: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers.split(","),
            "client_id": self.client_id,
            "security_protocol": self.security_protocol,
        }
        if self.sasl_mechanism is not None:
            config["sasl_mechanism"] = self.sasl_mechanism
            config["sasl_plain_username"] = self.sasl_plain_username
            if self.sasl_plain_password is not None:
                config["sasl_plain_password"] = self.sasl_plain_password.get_secret_value()
        if self.security_protocol.endswith("SSL"):
            config["ssl_check_hostname"] = self.ssl_check_hostname
            for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
                value = getattr(self, key)
                if value is not None:
                    config[key] = str(value)
            if self.ssl_password is not None:
                config["ssl_password"] = self.ssl_password.get_secret_value()
        return config

    def consumer_config(self) -> dict[str, Any]:
        """Keyword arguments for ``KafkaConsumer``: manual offsets, batch polling, group timing."""
        return {
            **self.client_config(),
            "group_id": self.group_id,
            "enable_auto_commit": False,
            "auto_offset_reset": self.auto_offset_reset,
            "session_timeout_ms": self.session_timeout_ms,
            "heartbeat_interval_ms": self.heartbeat_interval_ms,
            "max_poll_interval_ms": self.max_poll_interval_ms,
            "max_poll_records": self.max_poll_records,
        }

    def producer_config(self) -> dict[str, Any]:
        """Keyword arguments for ``KafkaProducer`` (dead-letter writer, ``novikoff produce``)."""
        return {**self.client_config(), "acks": "all"}


class ModelSettings(_Section):
    """What the learner looks like: variant, features, labels and the predictor served."""

    variant: Literal["binary", "multiclass"] = "binary"
    encoding: Literal["dense", "schema", "hashing", "vocabulary"] = "dense"
    dim: int = Field(default=2, ge=1, le=DEFAULT_MAX_FEATURES)
    feature_names: tuple[str, ...] = ()
    hashing_bits: int = Field(default=10, ge=1, le=MAX_HASHING_BITS)
    hashing: HashName = DEFAULT_HASH
    max_features_per_event: int = Field(default=DEFAULT_MAX_FEATURES_PER_EVENT, ge=1)
    vocabulary_size: int = Field(default=DEFAULT_VOCABULARY_SIZE, ge=1)
    bias: bool = True
    predictor: PredictorName = "averaged"
    labels: dict[str, int] = Field(default_factory=lambda: {"-1": -1, "1": 1})
    classes: tuple[str, ...] = ()
    seed: int = Field(default=0, ge=0)
    max_voters: int = Field(default=DEFAULT_MAX_VOTERS, ge=1)
    prequential_voted: bool = True

    @model_validator(mode="after")
    def _consistent(self) -> ModelSettings:
        if self.encoding == "schema":
            if not self.feature_names:
                raise ValueError('encoding "schema" needs feature_names')
            if len(set(self.feature_names)) != len(self.feature_names):
                raise ValueError("feature_names has duplicates")
        if self.variant == "binary":
            self._check_binary_labels()
        elif len(set(self.classes)) != len(self.classes) or len(self.classes) == 1:
            raise ValueError(
                "multiclass classes must be empty (discovered as they appear) or at least two "
                "distinct names"
            )
        return self

    def _check_binary_labels(self) -> None:
        values = set(self.labels.values())
        if not values <= set(PERCEPTRON_LABELS) or len(values) != len(PERCEPTRON_LABELS):
            raise ValueError(
                "labels must map event labels to both -1 and 1, e.g. {yes = 1, no = -1}"
            )

    @property
    def feature_dimension(self) -> int | None:
        """Number of raw features, bias excluded (None for a growing vocabulary)."""
        if self.encoding == "schema":
            return len(self.feature_names)
        if self.encoding == "hashing":
            return 1 << self.hashing_bits
        if self.encoding == "vocabulary":
            return None
        return self.dim


class ReferenceSettings(_Section):
    """A reference separator ``u`` for the bound: inline weights or a JSON file of weights."""

    name: str = Field(pattern=REFERENCE_NAME_PATTERN)
    weights: tuple[float, ...] | tuple[tuple[float, ...], ...] | None = None
    path: Path | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ReferenceSettings:
        if (self.weights is None) == (self.path is None):
            raise ValueError(f"reference {self.name!r}: give exactly one of weights or path")
        if self.path is not None and (self.path.is_absolute() or ".." in self.path.parts):
            raise ValueError(
                f"reference {self.name!r}: path must be relative to bound.reference_dir "
                "and must not contain '..'"
            )
        return self


class BoundSettings(_Section):
    """The mistake bounds tracked live: gamma grid and reference separators."""

    gamma_grid: tuple[float, ...] | None = None
    reference_dir: Path = Path("config/references")
    references: tuple[ReferenceSettings, ...] = Field(default=(), max_length=MAX_REFERENCES)
    margin_window: int = Field(default=DEFAULT_MARGIN_WINDOW, ge=1)

    @field_validator("gamma_grid")
    @classmethod
    def _positive_grid(cls, value: tuple[float, ...] | None) -> tuple[float, ...] | None:
        if value is not None and (not value or any(not (g > 0) for g in value)):
            raise ValueError("gamma_grid must be a non-empty list of positive numbers")
        if value is not None and any(b <= a for a, b in itertools.pairwise(value)):
            raise ValueError("gamma_grid must be strictly increasing")
        return value

    @field_validator("references")
    @classmethod
    def _unique_names(cls, value: tuple[ReferenceSettings, ...]) -> tuple[ReferenceSettings, ...]:
        names = [ref.name for ref in value]
        if len(set(names)) != len(names):
            raise ValueError("reference names must be unique")
        return value


class HttpSettings(_Section):
    """The HTTP API: where it listens and the limits that protect it."""

    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_HTTP_PORT, ge=0, le=65_535)
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=64)
    max_batch_size: int = Field(default=DEFAULT_MAX_BATCH_SIZE, ge=1)
    access_log: bool = False
    auth: Literal["none", "token"] = "none"
    tokens_file: Path | None = None
    tokens_reload_seconds: float = Field(default=DEFAULT_TOKENS_RELOAD_SECONDS, ge=0)
    open_paths: tuple[ProbePath, ...] = PROBE_PATHS
    auth_failure_limit: int = Field(default=DEFAULT_AUTH_FAILURE_LIMIT, ge=1)
    auth_failure_window_seconds: float = Field(default=DEFAULT_AUTH_FAILURE_WINDOW_SECONDS, gt=0)
    auth_lockout_seconds: float = Field(default=DEFAULT_AUTH_LOCKOUT_SECONDS, gt=0)
    auth_max_tracked_clients: int = Field(default=DEFAULT_AUTH_MAX_TRACKED_CLIENTS, ge=1)
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_ca_certs: Path | None = None
    require_client_cert: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> HttpSettings:
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise ValueError("ssl_keyfile needs ssl_certfile (the server certificate)")
        if self.ssl_ca_certs is not None and self.ssl_certfile is None:
            raise ValueError("ssl_ca_certs is for mutual TLS and needs ssl_certfile too")
        if self.require_client_cert and self.ssl_ca_certs is None:
            raise ValueError("require_client_cert needs ssl_ca_certs (the clients' CA)")
        return self

    def uvicorn_ssl_options(self) -> dict[str, Any]:
        """uvicorn's ``ssl_*`` keyword arguments (empty without TLS)."""
        if self.ssl_certfile is None:
            return {}
        options: dict[str, Any] = {"ssl_certfile": str(self.ssl_certfile)}
        if self.ssl_keyfile is not None:
            options["ssl_keyfile"] = str(self.ssl_keyfile)
        if self.ssl_ca_certs is not None:
            options["ssl_ca_certs"] = str(self.ssl_ca_certs)
        options["ssl_cert_reqs"] = ssl.CERT_REQUIRED if self.require_client_cert else ssl.CERT_NONE
        return options

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            for old, new in MOVED_SETTINGS.items():
                if old in data:
                    raise ValueError(
                        f"http.{old} moved to {new} (the consumer and HTTP share one bound)"
                    )
        return data


class CheckpointSettings(_Section):
    """Where the model is saved and how often."""

    path: Path = Path("state")
    every_events: int = Field(default=DEFAULT_CHECKPOINT_EVERY_EVENTS, ge=1)
    every_seconds: float = Field(default=DEFAULT_CHECKPOINT_EVERY_SECONDS, gt=0)


class LoggingSettings(_Section):
    """How the service logs: one line per notable event, never one per normal event."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    json_lines: bool = Field(default=False, alias="json")

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @field_validator("level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value


class MixingSettings(_Section):
    """Partition-parallel learning with iterative parameter mixing (``consumers.mixing``).

    Off while ``round_events`` is 0. With R > 0 every partition of the topic is a shard: each
    learns its next R valid events from the newest mixed weights, and the shards' weights are
    averaged into the next mixed model once all have finished the round.
    """

    round_events: int = Field(default=0, ge=0)
    round_seconds: float = Field(default=0.0, ge=0)
    contributions_topic: str | None = Field(default=None, min_length=1, max_length=249)

    @property
    def enabled(self) -> bool:
        """Whether mixing mode is on."""
        return self.round_events > 0

    def contributions_topic_name(self, topic: str) -> str:
        """``contributions_topic``, or ``<topic>.mixing`` when it is not set."""
        return self.contributions_topic or default_contributions_topic(topic)


ROLES = ("learner", "replica")
Role = Literal["learner", "replica"]


class ServiceSettings(_Section):
    """The process as a whole: its role and how it stops."""

    shutdown_deadline_seconds: float = Field(default=DEFAULT_SHUTDOWN_DEADLINE_SECONDS, gt=0)
    role: Role = "learner"
    replica_max_model_age_seconds: float = Field(
        default=DEFAULT_REPLICA_MAX_MODEL_AGE_SECONDS, gt=0
    )
