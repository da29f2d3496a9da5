#!/usr/bin/env bash
# Self-check of the test peers WITHOUT the proxy: tests/py/client.py against tests/py/server.py
# (stdio and HTTP, legacy and 2026-07-28) and against server-everything (stdio and HTTP, legacy).
# Prints every client output line; exits non-zero on the first failed expectation.
#   bash tests/py/selfcheck.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
bash .ci/install-peers.sh

PY="$ROOT/.peers/venv/bin/python"
CLIENT=("$PY" "$ROOT/tests/py/client.py")
SERVER=("$PY" "$ROOT/tests/py/server.py")
EVERYTHING="$ROOT/.peers/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

pass=0
# check NAME PYEXPR -- CLIENT-ARGS...   (v = list of the JSON lines printed; PYEXPR must be true)
check() {
  local name="$1" expr="$2"
  shift 3
  local out
  echo "== $name"
  echo "   \$ client.py $*"
  out="$("${CLIENT[@]}" "$@" </dev/null)" || { echo "FAIL: $name: client exited $?"; exit 1; }
  verify "$name" "$expr" "$out"
}
verify() {
  local name="$1" expr="$2" out="$3"
  echo "$out" | sed 's/^/   /'
  if ! OUT="$out" "$PY" -c '
import json, os, sys
v = [json.loads(l) for l in os.environ["OUT"].splitlines() if l.strip()]
sys.exit(0 if eval(sys.argv[1]) else 1)' "$expr"; then
    echo "FAIL: $name: expected $expr"
    exit 1
  fi
  pass=$((pass + 1))
}

# sub_then_bump NAME PYEXPR BUMP-CLIENT-ARGS -- SUB-CLIENT-ARGS...
# Runs the subscriber (whose ops must include `ready sleep_until_stdin`), waits for its "ready" line,
# runs the bump client to completion, then lets the subscriber proceed and checks all its output.
sub_then_bump() {
  local name="$1" expr="$2"
  shift 2
  local bump=()
  while [[ "$1" != "--" ]]; do bump+=("$1"); shift; done
  shift
  echo "== $name"
  echo "   \$ client.py $*   (subscriber)"
  echo "   \$ client.py ${bump[*]}   (after ready)"
  local out="" line
  coproc SUB { "${CLIENT[@]}" "$@"; }
  local sub_pid=$SUB_PID
  local sub_out=${SUB[0]} sub_in=${SUB[1]}
  while IFS= read -r -t 60 line <&"$sub_out"; do
    out+="$line"$'\n'
    [[ "$line" == *'"op":"ready"'* ]] && break
  done
  [[ "$out" == *'"op":"ready"'* ]] || { echo "FAIL: $name: subscriber never got ready: $out"; exit 1; }
  local bout
  bout="$("${CLIENT[@]}" "${bump[@]}" </dev/null)" || { echo "FAIL: $name: bump client failed"; exit 1; }
  echo "$bout" | sed 's/^/   bump: /'
  echo go >&"$sub_in"
  while IFS= read -r -t 60 line <&"$sub_out"; do out+="$line"$'\n'; done
  wait "$sub_pid" || { echo "FAIL: $name: subscriber exited non-zero"; exit 1; }
  verify "$name" "$expr" "$out"
}

# Starts an HTTP server; sets URL and records its pid. $1 = kind (py|everything).
start_http() {
  local line fd
  if [[ "$1" == py ]]; then
    exec {fd}< <(exec "${SERVER[@]}" --http 0)
    PIDS+=("$!")
    IFS= read -r -t 60 line <&"$fd" || { echo "FAIL: server.py printed nothing"; exit 1; }
    [[ "$line" == LISTENING\ * ]] || { echo "FAIL: server.py said: $line"; exit 1; }
    URL="${line#LISTENING }"
  else
    local port
    port="$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
    exec {fd}< <(PORT="$port" exec node "$EVERYTHING" streamableHttp 2>&1)
    PIDS+=("$!")
    while IFS= read -r -t 60 line <&"$fd"; do [[ "$line" == *"listening on port $port"* ]] && break; done
    [[ "$line" == *"listening on port $port"* ]] || { echo "FAIL: server-everything did not listen"; exit 1; }
    URL="http://127.0.0.1:$port/mcp"
  fi
  cat <&"$fd" >/dev/null & # keep draining its output (server-everything logs every request)
  echo "== started $1 at $URL"
}

ok_read='v[1]["contents"]==[{"uri":"py://note/1","mimeType":"text/plain","text":"note 1 v1"}]'
notes='v[0]["uris"]==["py://note/1","py://note/2"] and v[0]["pages"]==1'
got='v[-1]["op"]=="wait_updated" and v[-1]["received"] is True'

