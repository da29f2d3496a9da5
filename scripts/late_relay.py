#!/usr/bin/env python3
"""Late messages of a stdio upstream: how many reach another principal's call. Starts the given
proxy binary on 127.0.0.1:0 in front of the fixture (target/debug/examples/mcp-proxy-fixture,
built by `cargo build --example mcp-proxy-fixture`) over stdio in the 2025 era, with principals
alice and bob (bearer tokens, everything allowed), and runs ROUNDS rounds of: bob calls the
fixture's `late` tool held for 600 ms; meanwhile alice calls it with `after_ms = 100,
sample = true`, so 100 ms after her call answered the fixture logs `alice-<n> late` and asks
`late sampling of alice-<n>` while bob's call is the only one in flight. Counts alice's
messages that bob was sent. Needs the PyPI `mcp` client of .peers/venv:

    .peers/venv/bin/python scripts/late_relay.py target/debug/mcp-resource-proxy 100
"""

import asyncio
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOKENS = {"alice": "alice-token-late-relay", "bob": "bob-token-late-relay"}


def start(binary, folder):
    policies = folder / "policies"
    policies.mkdir()
    for name in TOKENS:
        (policies / f"{name}.toml").write_text(f'principals = ["{name}"]\nallow = ["**"]\n')
    fixture = ROOT / "target/debug/examples/mcp-proxy-fixture"
    tokens = "".join(
        f'[[auth.tokens]]\nprincipal = "{name}"\ntoken_env = "{name.upper()}_TOKEN"\n\n' for name in TOKENS)
    config = folder / "config.toml"
    config.write_text(
        f'[auth]\nmode = "bearer"\n\n{tokens}[policies]\ndir = {json.dumps(str(policies))}\n\n'
        f'[[upstreams]]\nname = "fx"\ncommand = {json.dumps(str(fixture))}\nargs = []\nprotocol = "2025-11-25"\n')
    env = {**os.environ, **{f"{name.upper()}_TOKEN": token for name, token in TOKENS.items()}}
    proxy = subprocess.Popen(
        [binary, "--log-format", "json", "serve", "--listen", "127.0.0.1:0", "--admin-listen", "off",
         "--config", str(config)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 60
    for line in proxy.stderr:
        if "serving MCP at" in line:
            return proxy, json.loads(line[line.index("{"):])["fields"]["address"]
        if time.monotonic() > deadline:
            break
    proxy.kill()
    sys.exit("the proxy did not start")


class Host:
    """A 2025 host that records the log messages and sampling prompts it is sent."""

    def __init__(self, name):
        self.name = name
        self.heard = []

    async def sampling(self, context, params):
        self.heard.append(("asked", json.dumps(params.model_dump(mode="json")["messages"])))
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=f"the answer of {self.name}"), model="m")

    async def logging(self, params):
        self.heard.append(("log", str(params.data)))


async def rounds(address, count):
    alice, bob = Host("alice"), Host("bob")
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {TOKENS['alice']}"}) as alice_http, \
            create_mcp_http_client(headers={"Authorization": f"Bearer {TOKENS['bob']}"}) as bob_http:
        url = f"http://{address}/mcp"
        async with Client(streamable_http_client(url, http_client=alice_http), mode="legacy", cache=None,
                          sampling_callback=alice.sampling, logging_callback=alice.logging) as alice_client, \
                Client(streamable_http_client(url, http_client=bob_http), mode="legacy", cache=None,
                       sampling_callback=bob.sampling, logging_callback=bob.logging) as bob_client:
            for _ in range(50):  # the upstream may still be starting
                if any(t.name == "fx__late" for t in (await alice_client.list_tools()).tools):
                    break
                await asyncio.sleep(0.2)
            for number in range(count):
                bobs = asyncio.create_task(bob_client.call_tool("fx__late", {"tag": f"bob-{number}", "hold_ms": 600}))
                await asyncio.sleep(0.05)
                await alice_client.call_tool(
                    "fx__late", {"tag": f"alice-{number}", "after_ms": 100, "sample": True})
                await bobs
    logs = sum(1 for kind, text in bob.heard if kind == "log" and "alice" in text)
    asked = sum(1 for kind, text in bob.heard if kind == "asked" and "alice" in text)
    return logs, asked, len(bob.heard)


def main():
    binary, count = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 100
    with tempfile.TemporaryDirectory() as folder:
        proxy, address = start(binary, pathlib.Path(folder))
        try:
            logs, asked, total = asyncio.run(rounds(address, count))
            print(f"{count} rounds: alice's late log reached bob {logs}/{count}; "
                  f"alice's late sampling was asked of bob {asked}/{count} ({total} messages to bob in all)")
        finally:
            proxy.kill()
            proxy.wait()


if __name__ == "__main__":
    main()
