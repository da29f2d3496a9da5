#!/usr/bin/env bash
# The release-build commands of README.md and the book (docs/getting-started.md), run literally
# (tests/fast/readme/ runs the rest, and these in debug): `cargo run --release -- serve` from
# the repository root until /readyz answers 200, then stopped; the repository commands
# `cargo run --release -- check`, `… policy explain …` and `… import …` on the same build;
# `cargo install --path . --root DIR` (the README's /usr/local swapped for a temporary folder),
# the installed binary's `check` of the shipped config and its size (under 40 MB). Needs ports
# 8080 and 9464 free (the shipped config's) and curl.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

root="$(mktemp -d)"
serve_pid=""
cleanup() {
  if [[ -n "$serve_pid" ]]; then kill "$serve_pid" 2>/dev/null || true; fi
  rm -rf "$root"
}
trap cleanup EXIT

built_from=$SECONDS
cargo build --release --bin mcp-resource-proxy   # the build first, so that the wait below is for the proxy alone
echo "the first command's release build (in CI already built under the tests; cold in a fresh clone): $((SECONDS - built_from)) s"
cargo run --release -- serve &
serve_pid=$!
for _ in $(seq 1 300); do
  if curl -fsS http://127.0.0.1:9464/readyz >/dev/null 2>&1; then break; fi
  if ! kill -0 "$serve_pid" 2>/dev/null; then echo "cargo run --release -- serve exited"; exit 1; fi
  sleep 0.2
done
curl -fsS http://127.0.0.1:9464/readyz
echo
kill -TERM "$serve_pid"
wait "$serve_pid" || { echo "serve did not exit cleanly on SIGTERM"; exit 1; }
serve_pid=""
echo "cargo run --release -- serve: ready, stopped"

# The repository commands, as the book writes them, on the same release build.
cargo run --release -- check
cargo run --release -- policy explain --principal local policies+file:///default.toml grafana+file:///secrets/key.json
cargo run --release -- import tests/data/mcp-servers/claude_desktop_config.json | grep '^\[\[upstreams\]\]' >/dev/null
echo "cargo run --release -- check, policy explain, import: done"

# The release build above is reused (cargo install would otherwise build it again in a
# temporary folder): the same command, with the target folder named.
CARGO_TARGET_DIR="$(pwd)/target" cargo install --path . --root "$root" --locked
"$root/bin/mcp-resource-proxy" check --config config.toml
size="$(stat -c %s "$root/bin/mcp-resource-proxy")"
echo "installed binary: $size bytes (must stay under 40 MB)"
(( size < 40000000 )) || { echo "the installed binary grew past 40 MB"; exit 1; }
echo "cargo install --path . --root DIR: installed, check passes"
