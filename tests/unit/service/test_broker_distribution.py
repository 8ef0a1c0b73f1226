"""Where the Apache Kafka broker comes from: the pinned version, the jar cache, Java; and the
broker factory's choices. No JVM runs here."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest

from service.cli import broker
from service.cli.brokers import distribution
from service.cli.brokers.apache import new_cluster_id
from service.cli.main import build_parser
from service.settings import BOOTSTRAP_ENV_VAR, SettingsError, load_settings

POM = """<?xml version="1.0"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <properties>{properties}</properties>
</project>
"""


def write_pom(path: Path, properties: str) -> Path:
    path.write_text(POM.format(properties=properties))
    return path


def test_the_version_is_the_pom_property(tmp_path: Path) -> None:
    pom = write_pom(tmp_path / "pom.xml", "<kafka.version> 9.8.7 </kafka.version>")
    assert distribution.kafka_version(pom) == "9.8.7"


def test_the_checked_in_pom_pins_apache_kafka_4() -> None:
    assert distribution.kafka_version().startswith("4.")


@pytest.mark.parametrize("properties", ["", "<log4j.version>2.25.3</log4j.version>"])
def test_a_pom_without_the_version_is_refused(tmp_path: Path, properties: str) -> None:
    pom = write_pom(tmp_path / "pom.xml", properties)
    with pytest.raises(distribution.BrokerUnavailableError, match=r"kafka\.version"):
        distribution.kafka_version(pom)


def test_a_missing_pom_is_refused(tmp_path: Path) -> None:
    with pytest.raises(distribution.BrokerUnavailableError, match="source checkout"):
        distribution.kafka_version(tmp_path / "pom.xml")


def test_the_cache_root_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(distribution.CACHE_ENV_VAR, raising=False)
    monkeypatch.delenv(distribution.XDG_CACHE_ENV_VAR, raising=False)
    assert distribution.cache_root() == tmp_path / "home" / ".cache" / "novikoff"
    monkeypatch.setenv(distribution.XDG_CACHE_ENV_VAR, str(tmp_path / "xdg"))
    assert distribution.cache_root() == tmp_path / "xdg" / "novikoff"
    monkeypatch.setenv(distribution.CACHE_ENV_VAR, str(tmp_path / "mine"))
    assert distribution.cache_root() == tmp_path / "mine"


def test_the_cache_directory_names_the_version(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(distribution.CACHE_ENV_VAR, str(tmp_path))
    dist = distribution.distribution()
    assert dist.libs == tmp_path / f"kafka-{distribution.kafka_version()}" / "libs"
    assert dist.classpath == f"{dist.libs}/*"


def fake_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *, stamp: bool) -> None:
    """A cache under ``tmp_path`` (complete when ``stamp``) and a ``java`` in ``$JAVA_HOME``."""
    monkeypatch.setenv(distribution.CACHE_ENV_VAR, str(tmp_path / "cache"))
    home = distribution.distribution().home
    home.mkdir(parents=True)
    if stamp:
        (home / distribution.STAMP_NAME).write_text(distribution.pom_digest() + "\n")
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.touch()
    monkeypatch.setenv(distribution.JAVA_HOME_ENV_VAR, str(tmp_path / "jdk"))


def test_a_complete_cache_and_java_are_enough(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_install(monkeypatch, tmp_path, stamp=True)
    java, dist = distribution.require()
    assert java == str(tmp_path / "jdk" / "bin" / "java")
    assert dist.installed


def test_a_cache_copied_for_another_pom_is_not_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_install(monkeypatch, tmp_path, stamp=True)
    assert distribution.distribution().installed  # control
    distribution.distribution().stamp.write_text("digest-of-an-older-pom\n")
    assert not distribution.distribution().installed


def test_a_cache_without_its_stamp_names_the_jars_and_the_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_install(monkeypatch, tmp_path, stamp=False)
    with pytest.raises(distribution.BrokerUnavailableError) as raised:
        distribution.require()
    message = str(raised.value)
    assert "jars" in message
    assert "Java" not in message
    assert f"`{distribution.INSTALL_COMMAND}`" in message
    assert f"`{distribution.INSTALL_SCRIPT}`" in message


def test_no_java_names_java_and_the_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_install(monkeypatch, tmp_path, stamp=True)
    monkeypatch.delenv(distribution.JAVA_HOME_ENV_VAR)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(distribution.BrokerUnavailableError) as raised:
        distribution.require()
    assert "Java 17" in str(raised.value)
    assert "jars" not in str(raised.value)
    assert f"`{distribution.INSTALL_COMMAND}`" in str(raised.value)


def test_the_install_script_reads_the_same_paths(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(distribution.CACHE_ENV_VAR, str(tmp_path / "cache with space"))
    script = (
        f'eval "$({sys.executable} -m service.cli.brokers.distribution)"; printf %s "$KAFKA_LIBS"'
    )
    libs = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        check=True,
        cwd=distribution.REPO_ROOT,
    ).stdout
    assert libs == str(distribution.distribution().libs)


def test_cluster_ids_are_16_bytes_and_never_look_like_options() -> None:
    for _ in range(200):
        cluster_id = new_cluster_id()
        assert not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_tansu_takes_no_data_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="memory only"):
        broker.make_broker("tansu", data_dir=tmp_path)
    assert broker.make_broker("tansu").kind == "tansu"


def test_an_apache_broker_without_its_jars_is_refused_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(distribution.CACHE_ENV_VAR, str(tmp_path))
    with pytest.raises(distribution.BrokerUnavailableError, match="make kafka-deps"):
        broker.make_broker("apache", data_dir=tmp_path / "data")
    assert not (tmp_path / "data").exists()


def test_the_cache_variable_is_no_unknown_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(distribution.CACHE_ENV_VAR, "/somewhere")
    load_settings()
    monkeypatch.setenv("NOVIKOFF_CACHEDIR", "/somewhere")  # control: a misspelt one is refused
    with pytest.raises(SettingsError, match="NOVIKOFF_CACHEDIR"):
        load_settings()


def test_the_demo_broker_is_tansu_and_the_standalone_one_apache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(BOOTSTRAP_ENV_VAR, raising=False)
    monkeypatch.setenv(distribution.CACHE_ENV_VAR, str(tmp_path))  # no Apache Kafka jars here
    started: list[str] = []

    def start(self: broker.EmbeddedBroker) -> broker.EmbeddedBroker:
        started.append(self.kind)
        return self

    monkeypatch.setattr(broker.EmbeddedBroker, "start", start)
    monkeypatch.setattr(broker.EmbeddedBroker, "stop", lambda self: None)
    with broker.kafka_bootstrap():
        assert started == ["tansu"]
    with pytest.raises(distribution.BrokerUnavailableError), broker.kafka_bootstrap(kind="apache"):
        pass
    assert build_parser().parse_args(["broker"]).kind == "apache"
