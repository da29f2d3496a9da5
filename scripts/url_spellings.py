#!/usr/bin/env python3
"""Spellings of a denied host against an upstream that resolves URIs with a URL parser: how many
read the secret. Starts the given proxy binary on 127.0.0.1:0 with tests/py/url_parsing_server.py
(PyPI `mcp`, from .peers/venv) as upstream `web`, a policy denying `web+web://secret.corp/**` to
alice, and reads each spelling of `web+web://secret.corp/key` as alice over a 2025 session.
Standard library only.

    python3 scripts/url_spellings.py target/debug/mcp-resource-proxy
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
TOKEN = "alice-token-url-spellings"
SPELLINGS = [
    "web+web://secret.corp/key", "web+web://@secret.corp/key", "web+web://u@secret.corp/key",
    "web+web://u:p@secret.corp/key", "web+web://secret.corp:/key", "web+web://secret.corp:80/key",
    "web+web://secret.corp:0080/key", "web+web://secret.corp./key", "web+web://SECRET.CORP./key",
    "web+web://secret.corp.:/key", "web+web://secret.corp.:443/key", "web+web://@secret.corp.:8080/key",
    "web+web://secret.corp%2E/key",
]


def start(binary, folder):
    policies = folder / "policies"
    policies.mkdir()
    (policies / "alice.toml").write_text(
        'principals = ["alice"]\nallow = ["**"]\ndeny = ["web+web://secret.corp/**"]\n')
    config = folder / "config.toml"
    python = ROOT / ".peers/venv/bin/python"
    script = ROOT / "tests/py/url_parsing_server.py"
    config.write_text(
        f'[auth]\nmode = "bearer"\n\n[[auth.tokens]]\nprincipal = "alice"\ntoken_env = "ALICE_TOKEN"\n\n'
        f'[policies]\ndir = {json.dumps(str(policies))}\n\n'
        f'[[upstreams]]\nname = "web"\ncommand = {json.dumps(str(python))}\nargs = [{json.dumps(str(script))}]\n'
        f'protocol = "2025-11-25"\n')
    proxy = subprocess.Popen(
        [binary, "--log-format", "json", "serve", "--listen", "127.0.0.1:0", "--admin-listen", "off",
         "--config", str(config)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "ALICE_TOKEN": TOKEN},
    )
    deadline = time.monotonic() + 60
    for line in proxy.stderr:
        if "serving MCP at" in line:
            return proxy, json.loads(line[line.index("{"):])["fields"]["address"]
        if time.monotonic() > deadline:
            break
    proxy.kill()
    sys.exit("the proxy did not start")


def message(body):
    text = body.decode()
    try:
        return json.loads(text)
    except ValueError:
        for line in text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                return json.loads(line[5:])
    return None


def post(connection, payload, session=None):
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "Authorization": f"Bearer {TOKEN}"}
    if session:
        headers.update({"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"})
    connection.request("POST", "/mcp", body=json.dumps(payload).encode(), headers=headers)
    response = connection.getresponse()
    return response, message(response.read())


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as folder:
        proxy, address = start(binary, pathlib.Path(folder))
        try:
            host, port = address.rsplit(":", 1)
            connection = http.client.HTTPConnection(host, int(port), timeout=30)
            init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "spellings", "version": "0"}}}
            response, _ = post(connection, init)
            session = response.getheader("mcp-session-id")
            post(connection, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
            read = 0
            for number, uri in enumerate(SPELLINGS, 1):
                for _ in range(50):  # the upstream may still be starting
                    _, answer = post(connection, {"jsonrpc": "2.0", "id": number, "method": "resources/read",
                                                  "params": {"uri": uri}}, session)
                    if "public" not in json.dumps(answer) and answer.get("error", {}).get("code") != -32603:
                        break
                    time.sleep(0.2)
                leaked = "result" in answer
                read += leaked
                print(f"{'READ  ' if leaked else 'denied'} {uri}")
            print(f"{read} of {len(SPELLINGS)} spellings read the secret")
        finally:
            proxy.kill()
            proxy.wait()


if __name__ == "__main__":
    main()
