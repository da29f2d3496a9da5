#!/usr/bin/env python3
"""Memory after many closed 2025-era sessions: the proxy's resident set (VmRSS) before and after
rounds of sessions that each initialize, send `notifications/initialized`, list resources and
end with DELETE, `--parallel` at a time. Standard library only; Linux (/proc).

    python3 scripts/session_memory.py target/debug/mcp-resource-proxy config.toml \\
        --sessions 25000 --rounds 2 --parallel 8

The proxy is started on 127.0.0.1:0 with the admin listener off and stopped at the end. A warm-up
round (`--warmup`, default 500 sessions) runs before the baseline so that allocator arenas,
thread stacks and lazily built tables are counted in it. Each line prints the RSS and its
change per session since the baseline; a leak shows as a per-session figure that stays
constant from round to round, noise as one that shrinks towards zero.
"""

import argparse
import concurrent.futures
import http.client
import json
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
    deadline = time.monotonic() + 60
    for line in proxy.stderr:
        if "serving MCP at" in line:
            return proxy, json.loads(line)["fields"]["address"]
        if time.monotonic() > deadline:
            break
    proxy.kill()
    sys.exit("the proxy did not start")


def drain(proxy):
    """Keep reading the proxy's stderr so that it never blocks on a full pipe."""
    for _ in proxy.stderr:
        pass


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def post(connection, payload, session=None):
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if session:
        headers.update({"Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY})
    connection.request("POST", "/mcp", body=json.dumps(payload).encode(), headers=headers)
    response = connection.getresponse()
    response.read()
    return response


def one_session(address):
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "memory", "version": "0"}}}
        session = post(connection, init).getheader("mcp-session-id")
        post(connection, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
        post(connection, {"jsonrpc": "2.0", "id": 1, "method": "resources/list"}, session)
        connection.request("DELETE", "/mcp", headers={"Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def run_sessions(pool, address, count):
    statuses = list(pool.map(lambda _: one_session(address), range(count)))
    failed = [s for s in statuses if s not in (200, 202, 204)]
    if failed:
        sys.exit(f"{len(failed)} DELETEs failed: {failed[:5]}")


def settle(pid, seconds=3.0):
    """RSS once the proxy has finished its closing work: the smallest of a few samples."""
    samples = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        samples.append(rss_kib(pid))
        time.sleep(0.5)
    return min(samples)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("config")
    parser.add_argument("--sessions", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=500)
    args = parser.parse_args()
    proxy, address = start(args.binary, args.config)
    concurrent.futures.ThreadPoolExecutor(1).submit(drain, proxy)
    try:
        with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
            run_sessions(pool, address, args.warmup)
            baseline = settle(proxy.pid)
            print(f"baseline after {args.warmup} warm-up sessions: {baseline / 1024:.1f} MiB", flush=True)
            total = 0
            for round_number in range(1, args.rounds + 1):
                started = time.monotonic()
                run_sessions(pool, address, args.sessions)
                total += args.sessions
                rss = settle(proxy.pid)
                print(f"round {round_number}: {args.sessions} sessions in {time.monotonic() - started:.0f} s; "
                      f"RSS {rss / 1024:.1f} MiB, {(rss - baseline) / 1024:+.1f} MiB since baseline, "
                      f"{(rss - baseline) * 1024 / total:+.0f} B per closed session", flush=True)
    finally:
        proxy.kill()
        proxy.wait()


if __name__ == "__main__":
    main()
