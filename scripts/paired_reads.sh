#!/usr/bin/env bash
# Two builds of the proxy side by side, by round-trip time: both start with the same config
# (scripts/read_setup.sh: the rmcp fixture over HTTP unless UPSTREAM_URL names another upstream;
# MISS=1 turns the cache off), then scripts/paired_reads.py alternates reads between them in
# random order, per host era, ROUNDS pairs, each read after GAP seconds idle (default 0.001: a
# hit that finds its caches cold; 0 for misses, whose upstream wait is the gap). Compares builds
# where the matrix's paired miss (±0.03) cannot: every figure is A and B in the same moments.
#
#   bash scripts/paired_reads.sh A/mcp-resource-proxy B/mcp-resource-proxy [ROUNDS] [GAP]
#   UPSTREAM_URL=http://127.0.0.1:PORT/mcp READ_URI='fx+demo://resource/static/document/architecture.md' \
#     MISS=1 bash scripts/paired_reads.sh A B 800 0   # misses against server-everything
#
# Needs python3 (and, without UPSTREAM_URL, `cargo build --release --bins` for the fixture).
set -euo pipefail

A="$(realpath "$1")"
B="$(realpath "$2")"
ROUNDS="${3:-1500}"
GAP="${4:-0.001}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
PROXY="$B"
[[ -x "$(dirname "$B")/mcp-proxy-fixture" ]] || export FIXTURE="${FIXTURE:-$(dirname "$HERE")/target/release/mcp-proxy-fixture}"
# shellcheck source=scripts/read_setup.sh
source "$HERE/read_setup.sh"
PORT_A="$(free_port)"
PORT_B="$PORT"
"$A" serve --config "$WORK/config.toml" --listen "127.0.0.1:$PORT_A" --admin-listen off 2>/dev/null &
"$B" serve --config "$WORK/config.toml" --listen "127.0.0.1:$PORT_B" --admin-listen off 2>/dev/null &
for port in "$PORT_A" "$PORT_B"; do
  until python3 -c "import socket; socket.create_connection(('127.0.0.1', $port))" 2>/dev/null; do sleep 0.2; done
done
for era in 2026 2025; do
  python3 "$HERE/paired_reads.py" "$PORT_A,$PORT_B" 50 0 "$era" "$URI" >/dev/null
  python3 "$HERE/paired_reads.py" "$PORT_A,$PORT_B" "$ROUNDS" "$GAP" "$era" "$URI"
done