# ---- tests/py/server.py over stdio: one process per client, so bump goes over the same connection
check "py stdio legacy: list, read, not-found, subscribe+bump+updated" \
  "$notes and $ok_read and v[2]['error']['code']==-32602 and v[3]['ok'] and $got and v[-1]['via']=='legacy'" -- \
  --stdio "${SERVER[@]}" --mode legacy list_all read:py://note/1 read:py://note/9 subscribe:py://note/1 \
  'call:bump:{"id":1}' wait_updated:py://note/1:10
check "py stdio 2026-07-28: list, read (ttl/scope), listen+bump+updated, list_changed" \
  "$notes and $ok_read and v[0]['ttlMs']==60000 and v[1]['cacheScope']=='public' and v[2]['honored']['resourceSubscriptions']==['py://note/1'] and v[4]['received'] and v[4]['via']=='listen' and v[6]['received'] and v[7]['uris'][-1]=='py://note/3'" -- \
  --stdio "${SERVER[@]}" --mode 2026-07-28 list_all read:py://note/1 listen:py://note/1 \
  'call:bump:{"id":1}' wait_updated:py://note/1:10 'call:add_note:{"id":3}' wait_list_changed:10 list_all

# ---- tests/py/server.py over streamable HTTP: bump from a second client
start_http py
check "py http legacy: list, read" "$notes and $ok_read and v[0]['ttlMs'] is None" -- \
  --url "$URL" --mode legacy list_all read:py://note/1
check "py http 2026-07-28: list, read (ttl/scope), discover" \
  "$notes and $ok_read and v[1]['ttlMs']==60000 and v[1]['cacheScope']=='public' and v[2]['result']['capabilities']['resources']['subscribe']" -- \
  --url "$URL" --mode 2026-07-28 list_all read:py://note/1 discover
sub_then_bump "py http legacy subscribe, bump from a 2026 client" "$got and v[-1]['via']=='legacy' and v[-2]['eof'] is False" \
  --url "$URL" --mode 2026-07-28 'call:bump:{"id":1}' -- \
  --url "$URL" --mode legacy subscribe:py://note/1 ready sleep_until_stdin wait_updated:py://note/1:10
sub_then_bump "py http 2026 listen, bump from a legacy client" "$got and v[-1]['via']=='listen'" \
  --url "$URL" --mode legacy 'call:bump:{"id":2}' -- \
  --url "$URL" --mode 2026-07-28 listen:py://note/2 ready sleep_until_stdin wait_updated:py://note/2:10
sub_then_bump "py http legacy list_changed from another session's add_note" \
  "v[-2]['op']=='wait_list_changed' and v[-2]['received'] and v[-2]['via']=='legacy' and 'py://note/3' in v[-1]['uris']" \
  --url "$URL" --mode 2026-07-28 'call:add_note:{"id":3}' -- \
  --url "$URL" --mode legacy ready sleep_until_stdin wait_list_changed:10 list_all
check "py http: header passes, versions moved" \
  "v[0]['contents'][0]['text']=='note 1 v2' and v[1]['contents'][0]['text']=='note 2 v2'" -- \
  --url "$URL" --mode 2026-07-28 --header 'X-Selfcheck: 1' read:py://note/1 read:py://note/2

# ---- server-everything (2025 era only)
docs='len(v[0]["uris"])==7 and all(u.startswith("demo://resource/static/document/") for u in v[0]["uris"])'
dyn='v[1]["contents"][0]["uri"]=="demo://resource/dynamic/text/1" and v[1]["contents"][0]["text"].startswith("Resource 1:")'
tpl='v[2]["uriTemplates"]==["demo://resource/dynamic/text/{resourceId}","demo://resource/dynamic/blob/{resourceId}"]'
check "everything stdio legacy: 7 documents, dynamic read, templates, subscribe+toggle+updated" \
  "$docs and $dyn and $tpl and $got" -- \
  --stdio node "$EVERYTHING" stdio -- --mode legacy list_all read:demo://resource/dynamic/text/1 templates_all \
  subscribe:demo://resource/static/document/features.md 'call:toggle-subscriber-updates:{}' \
  wait_updated:demo://resource/static/document/features.md:10
start_http everything
check "everything http legacy: 7 documents, dynamic read, templates, subscribe+toggle+updated" \
  "$docs and $dyn and $tpl and $got" -- \
  --url "$URL" --mode legacy list_all read:demo://resource/dynamic/text/1 templates_all \
  subscribe:demo://resource/static/document/features.md 'call:toggle-subscriber-updates:{}' \
  wait_updated:demo://resource/static/document/features.md:10
check "everything http: server/discover is refused (legacy-only server)" "v[0]['error']['code']==-32000" -- \
  --url "$URL" --mode legacy discover

echo "selfcheck: $pass passed, 0 failed"
