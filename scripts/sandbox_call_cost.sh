#!/bin/bash
# What a sandbox profile costs per call: one proxy in front of the fixture over stdio twice, once
# started plainly (`plain`) and once under a profile (`boxed`: Landlock rules, rlimits,
# no_new_privs); ROUNDS rounds, each N reads of distinct URIs (cache misses: every read goes to
# the server) of one then the other, by one HTTP/1.1 keep-alive client (2026-07-28 requests).
# Prints the mean per read of each and their ratio; both share the proxy and the client, so
# their difference is the sandbox's.
#
#   scripts/sandbox_call_cost.sh target/release/mcp-resource-proxy target/release/mcp-proxy-fixture 500
set -eu
PROXY=$(realpath "$1") FIXTURE=$(realpath "$2") N=${3:-500} ROUNDS=${ROUNDS:-4}
DIR=$(mktemp -d)
trap 'kill "$PID" 2>/dev/null; rm -rf "$DIR"' EXIT
cat >"$DIR/config.toml" <<EOF
[[upstreams]]
name = "plain"
command = "$FIXTURE"

[[upstreams]]
name = "boxed"
command = "$FIXTURE"

[upstreams.sandbox]
read = ["$(dirname "$FIXTURE")"]
write = ["$DIR"]
network = false
memory = "1GiB"
processes = 64
EOF
"$PROXY" serve --config "$DIR/config.toml" --listen 127.0.0.1:0 --admin-listen off 2>"$DIR/log" &
PID=$!
for _ in $(seq 100); do
  URL=$(grep -o 'serving MCP at [^ "]*' "$DIR/log" | head -1 | cut -d' ' -f4) || true
  [[ -n "${URL:-}" ]] && break
  sleep 0.1
done
[[ -n "${URL:-}" ]] || { cat "$DIR/log" >&2; exit 1; }
python3 - "$URL" "$N" "$ROUNDS" <<'EOF'
import http.client, json, sys, time, urllib.parse
url, n, rounds = urllib.parse.urlparse(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
conn = http.client.HTTPConnection(url.hostname, url.port)
meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "sandbox-call-cost", "version": "0"}}
def read(uri, id):
    body = json.dumps({"jsonrpc": "2.0", "id": id, "method": "resources/read", "params": {"uri": uri, "_meta": meta}})
    conn.request("POST", url.path, body, {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                 "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "resources/read", "Mcp-Name": uri})
    reply = conn.getresponse().read()
    assert b'"contents"' in reply, reply[:300]
def ready(upstream):
    for _ in range(300):
        try:
            read(f"{upstream}+fx://fx/echo/ready", 0)
            return
        except AssertionError:
            time.sleep(0.1)
    sys.exit(f"{upstream} never served a read")
ready("plain"); ready("boxed")
spent, next_id = {"plain": 0.0, "boxed": 0.0}, 1
for r in range(rounds):
    for upstream in ("plain", "boxed"):
        started = time.perf_counter()
        for i in range(n):
            read(f"{upstream}+fx://fx/echo/r{r}-{i}", next_id)
            next_id += 1
        spent[upstream] += time.perf_counter() - started
per = {k: v / (n * rounds) * 1e6 for k, v in spent.items()}
print(f"plain: {per['plain']:.0f} us per read; boxed: {per['boxed']:.0f} us per read; boxed / plain: {per['boxed'] / per['plain']:.2f}x")
EOF
