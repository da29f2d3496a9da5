#!/usr/bin/env bash
# Check the systemd units with `systemd-analyze verify`, against the binary of `cargo build
# --release` (the units' /usr/local/bin path is swapped for it; in CI .ci/readme-release.sh has
# just built it, so the build here does nothing): deploy/mcp-resource-proxy.service,
# and the bare-metal template deploy/bare-metal/mcp-resource-proxy@.service as its instance 1
# (the template beside it, so its specifiers are resolved). Any message counts as a failure:
# systemd-analyze exits 0 on settings it ignores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! command -v systemd-analyze >/dev/null; then
  echo "systemd-analyze not found: the units are not verified on this machine"
  exit 0
fi
cargo build --quiet --release --bin mcp-resource-proxy
binary="$(pwd)/target/release/mcp-resource-proxy"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
verify() { # verify SOURCE UNIT: SOURCE copied into the folder, UNIT (a name there) verified
  sed "s|/usr/local/bin/mcp-resource-proxy|$binary|g" "$1" >"$dir/$(basename "$1")"
  local output
  output="$(systemd-analyze verify "$dir/$2" 2>&1)" || { echo "$output"; exit 1; }
  if [[ -n "$output" ]]; then
    echo "$output"
    exit 1
  fi
  echo "$1: verified"
}
verify deploy/mcp-resource-proxy.service mcp-resource-proxy.service
verify deploy/bare-metal/mcp-resource-proxy@.service mcp-resource-proxy@1.service
