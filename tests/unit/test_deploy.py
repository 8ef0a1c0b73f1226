"""The Kubernetes manifests under deploy/ and the compose load balancer agree with the settings.

No cluster runs here, so the files are parsed (PyYAML) and checked against ``service.settings``:
every container's environment loads as settings (no unknown ``NOVIKOFF_*`` name, no other name
but the broker's), its role is the Deployment's component, its ``http`` port is ``http.port``,
its probes ask ``/healthz`` (liveness) and ``/readyz`` (readiness) on that port and are open
without a token, Services reach that port of the right pods, and Prometheus scrapes ``/metrics``
on it. :func:`manifest_problems` lists what disagrees; mutated copies show each check can fail.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml

from service.cli.main import build_parser
from service.settings import (
    BOOTSTRAP_ENV_VAR,
    CONFIG_ENV_VAR,
    ENV_PREFIX,
    Settings,
    SettingsError,
    load_settings,
)

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = ROOT / "docker-compose.yml"
NGINX = ROOT / "config" / "nginx.conf"
HTTP_PORT_NAME = "http"
LIVENESS_PATH = "/healthz"
READINESS_PATH = "/readyz"
METRICS_PATH = "/metrics"
COMPONENT_LABEL = "app.kubernetes.io/component"
PLAIN_ENV_VARS = frozenset({BOOTSTRAP_ENV_VAR})
"""The only variables without the ``NOVIKOFF_`` prefix the service reads."""
NGINX_SERVER = re.compile(r"^\s*server\s+([\w.-]+):(\d+)", re.MULTILINE)

Documents = list[dict[str, Any]]


def load_manifests() -> Documents:
    documents: Documents = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        documents.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return documents


def of_kind(documents: Documents, kind: str) -> list[dict[str, Any]]:
    return [doc for doc in documents if doc.get("kind") == kind]


def config_files(documents: Documents) -> dict[str, str]:
    """ConfigMap name -> the novikoff TOML it holds (the first ``*.toml`` key)."""
    files = {}
    for config_map in of_kind(documents, "ConfigMap"):
        for key, text in config_map.get("data", {}).items():
            if key.endswith(".toml"):
                files[f"{config_map['metadata']['name']}/{key}"] = text
    return files


def container_settings(
    pod: dict[str, Any], container: dict[str, Any], documents: Documents, workdir: Path
) -> Settings:
    """The settings ``container`` would run with: its environment and its mounted config file."""
    env = {item["name"]: str(item["value"]) for item in container.get("env", [])}
    unknown = {name for name in env if not name.startswith(ENV_PREFIX)} - PLAIN_ENV_VARS
    if unknown:
        raise SettingsError(f"variables the service never reads: {sorted(unknown)}")
    config_path = Path(env.pop(CONFIG_ENV_VAR))
    mounts = {Path(m["mountPath"]): m["name"] for m in container.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    volume = volumes[mounts[config_path.parent]]
    text = config_files(documents)[f"{volume['configMap']['name']}/{config_path.name}"]
    local = workdir / config_path.name
    local.write_text(text, encoding="utf-8")
    args = build_parser().parse_args(container.get("args", []))
    overrides = {"service": {"role": args.role}} if getattr(args, "role", None) else {}
    with mock.patch.dict(os.environ, env, clear=True):
        return load_settings(local, **overrides)


def http_port(container: dict[str, Any]) -> int | None:
    for port in container.get("ports", []):
        if port.get("name") == HTTP_PORT_NAME:
            return int(port["containerPort"])
    return None


def probe_problems(container: dict[str, Any], settings: Settings, where: str) -> Iterator[str]:
    for probe, path in (("livenessProbe", LIVENESS_PATH), ("readinessProbe", READINESS_PATH)):
        get = container.get(probe, {}).get("httpGet", {})
        if get.get("path") != path:
            yield f"{where}: {probe} asks {get.get('path')!r}, not {path}"
        if get.get("port") not in (HTTP_PORT_NAME, settings.http.port):
            yield f"{where}: {probe} port {get.get('port')!r} is not the HTTP port"
        if path not in settings.http.open_paths:
            yield f"{where}: {path} needs a token, so the kubelet's probe would fail"


def deployment_problems(
    deployment: dict[str, Any], documents: Documents, workdir: Path
) -> Iterator[str]:
    name = deployment["metadata"]["name"]
    pod = deployment["spec"]["template"]["spec"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    if deployment["spec"]["selector"]["matchLabels"] != labels:
        yield f"{name}: the selector does not match its pods"
    for container in pod["containers"]:
        where = f"{name}/{container['name']}"
        try:
            settings = container_settings(pod, container, documents, workdir)
        except (SettingsError, KeyError) as exc:
            yield f"{where}: the environment does not load as settings: {exc!r}"
            continue
        component, port = labels.get(COMPONENT_LABEL), http_port(container)
        if settings.service.role != component:
            yield f"{where}: role {settings.service.role} but component {component}"
        if component == "learner" and not settings.kafka.transactions:
            yield f"{where}: a learner without kafka.transactions writes no state for replicas"
        if port != settings.http.port:
            yield f"{where}: port {HTTP_PORT_NAME} is {port}, http.port is {settings.http.port}"
        if settings.http.host != "0.0.0.0":
            yield f"{where}: http.host {settings.http.host} is not reachable from other pods"
        if (
            pod.get("terminationGracePeriodSeconds", 30)
            <= settings.service.shutdown_deadline_seconds
        ):
            yield f"{where}: the grace period does not cover the shutdown deadline"
        yield from probe_problems(container, settings, where)


def service_problems(documents: Documents) -> Iterator[str]:
    pods = [
        (d["spec"]["template"]["metadata"]["labels"], d["spec"]["template"]["spec"])
        for d in of_kind(documents, "Deployment")
    ]
    for service in of_kind(documents, "Service"):
        selector = service["spec"]["selector"]
        chosen = [spec for labels, spec in pods if selector.items() <= labels.items()]
        if not chosen:
            yield f"service {service['metadata']['name']} selects no pod"
        for port in service["spec"]["ports"]:
            for spec in chosen:
                named = {http_port(c) for c in spec["containers"]}
                target = port["targetPort"]
                if target != HTTP_PORT_NAME and target not in named:
                    yield f"service {service['metadata']['name']}: targetPort {target!r}"


def scrape_problems(documents: Documents) -> Iterator[str]:
    jobs = [
        job
        for config_map in of_kind(documents, "ConfigMap")
        for key, text in config_map.get("data", {}).items()
        if key == "prometheus.yml"
        for job in yaml.safe_load(text)["scrape_configs"]
    ]
    if not jobs:
        yield "no Prometheus scrape configuration"
    for job in jobs:
        if job.get("metrics_path", METRICS_PATH) != METRICS_PATH:
            yield f"job {job['job_name']} scrapes {job['metrics_path']}"
        ports = [
            rule["regex"]
            for rule in job.get("relabel_configs", [])
            if rule.get("source_labels") == ["__meta_kubernetes_pod_container_port_name"]
        ]
        if ports != [HTTP_PORT_NAME]:
            yield f"job {job['job_name']} keeps port {ports}, not {HTTP_PORT_NAME!r}"


def manifest_problems(documents: Documents, workdir: Path) -> list[str]:
    """Everything in ``documents`` that disagrees with the settings (empty when all agree)."""
    problems: list[str] = []
    deployments = of_kind(documents, "Deployment")
    roles = {d["spec"]["template"]["metadata"]["labels"].get(COMPONENT_LABEL) for d in deployments}
    if roles != {"learner", "replica"}:
        problems.append(f"Deployments for learners and replicas expected, found {roles}")
    for deployment in deployments:
        problems.extend(deployment_problems(deployment, documents, workdir))
    problems.extend(service_problems(documents))
    problems.extend(scrape_problems(documents))
    return problems


def nginx_problems(compose: dict[str, Any], nginx_conf: str) -> list[str]:
    """The load balancer's upstreams are exactly the compose replicas, on their HTTP port."""
    services = compose["services"]
    replicas = {
        name: int(service["environment"]["NOVIKOFF_HTTP__PORT"])
        for name, service in services.items()
        if service.get("environment", {}).get("NOVIKOFF_SERVICE__ROLE") == "replica"
    }
    upstreams = {host: int(port) for host, port in NGINX_SERVER.findall(nginx_conf)}
    problems = (
        [] if upstreams == replicas else [f"nginx upstreams {upstreams} != replicas {replicas}"]
    )
    listen = re.search(r"^\s*listen\s+(\d+);", nginx_conf, re.MULTILINE)
    published = [str(entry) for entry in services["nginx"].get("ports", [])]
    if listen is None or not any(entry.endswith(f":{listen.group(1)}") for entry in published):
        problems.append(f"nginx listens on {listen and listen.group(1)}, publishes {published}")
    return problems


