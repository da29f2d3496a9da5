#!/usr/bin/env python3
"""A 2025-era session client against a real proxy binary: initialize, then N sequential
`resources/read` of one URI (cache hits after the first) on one kept-alive HTTP/1.1
connection. Prints req/s and the p50/p99 latency. Standard library only.

    python3 scripts/bench_legacy_session.py target/release/mcp-resource-proxy config.toml 2000

The proxy is started on 127.0.0.1:0 with the admin listener off and stopped at the end.
"""

import http.client
import json
import statistics
import subprocess
import sys
import time

LEGACY = "2025-11-25"


def start(binary, config):
    proxy = subprocess.Popen(
        [binary, "--log-format", "json", "serve", "--listen", "127.0.0.1:0",
         "--admin-listen", "off", "--config", config],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 30
    for line in proxy.stderr:
        if "serving MCP at" in line:
            return proxy, json.loads(line)["fields"]["address"]
        if time.monotonic() > deadline:
            break
    proxy.kill()
    sys.exit("the proxy did not start")


def message(body):
    """The JSON-RPC answer: the whole body, or the first SSE data line that is JSON."""
    text = body.decode()
    try:
        return json.loads(text)
    except ValueError:
        for line in text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                return json.loads(line[5:])
    return None


def post(connection, payload, session=None):
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if session:
        headers.update({"Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY})
    connection.request("POST", "/mcp", body=json.dumps(payload).encode(), headers=headers)
    response = connection.getresponse()
    return response, response.read()


def main():
    binary, config, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    proxy, address = start(binary, config)
    try:
        host, port = address.rsplit(":", 1)
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}
        response, _ = post(connection, init)
        session = response.getheader("mcp-session-id")
        post(connection, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
        _, body = post(connection, {"jsonrpc": "2.0", "id": 1, "method": "resources/list"}, session)
        uri = message(body)["result"]["resources"][0]["uri"]
        read = {"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": uri}}
        post(connection, read, session)  # warm the cache
        latencies = []
        started = time.perf_counter()
        for _ in range(count):
            sent = time.perf_counter()
            _, body = post(connection, read, session)
            latencies.append(time.perf_counter() - sent)
            assert message(body)["result"]["contents"], body
        elapsed = time.perf_counter() - started
        latencies.sort()
        print(f"{count} reads of {uri}: {count / elapsed:.0f} req/s, "
              f"p50 {statistics.median(latencies) * 1e3:.2f} ms, "
              f"p99 {latencies[int(len(latencies) * 0.99) - 1] * 1e3:.2f} ms")
    finally:
        proxy.kill()
        proxy.wait()


if __name__ == "__main__":
    main()
