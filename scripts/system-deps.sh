#!/usr/bin/env bash
# Installs the real servers the tests drive: Prometheus (scrape tests), Chromium (page tests)
# and openssl (the TLS test's certificates).
# Debian packages only; needs root (CI runs as root). Does nothing when all are present.
set -euo pipefail
need=()
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "missing ${need[*]}: run 'sudo apt-get install -y ${need[*]}' (Debian) and retry" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $(printf '%s\n' "${need[@]}" | sort -u) >/dev/null
