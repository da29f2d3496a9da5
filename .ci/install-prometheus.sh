#!/usr/bin/env bash
# Installs Debian's `prometheus` package, which the end-to-end dashboard test runs as a scraper:
#   prometheus --config.file=<cfg> --storage.tsdb.path=<tmp> --web.listen-address=127.0.0.1:<port>
# (the test starts its own instance; the packaged system service is neither needed nor started here).
# Pinned by upstream version: Debian 12 "bookworm" ships 2.42.0 (package revisions such as
# 2.42.0+ds-5+deb12u1 change with point releases and old ones leave the mirror, so the Debian
# revision is not pinned; a different upstream version is an error, not a silent upgrade).
# Idempotent: does nothing when a matching version is installed. Needs root (or sudo).
# Env: PROMETHEUS_UPSTREAM_VERSION (default below); "any" accepts whatever apt offers.
set -euo pipefail

WANT="${PROMETHEUS_UPSTREAM_VERSION:-2.42.0}"

log() { echo "install-prometheus: $*" >&2; }
matches() { [[ "$WANT" == "any" || "$1" == "$WANT+"* || "$1" == "$WANT-"* ]]; }

status="$(dpkg-query -W -f='${Status}|${Version}' prometheus 2>/dev/null || true)"
if [[ "${status%%|*}" == "install ok installed" ]] && matches "${status#*|}" && command -v prometheus >/dev/null; then
  log "prometheus ${status#*|} already installed"
  exit 0
fi

sudo=""
if [[ "$(id -u)" != 0 ]]; then
  command -v sudo >/dev/null || { log "needs root (or sudo) to apt-get install"; exit 1; }
  sudo="sudo"
fi

candidate() { apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ { print $2 }'; }
if ! matches "$(candidate)"; then
  log "apt-get update (candidate '$(candidate)' does not match $WANT)"
  $sudo apt-get update -qq
fi
version="$(candidate)"
matches "$version" || { log "apt offers prometheus '$version', want $WANT (set PROMETHEUS_UPSTREAM_VERSION=any to accept it)"; exit 1; }

log "apt-get install prometheus=$version"
# The package's postinst would start the system service where systemd runs; the test does not need it.
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "prometheus=$version" >&2
command -v prometheus >/dev/null || { log "installed, but no prometheus on PATH"; exit 1; }
log "ok: $(prometheus --version 2>&1 | head -n1)"
