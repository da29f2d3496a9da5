#!/usr/bin/env bash
# Instructions per `resources/read` of the proxy, counted by callgrind: repeatable on a noisy
# shared machine where CPU times are not. Starts the rmcp fixture over HTTP (1 KiB text, ttlMs
# 1 h) and the proxy under valgrind, warms the cache and a 2025 session, then for each host era
# (2026-07-28 stateless, 2025 session) zeroes the counters, sends N reads on one keep-alive
# connection (scripts/read_driver.py) and dumps. Whole process, every thread.
#
#   bash scripts/callgrind_read.sh target/release/mcp-resource-proxy [N] [extra config]
#   MISS=1 bash scripts/callgrind_read.sh ...   # the cache off: every read a miss
#   UPSTREAM_URL=http://127.0.0.1:PORT/mcp READ_URI='fx+demo://resource/static/document/architecture.md' \
#     MISS=1 bash scripts/callgrind_read.sh ...  # another upstream (e.g. server-everything), named fx
#   CG_KEEP=/tmp/cg bash scripts/callgrind_read.sh ...  # keep the dumps (cg.<era>) for callgrind_annotate
#   TRACED=1 bash scripts/callgrind_read.sh ...  # every read with `_meta.traceparent`/`tracestate` (a traced host)
#
# Needs valgrind, python3, and `cargo build --release --bins` (the fixture is taken next to the
# proxy binary). Prints `<era> <instructions per read>`.
set -euo pipefail

PROXY="$(realpath "$1")"
N="${2:-2000}"
EXTRA="${3:-}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

# shellcheck source=scripts/read_setup.sh
source "$HERE/read_setup.sh"
valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.%p" "$PROXY" serve --config "$WORK/config.toml" \
  --listen "127.0.0.1:$PORT" --admin-listen off 2>"$WORK/valgrind.log" &
VG=$!
until python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT))" 2>/dev/null; do sleep 0.5; done

for era in 2026 2025; do
  python3 "$HERE/read_driver.py" "$PORT" "$era" 50 "$URI"
  callgrind_control -z "$VG" >/dev/null 2>&1
  python3 "$HERE/read_driver.py" "$PORT" "$era" "$N" "$URI"
  callgrind_control -d "era$era" "$VG" >/dev/null 2>&1
done
kill -INT "$VG"
wait "$VG" || true
for era in 2026 2025; do
  file="$(grep -l "desc: Trigger: dump era$era" "$WORK"/cg.* | head -1)"
  total="$(sed -n 's/^summary: //p; s/^totals: //p' "$file" | head -1)"
  echo "$era $((total / N))"
  if [[ -n "${CG_KEEP:-}" ]]; then mkdir -p "$CG_KEEP" && cp "$file" "$CG_KEEP/cg.$era"; fi
done
