#!/usr/bin/env bash
# Installs Debian's `redis-server` and `haproxy` packages, which the cluster tier (tests/cluster/) runs:
#   redis-server --port <free> --bind 127.0.0.1 --save '' --appendonly no
#   haproxy -f <cfg> -db   (round-robin in front of the proxy replicas, health-checked on /readyz)
# Each test starts its own instances on free loopback ports; the packaged system services are stopped
# and disabled so nothing listens on the default ports behind the tests' backs.
# Pinned by upstream version: Debian 12 "bookworm" ships redis 7.0.15 and haproxy 2.6.12 (the Debian
# revisions change with point releases and old ones leave the mirror, so they are not pinned; a
# different upstream version is an error, not a silent upgrade).
# Idempotent: does nothing when matching versions are installed. Needs root (or sudo).
# Env: REDIS_UPSTREAM_VERSION, HAPROXY_UPSTREAM_VERSION (defaults below); "any" accepts what apt offers.
set -euo pipefail

declare -A WANT=(
  [redis-server]="${REDIS_UPSTREAM_VERSION:-7.0.15}"
  [haproxy]="${HAPROXY_UPSTREAM_VERSION:-2.6.12}"
)
declare -A BINARY=([redis-server]=redis-server [haproxy]=haproxy)

log() { echo "install-cluster: $*" >&2; }
# Debian versions look like 5:7.0.15-1~deb12u7 (epoch:upstream-revision).
upstream_of() { local v="${1#*:}"; echo "${v%%-*}"; }
matches() { [[ "${WANT[$1]}" == "any" || "$(upstream_of "$2")" == "${WANT[$1]}" ]]; }
installed() {
  local status
  status="$(dpkg-query -W -f='${Status}|${Version}' "$1" 2>/dev/null || true)"
  [[ "${status%%|*}" == "install ok installed" ]] && matches "$1" "${status#*|}" && command -v "${BINARY[$1]}" >/dev/null
}
candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ { print $2 }'; }

sudo=""
if [[ "$(id -u)" != 0 ]]; then
  sudo="sudo"
fi

missing=()
for package in redis-server haproxy; do
  if installed "$package"; then
    log "$package $(dpkg-query -W -f='${Version}' "$package") already installed"
  else
    missing+=("$package")
  fi
done

if ((${#missing[@]})); then
  [[ -z "$sudo" ]] || command -v sudo >/dev/null || { log "needs root (or sudo) to apt-get install"; exit 1; }
  for package in "${missing[@]}"; do
    if ! matches "$package" "$(candidate "$package")"; then
      log "apt-get update (candidate '$(candidate "$package")' for $package does not match ${WANT[$package]})"
      $sudo apt-get update -qq
      break
    fi
  done
  specs=()
  for package in "${missing[@]}"; do
    version="$(candidate "$package")"
    matches "$package" "$version" || {
      log "apt offers $package '$version', want ${WANT[$package]} (set the *_UPSTREAM_VERSION variable to any to accept it)"
      exit 1
    }
    specs+=("$package=$version")
  done
  log "apt-get install ${specs[*]}"
  # policy-rc.d answering 101 keeps the packages' postinst from starting their services where
  # there is an init system; the services are also disabled below.
  policy_rc=/usr/sbin/policy-rc.d
  created_policy=""
  if [[ ! -e "$policy_rc" ]]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy_rc" >/dev/null
    $sudo chmod +x "$policy_rc"
    created_policy=1
  fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${specs[@]}" >&2 || {
    [[ -z "$created_policy" ]] || $sudo rm -f "$policy_rc"
    exit 1
  }
  [[ -z "$created_policy" ]] || $sudo rm -f "$policy_rc"
fi

# The tests start their own instances: stop and disable the packaged services wherever they run.
for service in redis-server haproxy; do
  if command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
    $sudo systemctl disable --now "$service" >/dev/null 2>&1 || true
  elif command -v service >/dev/null; then
    $sudo service "$service" stop >/dev/null 2>&1 || true
  fi
done

for package in redis-server haproxy; do
  command -v "${BINARY[$package]}" >/dev/null || { log "installed, but no ${BINARY[$package]} on PATH"; exit 1; }
done
log "ok: $(redis-server --version | head -n1)"
log "ok: $(haproxy -v 2>&1 | head -n1)"