# -- the files as they are -------------------------------------------------------------------


@pytest.fixture(scope="module")
def manifests() -> Documents:
    return load_manifests()


def test_the_manifests_agree_with_the_settings(manifests: Documents, tmp_path: Path) -> None:
    assert of_kind(manifests, "Deployment") and of_kind(manifests, "Service")
    assert manifest_problems(manifests, tmp_path) == []


def test_the_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    assert listed == {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}


def test_nginx_balances_the_compose_replicas() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    assert nginx_problems(compose, NGINX.read_text()) == []


# -- controls: a mutated copy fails the check ------------------------------------------------


def _container(documents: Documents, component: str) -> dict[str, Any]:
    for deployment in of_kind(documents, "Deployment"):
        if deployment["spec"]["template"]["metadata"]["labels"][COMPONENT_LABEL] == component:
            container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
            return container
    raise AssertionError(component)


def _env(container: dict[str, Any], name: str) -> dict[str, Any]:
    return next(item for item in container["env"] if item["name"] == name)


def _misspell_setting(docs: Documents) -> None:
    _env(_container(docs, "replica"), "NOVIKOFF_HTTP__PORT")["name"] = "NOVIKOFF_HTTP__PROT"


def _misspell_bootstrap(docs: Documents) -> None:
    _env(_container(docs, "learner"), BOOTSTRAP_ENV_VAR)["name"] = "KAFKA_BOOTSTRAP_SERVER"


