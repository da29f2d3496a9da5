#!/usr/bin/env python3
"""N `resources/read` of one URI on one kept-alive HTTP/1.1 connection to a proxy on
127.0.0.1:PORT, as a 2026-07-28 stateless host or a 2025 session host; every reply must carry
a result. With TRACED=1 every read carries a host's `traceparent` and `tracestate` in `_meta`,
as a traced host's do. Standard library only; used by scripts/callgrind_read.sh.

    python3 scripts/read_driver.py PORT 2026|2025 N URI
"""

import http.client
import json
import os
import sys

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
TRACE_CONTEXT = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "host=1"}


def main():
    port, era, count, uri = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    connection = http.client.HTTPConnection("127.0.0.1", port)
    base = {"host": f"127.0.0.1:{port}", "content-type": "application/json",
            "accept": "application/json, text/event-stream"}

    def post(body, extra):
        data = json.dumps(body).encode()
        headers = dict(base, **extra)
        headers["content-length"] = str(len(data))
        connection.request("POST", "/mcp", data, headers)
        response = connection.getresponse()
        reply = response.read()
        if response.status not in (200, 202):
            raise SystemExit(f"HTTP {response.status}: {reply!r}")
        return response, reply

    extra = {}
    if era == "2025":
        init = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "driver", "version": "0"}}
        response, _ = post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}, {})
        extra = {"mcp-session-id": response.getheader("mcp-session-id"), "mcp-protocol-version": LEGACY}
        post({"jsonrpc": "2.0", "method": "notifications/initialized"}, extra)
    for i in range(count):
        params, headers = {"uri": uri}, dict(extra)
        if era == "2026":
            params["_meta"] = {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "driver", "version": "0"},
            }
            headers.update({"mcp-protocol-version": MODERN, "mcp-method": "resources/read", "mcp-name": uri})
        if os.environ.get("TRACED") == "1":
            params["_meta"] = dict(params.get("_meta", {}), **TRACE_CONTEXT)
        _, reply = post({"jsonrpc": "2.0", "id": i + 1, "method": "resources/read", "params": params}, headers)
        if b'"result"' not in reply:
            raise SystemExit(f"read {uri}: {reply!r}")


if __name__ == "__main__":
    main()
