#!/usr/bin/env bash
# Installs wrk, the HTTP load generator `make bench` drives the prediction benchmarks with.
# Pinned to Debian bookworm's build so every machine measures with the same tool; needs root
# (apt-get). Does nothing when wrk is present (bench/bench_predict.py records its version).
set -euo pipefail
WRK_VERSION="4.1.0-3+b2"
command -v wrk >/dev/null 2>&1 && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "missing wrk: run 'sudo apt-get install -y wrk=${WRK_VERSION}' (Debian) and retry" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "wrk=${WRK_VERSION}" >/dev/null
