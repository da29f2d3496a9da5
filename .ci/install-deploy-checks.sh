#!/usr/bin/env bash
# Installs what tests/interop/deploy.rs checks deploy/ with:
#   .peers/deploy  a venv with tests/py/deploy-requirements.txt (exact pins): kubernetes-validate
#                  1.37.0 (Kubernetes schemas bundled, no network) and check-jsonschema 0.39.0 (the
#                  compose-spec schema bundled as vendor.compose-spec), PyYAML
#                  run: .peers/deploy/bin/kubernetes-validate --strict -k 1.37.0 deploy/k8s/*.yaml
#                  run: .peers/deploy/bin/check-jsonschema --builtin-schema vendor.compose-spec deploy/compose.yaml
#   haproxy        Debian's package (bookworm: 2.6.12; pinned by upstream version, the Debian revision
#                  moves with point releases), for `haproxy -c -f deploy/haproxy.cfg`
# Idempotent and fast when done (the venv's marker .peers/deploy.ok holds what it installed).
# Safe to run concurrently (flock). Needs root (or sudo) for apt-get.
# Env: PEERS_PYTHON = interpreter for the venv (default python3.11, else python3);
#      HAPROXY_UPSTREAM_VERSION (default below; "any" accepts whatever apt offers).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="$ROOT/.peers"
REQS="$ROOT/tests/py/deploy-requirements.txt"
HAPROXY_WANT="${HAPROXY_UPSTREAM_VERSION:-2.6.12}"
mkdir -p "$PEERS"

exec 9>"$PEERS/.deploy.lock"
flock 9

log() { echo "install-deploy-checks: $*" >&2; }

# ---- haproxy (Debian) ---------------------------------------------------------------------------
matches() { [[ "$HAPROXY_WANT" == "any" || "$1" == "$HAPROXY_WANT+"* || "$1" == "$HAPROXY_WANT-"* ]]; }
status="$(dpkg-query -W -f='${Status}|${Version}' haproxy 2>/dev/null || true)"
if [[ "${status%%|*}" == "install ok installed" ]] && matches "${status#*|}" && [[ -x /usr/sbin/haproxy ]]; then
  log "haproxy ${status#*|} already installed"
else
  sudo=""
  if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null || { log "needs root (or sudo) to apt-get install haproxy"; exit 1; }
    sudo="sudo"
  fi
  candidate() { apt-cache policy haproxy 2>/dev/null | awk '/Candidate:/ { print $2 }'; }
  if ! matches "$(candidate)"; then
    log "apt-get update (candidate '$(candidate)' does not match $HAPROXY_WANT)"
    $sudo apt-get update -qq
  fi
  version="$(candidate)"
  matches "$version" || { log "apt offers haproxy '$version', want $HAPROXY_WANT (HAPROXY_UPSTREAM_VERSION=any accepts it)"; exit 1; }
  log "apt-get install haproxy=$version"
  # Its postinst may start the packaged service where systemd runs; the tests only run `haproxy -c`.
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "haproxy=$version" >&2
  [[ -x /usr/sbin/haproxy ]] || { log "installed, but no /usr/sbin/haproxy"; exit 1; }
fi

# ---- the validators' venv -----------------------------------------------------------------------
py="${PEERS_PYTHON:-}"
if [[ -z "$py" ]]; then
  if command -v python3.11 >/dev/null; then py=python3.11; else py=python3; fi
fi
py_version="$("$py" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
want="python=$py_version requirements-sha256=$(sha256sum "$REQS" | cut -d' ' -f1)"
if [[ "$(cat "$PEERS/deploy.ok" 2>/dev/null || true)" == "$want" && -x "$PEERS/deploy/bin/kubernetes-validate" ]]; then
  log "venv: already installed ($want)"
else
  log "venv: creating .peers/deploy with $py ($py_version), installing $REQS"
  rm -rf "$PEERS/deploy" "$PEERS/deploy.ok"
  "$py" -m venv "$PEERS/deploy"
  "$PEERS/deploy/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$REQS" >&2
  "$PEERS/deploy/bin/python" -m pip check >&2
  for tool in kubernetes-validate check-jsonschema; do
    [[ -x "$PEERS/deploy/bin/$tool" ]] || { log "venv has no $tool"; exit 1; }
  done
  echo "$want" >"$PEERS/deploy.ok"
fi

log "ok"
