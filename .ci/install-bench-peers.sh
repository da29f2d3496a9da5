#!/usr/bin/env bash
# Installs the third-party peers only `proxy-bench matrix` needs (not `cargo test`), into the
# ignored .peers/ next to those of .ci/install-peers.sh (which it runs first):
#   .peers/bench-npm   npm mcp-proxy (pinned below): another MCP proxy, run by the bench as
#                      node .peers/bench-npm/node_modules/mcp-proxy/dist/bin/mcp-proxy.mjs \
#                        --port <n> --host 127.0.0.1 -- node <server-everything>/dist/index.js stdio
# Idempotent: a marker (.peers/bench-npm.ok) holds what was installed; redone when it differs.
set -euo pipefail

MCP_PROXY_PKG="mcp-proxy"
MCP_PROXY_VERSION="6.7.19"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="$ROOT/.peers"
bash "$ROOT/.ci/install-peers.sh"

exec 9>"$PEERS/.bench-lock"
flock 9

log() { echo "install-bench-peers: $*" >&2; }

want="$MCP_PROXY_PKG@$MCP_PROXY_VERSION"
entry="$PEERS/bench-npm/node_modules/$MCP_PROXY_PKG/package.json"
if [[ "$(cat "$PEERS/bench-npm.ok" 2>/dev/null || true)" == "$want" && -f "$entry" ]]; then
  log "npm: $want already installed"
else
  log "npm: installing $want into .peers/bench-npm"
  rm -rf "$PEERS/bench-npm" "$PEERS/bench-npm.ok"
  mkdir -p "$PEERS/bench-npm"
  npm install --prefix "$PEERS/bench-npm" --no-audit --no-fund --loglevel=error "$want" >&2
  installed="$(node -p "require('$entry').version")"
  [[ "$installed" == "$MCP_PROXY_VERSION" ]] || { log "got $MCP_PROXY_PKG $installed, want $MCP_PROXY_VERSION"; exit 1; }
  echo "$want" >"$PEERS/bench-npm.ok"
fi
log "ok"
