#!/usr/bin/env python3
"""Round-trip times of `resources/read` through two proxies, taken in pairs: each round sends one
read to each proxy, in a random order, so both see the same machine load; optionally after an
idle gap before each read (a read that finds the process's caches cold, as a miss's reply does).
Prints each proxy's p25/p50 in µs and the ratio of the second's p50 to the first's. Standard
library only; used by scripts/paired_reads.sh.

    python3 scripts/paired_reads.py PORT_A,PORT_B ROUNDS GAP_SECONDS 2026|2025 URI
"""

import http.client
import json
import random
import statistics
import sys
import time

MODERN = "2026-07-28"
LEGACY = "2025-11-25"


def connect(port, era, uri):
    """A kept-alive connection and the request (body, headers) it repeats."""
    connection = http.client.HTTPConnection("127.0.0.1", port)
    base = {"content-type": "application/json", "accept": "application/json, text/event-stream"}

    def post(body, extra):
        data = json.dumps(body).encode()
        connection.request("POST", "/mcp", data, dict(base, **extra, **{"content-length": str(len(data))}))
        response = connection.getresponse()
        response.read()
        return response

    params = {"uri": uri}
    if era == "2025":
        init = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "paired", "version": "0"}}
        session = post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}, {})
        extra = {"mcp-session-id": session.getheader("mcp-session-id"), "mcp-protocol-version": LEGACY}
        post({"jsonrpc": "2.0", "method": "notifications/initialized"}, extra)
    else:
        extra = {"mcp-protocol-version": MODERN, "mcp-method": "resources/read", "mcp-name": uri}
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "paired", "version": "0"},
        }
    data = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": params}).encode()
    return connection, data, dict(base, **extra, **{"content-length": str(len(data))})


def main():
    ports = [int(port) for port in sys.argv[1].split(",")]
    rounds, gap, era, uri = int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
    peers = [connect(port, era, uri) for port in ports]
    times = [[] for _ in peers]
    order = list(range(len(peers)))
    for _ in range(rounds):
        random.shuffle(order)
        for k in order:
            if gap:
                time.sleep(gap)  # the idle gap being measured, not a synchronisation
            connection, data, headers = peers[k]
            started = time.perf_counter()
            connection.request("POST", "/mcp", data, headers)
            reply = connection.getresponse().read()
            times[k].append(time.perf_counter() - started)
            if b'"result"' not in reply:
                raise SystemExit(f"read {uri}: {reply[:200]!r}")
    p50 = [statistics.median(t) * 1e6 for t in times]
    p25 = [sorted(t)[len(t) // 4] * 1e6 for t in times]
    print(f"{era} A p50 {p50[0]:.0f} µs (p25 {p25[0]:.0f}), B p50 {p50[1]:.0f} µs (p25 {p25[1]:.0f}), B/A {p50[1] / p50[0]:.3f}")


if __name__ == "__main__":
    main()
