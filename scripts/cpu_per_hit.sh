#!/usr/bin/env bash
# User and system CPU per cache hit (with MISS=1: per miss) of the proxy process, from
# /proc/<pid>/stat, one request at a time (c=1) on one kept-alive connection
# (scripts/read_driver.py), both host eras. Starts the rmcp fixture over HTTP (1 KiB text,
# ttlMs 1 h) and the proxy, warms the entry, then counts N reads.
# Complements scripts/callgrind_read.sh: instructions say what the proxy's code costs; this says
# what the process costs with its runtime's wake-ups and its system calls.
#
#   bash scripts/cpu_per_hit.sh target/release/mcp-resource-proxy [N]
#   TOKIO_WORKER_THREADS=1 bash scripts/cpu_per_hit.sh ...   # the runtime with one worker
#   MISS=1 bash scripts/cpu_per_hit.sh ...                     # the cache off: every read a miss
#   UPSTREAM_URL=http://127.0.0.1:PORT/mcp READ_URI='fx+demo://resource/static/document/architecture.md' \
#     MISS=1 bash scripts/cpu_per_hit.sh ...  # another upstream (e.g. server-everything), named fx
#   CONTEXT_SWITCHES=1 bash scripts/cpu_per_hit.sh ...  # also the process's context switches per read
#
# Needs python3 and `cargo build --release --bins`. Prints `<era> user <µs> sys <µs> per read`.
set -euo pipefail

PROXY="$(realpath "$1")"
N="${2:-20000}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
# shellcheck source=scripts/read_setup.sh
source "$HERE/read_setup.sh"
"$PROXY" serve --config "$WORK/config.toml" --listen "127.0.0.1:$PORT" --admin-listen off 2>/dev/null &
PID=$!
until python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT))" 2>/dev/null; do sleep 0.2; done

ticks() { awk '{print $14, $15}' "/proc/$PID/stat"; }
# Voluntary and involuntary, summed over the process's threads.
switches() { cat /proc/"$PID"/task/*/status | awk '/ctxt_switches/ {n += $2} END {print n}'; }
HZ="$(getconf CLK_TCK)"
for era in 2025 2026; do
  python3 "$HERE/read_driver.py" "$PORT" "$era" 200 "$URI"
  read -r user0 sys0 < <(ticks)
  switched0="$(switches)"
  python3 "$HERE/read_driver.py" "$PORT" "$era" "$N" "$URI"
  read -r user1 sys1 < <(ticks)
  switched1="$(switches)"
  line="$era user $(((user1 - user0) * 1000000 / HZ / N)) µs sys $(((sys1 - sys0) * 1000000 / HZ / N)) µs per read"
  if [[ -n "${CONTEXT_SWITCHES:-}" ]]; then
    line="$line, $(((switched1 - switched0) * 100 / N)) context switches per 100 reads"
  fi
  echo "$line"
done
