#!/bin/bash
# What the stdio launcher and a sandbox profile cost at a server's start: N starts of PROGRAM
# run directly, through `sandbox-exec` without a profile, and through it with a profile
# (Landlock rules, rlimits, no_new_privs; as root also the switch to nobody). A pipe held open
# by `sleep` stands for the proxy's lifeline. Per call the sandbox costs nothing of its own:
# the proxy and the server talk over the same pipes, with no process between them.
#
#   scripts/sandbox_start_cost.sh target/release/mcp-resource-proxy 200 /bin/true
#   scripts/sandbox_start_cost.sh target/release/mcp-resource-proxy 20 node -e 0
set -u
BIN=$1 N=$2
shift 2
exec 3< <(sleep 3600)
PROFILE='{"read":[],"write":["/tmp"],"network":false,"keep_env":[],"memory":1073741824,"processes":64,"best_effort":false,"user":[65534,65534]}'
run() {
  local label=$1 start
  shift
  start=$(date +%s%N)
  for _ in $(seq "$N"); do
    "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }
  done
  echo "$label: $(( ($(date +%s%N) - start) / N / 1000 )) us per start"
}
run "directly" "$@"
run "launcher, no profile" "$BIN" sandbox-exec --lifeline 3 -- "$@"
run "launcher, profile" "$BIN" sandbox-exec --lifeline 3 --profile "$PROFILE" -- "$@"
