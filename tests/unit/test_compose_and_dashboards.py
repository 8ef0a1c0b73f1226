"""docker-compose.yml, the Prometheus config and the Grafana dashboard, checked without Docker.

No Docker engine runs here, so the compose file is parsed: the services and ports it promises, the
files it mounts, the config it hands novikoff. Every metric name a PromQL expression uses (Grafana
panels, Prometheus alert rules) must be one ``service.observability.metrics.Metrics`` exports.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from service.cli.synthetic import SyntheticStream
from service.http.auth.tokens import parse_tokens
from service.observability.metrics import Metrics
from service.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
PROMETHEUS = ROOT / "config" / "prometheus.yml"
ALERTS = ROOT / "config" / "prometheus-alerts.yml"
GRAFANA = ROOT / "config" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "novikoff.json"
DATASOURCES = GRAFANA / "provisioning" / "datasources" / "prometheus.yml"
DASHBOARD_PROVIDERS = GRAFANA / "provisioning" / "dashboards" / "novikoff.yml"

NOVIKOFF_PORT = 8000
LEARNERS = ("learner-1", "learner-2")
REPLICAS = ("replica-1", "replica-2")
SERVERS = (*LEARNERS, *REPLICAS)
"""Every ``novikoff serve`` of the compose file."""
PROMETHEUS_PORT = 9090
GRAFANA_PORT = 3000

SAMPLE_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
    "stateset": ("",),
    "unknown": ("",),
}
PROMETHEUS_OWN_SERIES = frozenset({"up"})
"""Series Prometheus itself attaches to every scrape target."""

PROMQL_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"}
    | {"group_left", "group_right", "inf", "nan", "atan2", "start", "end"}
)


def exported_series_names() -> set[str]:
    """Every series name novikoff's registry can expose, whether or not it has a sample yet
    (a read replica's ``novikoff_model_age_seconds`` included)."""
    registry = CollectorRegistry()
    Metrics(registry).watch_model_age(lambda: None)
    names: set[str] = set()
    for family in registry.collect():
        names.update(family.name + suffix for suffix in SAMPLE_SUFFIXES[family.type])
    return names


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords and labels removed).

    >>> sorted(promql_metric_names(
    ...     'sum by (reason) (rate(a_total{x="y"}[$__rate_interval])) / ignoring(r) b'
    ... ))
    ['a_total', 'b']
    """
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', "", expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\$\{?\w+\}?", " ", text)
    text = re.sub(r"\boffset\s+-?\w+", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?", text):
        name, is_call = match.group(1), match.group(2)
        if not is_call and name.lower() not in PROMQL_KEYWORDS:
            names.add(name)
    return names


def role_of(name: str) -> str:
    """``learner`` or ``replica``: what a compose server's name says it is."""
    return name.split("-", maxsplit=1)[0]


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = load_yaml(COMPOSE)
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return dict(compose["services"])


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    document = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def exported() -> set[str]:
    return exported_series_names()


def command_of(service: dict[str, Any]) -> list[str]:
    command = service.get("command", [])
    return shlex.split(command) if isinstance(command, str) else [str(part) for part in command]


def command_options(args: list[str]) -> dict[str, str]:
    """``--flag value`` and ``--flag=value`` options of a command line."""
    options: dict[str, str] = {}
    for flag, following in itertools.pairwise([*args, ""]):
        if flag.startswith("--"):
            name, equals, value = flag.partition("=")
            options[name] = value if equals else following
    return options


def published_ports(service: dict[str, Any]) -> dict[int, int]:
    """Container port -> host port of a service's ``ports`` list."""
    ports: dict[int, int] = {}
    for entry in service.get("ports", []):
        host, _, container = str(entry).rpartition(":")
        ports[int(container.split("/")[0])] = int(host.rpartition(":")[2])
    return ports


def bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> repository path of a service's ``./`` bind mounts."""
    mounts: dict[str, Path] = {}
    for entry in service.get("volumes", []):
        source, _, rest = str(entry).partition(":")
        if source.startswith("./"):
            mounts[rest.split(":")[0]] = ROOT / source
    return mounts


