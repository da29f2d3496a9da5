#!/usr/bin/env python3
"""Cross-principal replay of an upstream's own MRTR `requestState`: how often bob, replaying the
state alice was handed, gets her elicited answer. Starts the fixture
(target/debug/examples/mcp-proxy-fixture, built by `cargo build --example mcp-proxy-fixture`)
over HTTP in the 2026-07-28 era and the given proxy binary in front of it (principals alice and
bob by bearer token, everything allowed), then per round: alice calls `fx__ask` (two rounds),
answers the first with a secret name and is handed the next `requestState`; bob sends that
state with an answer of his own. Standard library only.

    python3 scripts/mrtr_replay.py target/debug/mcp-resource-proxy 20
"""

import http.client
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODERN = "2026-07-28"
TOKENS = {"alice": "alice-token-mrtr-replay", "bob": "bob-token-mrtr-replay"}


def start_fixture():
    fixture = subprocess.Popen(
        [str(ROOT / "target/debug/examples/mcp-proxy-fixture"), "--era", "modern", "--http", "127.0.0.1:0"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in fixture.stdout:
        if line.startswith("LISTENING "):
            return fixture, line.split()[1]
    sys.exit("the fixture did not start")


def start_proxy(binary, folder, upstream):
    policies = folder / "policies"
    policies.mkdir()
    for name in TOKENS:
        (policies / f"{name}.toml").write_text(f'principals = ["{name}"]\nallow = ["**"]\n')
    tokens = "".join(
        f'[[auth.tokens]]\nprincipal = "{name}"\ntoken_env = "{name.upper()}_TOKEN"\n\n' for name in TOKENS)
    config = folder / "config.toml"
    config.write_text(
        f'[auth]\nmode = "bearer"\n\n{tokens}[policies]\ndir = {json.dumps(str(policies))}\n\n'
        f'[[upstreams]]\nname = "fx"\nurl = {json.dumps(upstream)}\nprotocol = "{MODERN}"\n')
    env = {**os.environ, **{f"{name.upper()}_TOKEN": token for name, token in TOKENS.items()}}
    proxy = subprocess.Popen(
        [binary, "--log-format", "json", "serve", "--listen", "127.0.0.1:0", "--admin-listen", "off",
         "--config", str(config)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    for line in proxy.stderr:
        if "serving MCP at" in line:
            return proxy, json.loads(line[line.index("{"):])["fields"]["address"]
    sys.exit("the proxy did not start")


def call(address, principal, answer=None, state=None):
    """One 2026-07-28 `tools/call` of `fx__ask`; the JSON-RPC answer."""
    params = {"name": "fx__ask", "arguments": {"rounds": 2}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        "io.modelcontextprotocol/clientInfo": {"name": principal, "version": "0"}}}
    if answer is not None:
        params["inputResponses"] = {"who": {"action": "accept", "content": {"name": answer}}}
    if state is not None:
        params["requestState"] = state
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("POST", "/mcp", body=body, headers={
        "Accept": "application/json, text/event-stream", "Content-Type": "application/json",
        "Authorization": f"Bearer {TOKENS[principal]}", "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call", "Mcp-Name": "fx__ask"})
    text = connection.getresponse().read().decode()
    connection.close()
    try:
        return json.loads(text)
    except ValueError:
        return next(json.loads(l[5:]) for l in text.splitlines() if l.startswith("data:") and l[5:].strip())


def main():
    binary, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20
    fixture, upstream = start_fixture()
    try:
        with tempfile.TemporaryDirectory() as folder:
            proxy, address = start_proxy(binary, pathlib.Path(folder), upstream)
            try:
                for _ in range(50):  # until the proxy lists the fixture's tools
                    if "result" in call(address, "alice"):
                        break
                    time.sleep(0.2)
                leaked = 0
                for number in range(rounds):
                    secret = f"alice-secret-{number}"
                    first = call(address, "alice")["result"]
                    second = call(address, "alice", secret, first.get("requestState"))["result"]
                    replay = call(address, "bob", "bob", second.get("requestState"))
                    leaked += secret in json.dumps(replay.get("result", {}))
                print(f"{rounds} replays: bob got alice's elicited answer {leaked}/{rounds}; "
                      f"the last replay was answered: {json.dumps(replay)[:200]}")
            finally:
                proxy.kill()
                proxy.wait()
    finally:
        fixture.kill()
        fixture.wait()


if __name__ == "__main__":
    main()
