#!/usr/bin/env bash
# Writes src/hot-path.order, the link order build.rs gives a release build: the functions the
# proxy runs for a cache hit and for misses (against the rmcp fixture over HTTP and, when
# `.ci/install-bench-peers.sh` installed it, server-everything over HTTP), in both host eras,
# hottest first, from callgrind profiles (scripts/callgrind_read.sh with --demangle=no).
# Rerun it after changes to the read path or a new toolchain or dependency set: a function it
# does not name is only placed elsewhere, but the file goes stale as symbols change.
#
#   cargo build --release --bins && bash scripts/link_order.sh && cargo build --release --bins
#
# Needs valgrind, python3 and node (for server-everything). Prints how many functions it wrote.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
PROXY="$(realpath "${1:-$ROOT/target/release/mcp-resource-proxy}")"
WORK="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
export VALGRIND_OPTS="--demangle=no"

CG_KEEP="$WORK/hit" bash "$HERE/callgrind_read.sh" "$PROXY" 500 >&2
MISS=1 CG_KEEP="$WORK/miss" bash "$HERE/callgrind_read.sh" "$PROXY" 300 >&2

EVERYTHING="$ROOT/.peers/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
if [[ -f "$EVERYTHING" ]]; then
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  PORT="$port" node "$EVERYTHING" streamableHttp >"$WORK/everything.log" 2>&1 &
  until python3 -c "import socket; socket.create_connection(('127.0.0.1', $port))" 2>/dev/null; do sleep 0.2; done
  UPSTREAM_URL="http://127.0.0.1:$port/mcp" READ_URI='fx+demo://resource/static/document/architecture.md' MISS=1 \
    CG_KEEP="$WORK/everything" bash "$HERE/callgrind_read.sh" "$PROXY" 300 >&2
else
  echo "link_order: server-everything is not installed (bash .ci/install-bench-peers.sh); its miss is left out" >&2
fi

python3 "$HERE/link_order.py" "$(basename "$PROXY")" "$WORK"/*/cg.* >"$ROOT/src/hot-path.order"