def _wrong_probe_path(docs: Documents) -> None:
    _container(docs, "replica")["readinessProbe"]["httpGet"]["path"] = "/ready"


def _swapped_probes(docs: Documents) -> None:
    container = _container(docs, "learner")
    container["livenessProbe"], container["readinessProbe"] = (
        container["readinessProbe"],
        container["livenessProbe"],
    )


def _wrong_container_port(docs: Documents) -> None:
    _container(docs, "learner")["ports"][0]["containerPort"] = 8080


def _wrong_role(docs: Documents) -> None:
    _env(_container(docs, "learner"), "NOVIKOFF_SERVICE__ROLE")["value"] = "replica"


def _no_transactions(docs: Documents) -> None:
    _container(docs, "learner")["env"].append(
        {"name": "NOVIKOFF_KAFKA__TRANSACTIONS", "value": "false"}
    )


def _wrong_target_port(docs: Documents) -> None:
    of_kind(docs, "Service")[0]["spec"]["ports"][0]["targetPort"] = "metrics"


def _wrong_selector(docs: Documents) -> None:
    of_kind(docs, "Service")[0]["spec"]["selector"][COMPONENT_LABEL] = "standby"


def _wrong_scrape_path(docs: Documents) -> None:
    config_map = next(d for d in of_kind(docs, "ConfigMap") if "prometheus.yml" in d["data"])
    config_map["data"]["prometheus.yml"] = config_map["data"]["prometheus.yml"].replace(
        "metrics_path: /metrics", "metrics_path: /stats"
    )


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (_misspell_setting, "does not load as settings"),
        (_misspell_bootstrap, "never reads"),
        (_wrong_probe_path, "readinessProbe asks '/ready'"),
        (_swapped_probes, "livenessProbe asks '/readyz'"),
        (_wrong_container_port, "port http is 8080"),
        (_wrong_role, "role replica but component learner"),
        (_no_transactions, "writes no state for replicas"),
        (_wrong_target_port, "targetPort 'metrics'"),
        (_wrong_selector, "selects no pod"),
        (_wrong_scrape_path, "scrapes /stats"),
    ],
)
def test_a_mutated_copy_fails_the_check(
    manifests: Documents, tmp_path: Path, mutate: Callable[[Documents], None], expected: str
) -> None:
    mutated = copy.deepcopy(manifests)
    mutate(mutated)
    problems = manifest_problems(mutated, tmp_path)
    assert any(expected in problem for problem in problems), problems
    assert manifest_problems(manifests, tmp_path) == [], "the original is untouched"


def test_a_mutated_nginx_upstream_fails_the_check() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    conf = NGINX.read_text()
    assert nginx_problems(compose, conf.replace("replica-2:8000", "replica-2:8001"))
    assert nginx_problems(compose, conf.replace("listen 8000;", "listen 8080;"))
    dropped = copy.deepcopy(compose)
    del dropped["services"]["replica-2"]
    assert nginx_problems(dropped, conf)
