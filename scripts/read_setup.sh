# Sourced by scripts/callgrind_read.sh, scripts/cpu_per_hit.sh and scripts/paired_reads.sh: the
# upstream they measure and the proxy's config. Expects PROXY and WORK set; EXTRA (config lines
# put first) optional.
# Sets URI and PORT (free, for the proxy), writes "$WORK/config.toml", and starts the rmcp fixture
# over HTTP (1 KiB text, ttlMs 1 h) unless UPSTREAM_URL names another upstream (registered as fx).
# MISS=1 turns the cache off; READ_URI is the URI read (default fx+fx://fx/item/1); FIXTURE the
# fixture binary (default: next to PROXY).

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

URI="${READ_URI:-fx+fx://fx/item/1}"
if [[ -n "${UPSTREAM_URL:-}" ]]; then
  URL="$UPSTREAM_URL"
else
  FIXTURE="${FIXTURE:-$(dirname "$PROXY")/mcp-proxy-fixture}"
  [[ -x "$FIXTURE" ]] || { echo "no fixture at $FIXTURE (cargo build --release --bins, or set FIXTURE)" >&2; exit 1; }
  "$FIXTURE" --http "127.0.0.1:$(free_port)" --text-bytes 1024 --resources 16 \
    --ttl-ms 3600000 >"$WORK/fixture.out" 2>/dev/null &
  until grep -q LISTENING "$WORK/fixture.out" 2>/dev/null; do sleep 0.1; done
  URL="$(sed -n 's/^LISTENING //p' "$WORK/fixture.out")"
fi
{
  [[ -n "${EXTRA:-}" ]] && printf '%s\n' "$EXTRA"
  printf '[[upstreams]]\nname = "fx"\nurl = "%s"\n' "$URL"
  [[ -n "${MISS:-}" ]] && printf '\n[cache]\nenabled = false\n'
} >"$WORK/config.toml"
PORT="$(free_port)"
