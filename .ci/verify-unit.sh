#!/usr/bin/env bash
# Check deploy/mcp-resource-proxy.service with `systemd-analyze verify`, against the binary
# built by `cargo build` (the unit's /usr/local/bin path is swapped for it). Any message
# counts as a failure: systemd-analyze exits 0 on settings it ignores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! command -v systemd-analyze >/dev/null; then
  echo "systemd-analyze not found: the unit is not verified on this machine"
  exit 0
fi
cargo build --quiet --bin mcp-resource-proxy
binary="$(pwd)/target/debug/mcp-resource-proxy"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
sed "s|/usr/local/bin/mcp-resource-proxy|$binary|g" deploy/mcp-resource-proxy.service >"$dir/mcp-resource-proxy.service"
output="$(systemd-analyze verify "$dir/mcp-resource-proxy.service" 2>&1)" || { echo "$output"; exit 1; }
if [[ -n "$output" ]]; then
  echo "$output"
  exit 1
fi
echo "deploy/mcp-resource-proxy.service: verified"
