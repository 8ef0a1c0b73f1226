#!/usr/bin/env bash
# Installs what the Apache Kafka broker of the tests and benchmarks needs: Java 17 and Maven
# (Debian packages, when missing and running as root), then the broker's runtime jars, pinned by
# kafka-broker/pom.xml, copied by Maven into a cache outside the repository:
#   ${NOVIKOFF_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/novikoff}/kafka-<version>/libs
# service/cli/brokers/distribution.py defines that path and the stamp marking a complete copy; this
# script asks it for them. Does nothing when the stamp holds the digest of the current pom.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
eval "$("$PYTHON" -m service.cli.brokers.distribution)"
installed() { [ "$(cat "$KAFKA_STAMP" 2>/dev/null)" = "$KAFKA_POM_DIGEST" ]; }
if installed && command -v java >/dev/null 2>&1; then exit 0; fi

need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing ${need[*]}: run 'sudo apt-get install -y ${need[*]}' (Debian), then 'make kafka-deps'" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if installed; then exit 0; fi

echo "fetching Apache Kafka $KAFKA_VERSION jars into $KAFKA_LIBS" >&2
rm -rf "$KAFKA_LIBS" "$KAFKA_STAMP"
mkdir -p "$KAFKA_LIBS"
log="$(mktemp)"
if ! mvn -B -q -Dstyle.color=never -f "$KAFKA_POM" dependency:copy-dependencies \
  -DincludeScope=runtime -DoutputDirectory="$KAFKA_LIBS" >"$log" 2>&1; then
  cat "$log" >&2
  rm -f "$log"
  echo "fetching the Apache Kafka jars failed (Maven output above)" >&2
  exit 1
fi
rm -f "$log"
echo "$KAFKA_POM_DIGEST" >"$KAFKA_STAMP"