def grafana_targets(dashboard: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    panels = list(dashboard["panels"])
    for panel in dashboard["panels"]:
        panels.extend(panel.get("panels", []))
    return [(panel["title"], target) for panel in panels for target in panel.get("targets", [])]


# -- the compose file ---------------------------------------------------------------------------


def test_compose_has_every_part(services: dict[str, Any]) -> None:
    assert {"kafka", *SERVERS, "nginx", "producer", "prometheus", "grafana"} <= set(services)


def test_two_learners_and_two_replicas(services: dict[str, Any]) -> None:
    roles = {name: services[name]["environment"]["NOVIKOFF_SERVICE__ROLE"] for name in SERVERS}
    assert roles == {**dict.fromkeys(LEARNERS, "learner"), **dict.fromkeys(REPLICAS, "replica")}
    states = [
        volume
        for name in LEARNERS
        for volume in services[name]["volumes"]
        if str(volume).endswith(":/var/lib/novikoff")
    ]
    assert len(set(states)) == len(LEARNERS), "each learner keeps its own checkpoint cache"


def test_kafka_is_a_single_kraft_node(services: dict[str, Any]) -> None:
    kafka = services["kafka"]
    assert str(kafka["image"]).startswith("apache/kafka:")
    env = kafka["environment"]
    assert set(str(env["KAFKA_PROCESS_ROLES"]).split(",")) == {"broker", "controller"}
    assert str(env["KAFKA_CONTROLLER_QUORUM_VOTERS"]) == f"{env['KAFKA_NODE_ID']}@kafka:9093"
    assert "zookeeper" not in json.dumps(services).lower()
    for key in ("OFFSETS_TOPIC", "TRANSACTION_STATE_LOG"):
        assert int(env[f"KAFKA_{key}_REPLICATION_FACTOR"]) == 1, "one node cannot replicate"


def test_novikoff_reaches_kafka_at_an_advertised_listener(services: dict[str, Any]) -> None:
    advertised = str(services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"])
    addresses = {listener.split("://")[1] for listener in advertised.split(",")}
    for name in (*SERVERS, "producer"):
        assert services[name]["environment"]["KAFKA_BOOTSTRAP_SERVERS"] in addresses


def test_ports_are_published(services: dict[str, Any]) -> None:
    assert published_ports(services["nginx"]) == {NOVIKOFF_PORT: NOVIKOFF_PORT}
    for name in SERVERS:
        assert published_ports(services[name]) == {}, f"{name} is reached through nginx"
    assert published_ports(services["prometheus"]) == {PROMETHEUS_PORT: PROMETHEUS_PORT}
    assert published_ports(services["grafana"]) == {GRAFANA_PORT: GRAFANA_PORT}
    assert 9094 in published_ports(services["kafka"]), "host clients need a listener"


@pytest.mark.parametrize("name", SERVERS)
def test_novikoff_serves_and_producer_produces(services: dict[str, Any], name: str) -> None:
    assert command_of(services[name]) == ["serve"]
    assert command_of(services["producer"])[0] == "produce"
    for each in (name, "producer"):
        assert services[each]["build"] == ".", "both run the image the Dockerfile builds"
    assert (ROOT / "Dockerfile").is_file()
    env = services[name]["environment"]
    assert env["NOVIKOFF_HTTP__HOST"] == "0.0.0.0", "a container must listen beyond loopback"
    assert int(env["NOVIKOFF_HTTP__PORT"]) == NOVIKOFF_PORT


def test_every_bind_mount_exists(services: dict[str, Any]) -> None:
    for name, service in services.items():
        for target, source in bind_mounts(service).items():
            assert source.exists(), f"{name} mounts missing {source} at {target}"


@pytest.mark.parametrize("name", SERVERS)
def test_novikoff_config_loads_with_the_compose_environment(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    service = services[name]
    env = {key: str(value) for key, value in service["environment"].items()}
    config = bind_mounts(service)[env.pop("NOVIKOFF_CONFIG")]
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("NOVIKOFF_CONFIG", raising=False)
    settings = load_settings(config)
    assert settings.http.port == NOVIKOFF_PORT
    assert settings.kafka.bootstrap_servers == env["KAFKA_BOOTSTRAP_SERVERS"]
    assert [reference.name for reference in settings.bound.references] == ["u"]
    assert settings.http.auth == "token"
    assert "/metrics" in settings.http.open_paths, "the bundled Prometheus scrapes without a token"
    assert settings.service.role == role_of(name)
    # Learners write the state records replicas follow only with transactions on.
    assert settings.kafka.transactions or role_of(name) == "replica"


@pytest.mark.parametrize("name", SERVERS)
def test_novikoff_reads_its_tokens_from_a_secret(
    compose: dict[str, Any], services: dict[str, Any], name: str
) -> None:
    service = services[name]
    env = service["environment"]
    assert env["NOVIKOFF_HTTP__AUTH"] == "token"
    assert "NOVIKOFF_HTTP_TOKENS" not in env, "tokens come from the secret, not the compose file"
    (secret,) = service["secrets"]
    assert env["NOVIKOFF_HTTP__TOKENS_FILE"] == f"/run/secrets/{secret}"
    source = str(compose["secrets"][secret]["file"])
    variable, _, default = source.removeprefix("${").removesuffix("}").partition(":-")
    assert variable == "HTTP_TOKENS_FILE", "an operator's own file replaces the example"
    entries = parse_tokens((ROOT / default).read_text(encoding="utf-8"), default)
    assert [sorted(entry.scopes) for entry in entries] == [["predict", "read"]]


def test_reference_separator_is_the_producers(services: dict[str, Any]) -> None:
    """The configured ``u`` is the separator of the stream the producer service publishes."""
    options = command_options(command_of(services["producer"]))
    config = tomllib.loads(
        bind_mounts(services[LEARNERS[0]])["/opt/novikoff/config/compose.toml"].read_text()
    )
    stream = SyntheticStream(
        dim=int(options["--dim"]),
        seed=int(options["--seed"]),
        bias=bool(config["model"]["bias"]),
    )
    assert config["model"]["dim"] == stream.dim
    (reference,) = config["bound"]["references"]
    assert reference["weights"] == stream.reference.tolist()


# -- Prometheus ---------------------------------------------------------------------------------


def test_prometheus_scrapes_novikoff_and_loads_the_alerts(services: dict[str, Any]) -> None:
    config = load_yaml(PROMETHEUS)
    (job,) = config["scrape_configs"]
    targets = {
        target: group["labels"]["role"]
        for group in job["static_configs"]
        for target in group["targets"]
    }
    assert targets == {f"{name}:{NOVIKOFF_PORT}": role_of(name) for name in SERVERS}
    assert job.get("metrics_path", "/metrics") == "/metrics"
    mounts = bind_mounts(services["prometheus"])
    assert mounts["/etc/prometheus/prometheus.yml"] == PROMETHEUS
    for rule_file in config["rule_files"]:
        assert mounts[rule_file] == ALERTS


def test_alert_rules_use_exported_metrics(exported: set[str]) -> None:
    rules = [rule for group in load_yaml(ALERTS)["groups"] for rule in group["rules"]]
    assert rules
    for rule in rules:
        names = promql_metric_names(rule["expr"])
        assert names, rule["alert"]
        assert names <= exported | PROMETHEUS_OWN_SERIES, (rule["alert"], names - exported)


# -- Grafana ------------------------------------------------------------------------------------


def test_grafana_is_provisioned_from_the_repository(services: dict[str, Any]) -> None:
    mounts = bind_mounts(services["grafana"])
    assert mounts["/etc/grafana/provisioning"] == GRAFANA / "provisioning"
    (provider,) = load_yaml(DASHBOARD_PROVIDERS)["providers"]
    assert mounts[provider["options"]["path"]] == DASHBOARD.parent


def test_dashboard_queries_the_provisioned_datasource(dashboard: dict[str, Any]) -> None:
    (datasource,) = load_yaml(DATASOURCES)["datasources"]
    assert datasource["url"] == f"http://prometheus:{PROMETHEUS_PORT}"
    for title, target in grafana_targets(dashboard):
        assert target["datasource"]["uid"] == datasource["uid"], title


def test_dashboard_uses_only_exported_metrics(
    dashboard: dict[str, Any], exported: set[str]
) -> None:
    used: set[str] = set()
    for title, target in grafana_targets(dashboard):
        names = promql_metric_names(target["expr"])
        assert names, f"{title}: {target['expr']} selects no metric"
        assert names <= exported, f"{title}: not exported: {sorted(names - exported)}"
        used |= names
    assert {"novikoff_mistakes_total", "novikoff_bound"} <= used


@pytest.mark.parametrize(
    ("title", "metric"),
    [
        ("Mistakes against the bound", "novikoff_bound"),
        ("Mistake rate", "novikoff_mistakes_total"),
        ("Invalid events by reason", "novikoff_invalid_events_total"),
        ("Consumer lag", "novikoff_consumer_lag"),
        ("Event-processing latency", "novikoff_batch_processing_seconds_bucket"),
        ("HTTP request latency", "novikoff_http_request_duration_seconds_bucket"),
        ("Replica model age", "novikoff_model_age_seconds"),
    ],
)
def test_dashboard_has_the_promised_panels(
    dashboard: dict[str, Any], title: str, metric: str
) -> None:
    exprs = [
        target["expr"] for panel_title, target in grafana_targets(dashboard) if panel_title == title
    ]
    assert exprs, f"no panel titled {title!r}"
    assert any(metric in promql_metric_names(expr) for expr in exprs)


def test_panels_do_not_overlap(dashboard: dict[str, Any]) -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_metric_name_extraction_sees_through_promql() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, route) (rate(novikoff_x_bucket{route=~"/p.*"}'
        "[5m] offset 1h))) > on() group_left(reference) novikoff_y and bool 1e3"
    )
    assert promql_metric_names(expr) == {"novikoff_x_bucket", "novikoff_y"}


def test_an_unknown_metric_would_be_caught(exported: set[str]) -> None:
    assert "novikoff_mistakes_total" in exported
    assert "novikoff_mistake_total" not in exported
    assert promql_metric_names("rate(novikoff_mistake_total[1m])") - exported
