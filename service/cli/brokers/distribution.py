"""Where the Apache Kafka broker comes from: the version pinned in ``kafka-broker/pom.xml``, the
jar cache ``scripts/kafka-deps.sh`` fills, and the Java that runs it.

The version is defined once, as the ``kafka.version`` property of the pom; everything else (the
cache path, the stamp that marks a complete copy) is defined here, and the install script asks
this module for it: ``python -m service.cli.brokers.distribution`` prints shell assignments.

Standard library only: the script runs this before any virtualenv exists.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
KAFKA_DIR = REPO_ROOT / "kafka-broker"
POM_PATH = KAFKA_DIR / "pom.xml"
LOG_CONFIG_PATH = KAFKA_DIR / "log4j2.properties"
POM_NAMESPACE = "{http://maven.apache.org/POM/4.0.0}"
VERSION_PROPERTY = "kafka.version"

CACHE_ENV_VAR = "NOVIKOFF_CACHE_DIR"
XDG_CACHE_ENV_VAR = "XDG_CACHE_HOME"
CACHE_SUBDIR = "novikoff"
STAMP_NAME = ".complete"
"""Written by the install script after the last jar is copied, holding the pom's digest: a cache
without it, or copied for another pom, is not used."""

JAVA_HOME_ENV_VAR = "JAVA_HOME"
INSTALL_COMMAND = "make kafka-deps"
INSTALL_SCRIPT = "bash scripts/kafka-deps.sh"


class BrokerUnavailableError(RuntimeError):
    """The Apache Kafka broker cannot start on this machine (no Java, or no jars)."""


def kafka_version(pom: Path = POM_PATH) -> str:
    """The Apache Kafka version ``pom`` pins (its ``kafka.version`` property)."""
    if not pom.is_file():
        raise BrokerUnavailableError(
            f"{pom} is missing: the Apache Kafka broker runs from a source checkout of novikoff"
        )
    node = (
        ET.parse(pom).getroot().find(f"{POM_NAMESPACE}properties/{POM_NAMESPACE}{VERSION_PROPERTY}")
    )
    if node is None or not (node.text or "").strip():
        raise BrokerUnavailableError(f"{pom} defines no <{VERSION_PROPERTY}> property")
    return (node.text or "").strip()


def pom_digest(pom: Path = POM_PATH) -> str:
    """SHA-256 of ``pom``: a changed pin (any dependency) makes the cached copy stale."""
    return hashlib.sha256(pom.read_bytes()).hexdigest()


def cache_root() -> Path:
    """``$NOVIKOFF_CACHE_DIR``, else ``$XDG_CACHE_HOME/novikoff``, else ``~/.cache/novikoff``."""
    explicit = os.environ.get(CACHE_ENV_VAR, "").strip()
    if explicit:
        return Path(explicit)
    xdg = os.environ.get(XDG_CACHE_ENV_VAR, "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache") / CACHE_SUBDIR


@dataclass(frozen=True)
class Distribution:
    """One pinned Apache Kafka version and where its jars are cached."""

    version: str
    home: Path
    digest: str

    @property
    def libs(self) -> Path:
        """The directory of runtime jars (the broker's class path)."""
        return self.home / "libs"

    @property
    def stamp(self) -> Path:
        """Present once every jar is in :attr:`libs`."""
        return self.home / STAMP_NAME

    @property
    def installed(self) -> bool:
        """Whether the jar copy is complete and was made for the current pom."""
        try:
            return self.stamp.read_text().strip() == self.digest
        except OSError:
            return False

    @property
    def classpath(self) -> str:
        """The JVM class path: every jar in :attr:`libs`."""
        return str(self.libs / "*")


def distribution() -> Distribution:
    """The pinned version and its cache directory (``<cache root>/kafka-<version>``)."""
    version = kafka_version()
    return Distribution(version, cache_root() / f"kafka-{version}", pom_digest())


def find_java() -> str | None:
    """``$JAVA_HOME/bin/java`` when that exists, else ``java`` on ``PATH``."""
    home = os.environ.get(JAVA_HOME_ENV_VAR, "").strip()
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def require() -> tuple[str, Distribution]:
    """The java executable and the installed distribution; ``BrokerUnavailableError`` saying what to
    run when either is missing."""
    dist = distribution()
    java = find_java()
    missing = [
        what
        for what, absent in (
            ("Java 17 (no java on PATH or in $JAVA_HOME)", java is None),
            (
                f"the Apache Kafka {dist.version} jars (none for this pom in {dist.libs})",
                not dist.installed,
            ),
        )
        if absent
    ]
    if missing:
        raise BrokerUnavailableError(
            f"the Apache Kafka broker needs {' and '.join(missing)}: run `{INSTALL_COMMAND}` "
            f"(or `{INSTALL_SCRIPT}`) in the novikoff checkout, then retry"
        )
    assert java is not None
    return java, dist


def shell_assignments() -> str:
    """``KAFKA_VERSION``, ``KAFKA_HOME``, ``KAFKA_LIBS``, ``KAFKA_STAMP``, ``KAFKA_POM`` and
    ``KAFKA_POM_DIGEST`` for the install script to ``eval``."""
    dist = distribution()
    values = {
        "KAFKA_VERSION": dist.version,
        "KAFKA_HOME": str(dist.home),
        "KAFKA_LIBS": str(dist.libs),
        "KAFKA_STAMP": str(dist.stamp),
        "KAFKA_POM": str(POM_PATH),
        "KAFKA_POM_DIGEST": dist.digest,
    }
    return "\n".join(f"{name}={shlex.quote(value)}" for name, value in values.items())


if __name__ == "__main__":
    print(shell_assignments())
