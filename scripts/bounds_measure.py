#!/usr/bin/env python3
"""Measure the proxy's bounds the way an adversarial run found them (docs/security.md#bounds-and-what-they-cost).

    scripts/bounds_measure.py fds PROXY              # 1,100 half-open connections under `ulimit -n 1024`
    scripts/bounds_measure.py search PROXY FIXTURE   # 8 bridge searchers vs another principal's read p50
    scripts/bounds_measure.py subs PROXY FIXTURE     # RSS per subscription and per idle session

PROXY is an `mcp-resource-proxy` binary, FIXTURE an `mcp-proxy-fixture` (target/*/examples/).
Raw HTTP (stdlib only): stateless 2026-07-28 requests and 2025-11-25 sessions. Every figure of
one run is measured side by side; compare binaries run by run, not absolute times across runs.
"""

import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ALICE, BOB = "alice-measure-token", "bob-measure-token"
MODERN, LEGACY = "2026-07-28", "2025-11-25"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config(server, rest):
    return (f"[server]\n{server}\n\n[auth]\nmode = \"bearer\"\n\n"
            f"[[auth.tokens]]\nprincipal = \"alice\"\ntoken_env = \"ALICE_TOKEN\"\n\n"
            f"[[auth.tokens]]\nprincipal = \"bob\"\ntoken_env = \"BOB_TOKEN\"\n\n{rest}")


class Proxy:
    def __init__(self, binary, text, work, nofile=None):
        self.port, self.admin = free_port(), free_port()
        path = os.path.join(work, "config.toml")
        with open(path, "w") as f:
            f.write(text)
        command = [binary, "serve", "--config", path, "--listen", f"127.0.0.1:{self.port}",
                   "--admin-listen", f"127.0.0.1:{self.admin}"]
        if nofile:
            command = ["prlimit", f"--nofile={nofile}", "--"] + command
        env = dict(os.environ, ALICE_TOKEN=ALICE, BOB_TOKEN=BOB, RUST_LOG="warn")
        self.log = open(os.path.join(work, "proxy.log"), "w")
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                status = json.loads(get(self.admin, "/status"))
                if all(u.get("state") == "up" for u in status.get("upstreams", [])):
                    return
            except (OSError, ValueError, http.client.HTTPException):
                pass
            time.sleep(0.2)
        raise SystemExit("the proxy did not come up")

    def rss_kib(self):
        with open(f"/proc/{self.process.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

    def fds(self):
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def stop(self):
        self.process.kill()
        self.process.wait()


def get(port, path, timeout=10):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    connection.request("GET", path, headers={"Host": f"127.0.0.1:{port}"})
    return connection.getresponse().read()


def message(body):
    text = body.decode(errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        for line in text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                try:
                    return json.loads(line[5:])
                except ValueError:
                    continue
    return None


def post(port, token, body, headers=None, connection=None, timeout=30):
    connection = connection or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    all_headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}
    all_headers.update(headers or {})
    connection.request("POST", "/mcp", json.dumps(body), all_headers)
    response = connection.getresponse()
    return response, message(response.read())


def modern(port, token, method, params, name=None, connection=None):
    params = dict(params, _meta={"io.modelcontextprotocol/protocolVersion": MODERN,
                                 "io.modelcontextprotocol/clientCapabilities": {},
                                 "io.modelcontextprotocol/clientInfo": {"name": "measure", "version": "0"}})
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if name:
        headers["Mcp-Name"] = name
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return post(port, token, body, headers, connection)[1]


def session(port, token):
    """An open 2025-11-25 session: (session id, connection)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "measure", "version": "0"}}}
    response, _ = post(port, token, body, connection=connection)
    sid = response.getheader("mcp-session-id")
    headers = {"Mcp-Session-Id": sid, "MCP-Protocol-Version": LEGACY}
    post(port, token, {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers, connection)
    return sid, connection


def bare_session(port, token):
    """A 2025-11-25 session that says `initialize` and nothing more."""
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "measure", "version": "0"}}}
    response, _ = post(port, token, body)
    return response.getheader("mcp-session-id")


def in_session(port, token, sid, connection, method, params, id_=1):
    headers = {"Mcp-Session-Id": sid, "MCP-Protocol-Version": LEGACY}
    return post(port, token, {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}, headers, connection)[1]


def fixture(binary, work, *args):
    out = os.path.join(work, "fixture.out")
    port = free_port()
    process = subprocess.Popen([binary, "--http", f"127.0.0.1:{port}", *args],
                               stdout=open(out, "w"), stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        with open(out) as f:
            for line in f:
                if line.startswith("LISTENING "):
                    return process, line.split()[1]
        time.sleep(0.1)
    raise SystemExit("the fixture did not come up")


def measure_fds(binary):
    """1,100 half-open connections under a soft limit of 1,024 (hard 1,024, and the hard limit
    of this shell, as under the shipped unit before LimitNOFILE): a folder read and /status, timed."""
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    for nofile in ["1024:1024", f"1024:{hard}"]:
        with tempfile.TemporaryDirectory() as work:
            folder = os.path.join(work, "docs")
            os.mkdir(folder)
            for name in ["a.txt", "b.txt"]:
                with open(os.path.join(folder, name), "w") as f:
                    f.write("alpha")
            text = config("header_read_timeout = \"60s\"", f"[cache]\nenabled = false\n\n"
                          f"[[upstreams]]\nname = \"docs\"\ndir = \"{folder}\"\n")
            proxy = Proxy(binary, text, work, nofile=nofile)
            rss_before = proxy.rss_kib()
            flood = []
            for _ in range(1100):
                s = socket.socket()
                s.connect(("127.0.0.1", proxy.port))
                flood.append(s)
            time.sleep(2)  # let the accept loop take what it will (a measurement, not a test)
            started = time.time()
            try:
                answer = modern(proxy.port, ALICE, "resources/read", {"uri": "docs+file:///b.txt"},
                                name="docs+file:///b.txt")
                read = "ok" if answer and "result" in answer else f"error {answer}"
            except OSError as error:
                read = f"failed: {error}"
            read_s = time.time() - started
            started = time.time()
            try:
                get(proxy.admin, "/status", timeout=15)
                status = "ok"
            except OSError as error:
                status = f"failed: {error}"
            status_s = time.time() - started
            fds = proxy.fds()
            rss_flood = proxy.rss_kib()
            with open(os.path.join(work, "proxy.log")) as f:
                emfile = sum("Too many open files" in line for line in f)
            print(f"nofile {nofile}: folder read {read} in {read_s:.3f} s; /status {status} in {status_s:.3f} s; "
                  f"{fds} fds open; {emfile} 'Too many open files' log lines; RSS {rss_before} → {rss_flood} KiB")
            for s in flood:
                s.close()
            proxy.stop()


def p50_read(port, token, uri, count):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times = []
    for _ in range(count):
        started = time.perf_counter()
        answer = modern(port, token, "resources/read", {"uri": uri}, name=uri, connection=connection)
        times.append(time.perf_counter() - started)
        assert answer and "result" in answer, answer
    return statistics.median(times) * 1000, sorted(times)[int(len(times) * 0.99) - 1] * 1000


def measure_search(binary, fixture_binary, resources=99_000, searchers=8, extra_server=""):
    """Another principal's read p50 unloaded, then with eight bridge searchers of alice's. 99,000
    resources: with the fixture's few others the catalog stays under the 100,000-item list bound."""
    with tempfile.TemporaryDirectory() as work:
        upstream, url = fixture(fixture_binary, work, "--resources", str(resources), "--page-size", "5000",
                                "--ttl-ms", "3600000")
        text = config(extra_server, f"[bridge]\nenabled = true\n\n[[upstreams]]\nname = \"fx\"\nurl = \"{url}\"\n")
        proxy = Proxy(binary, text, work)
        uri = "fx+fx://fx/item/1"
        p50_read(proxy.port, BOB, uri, 20)
        unloaded = p50_read(proxy.port, BOB, uri, 200)
        stop, calls, cut, cpu = threading.Event(), [0], [0], []

        def searcher():
            connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=120)
            while not stop.is_set():
                answer = modern(proxy.port, ALICE, "tools/call",
                                {"name": "proxy_resources_search", "arguments": {"query": "no-such-text"}},
                                name="proxy_resources_search", connection=connection)
                calls[0] += 1
                content = (answer or {}).get("result", {}).get("structuredContent") or {}
                cut[0] += bool(content.get("incomplete"))

        threads = [threading.Thread(target=searcher) for _ in range(searchers)]
        for thread in threads:
            thread.start()
        time.sleep(2)
        started = time.time()
        loaded = p50_read(proxy.port, BOB, uri, 200)
        elapsed = time.time() - started
        stop.set()
        for thread in threads:
            thread.join()
        print(f"{resources} resources: bob's read p50 {unloaded[0]:.2f} ms (p99 {unloaded[1]:.2f}) unloaded; "
              f"{loaded[0]:.2f} ms (p99 {loaded[1]:.2f}) with {searchers} searchers "
              f"({loaded[0] / unloaded[0]:.2f}x); {calls[0]} searches in all, {cut[0]} cut; loaded run {elapsed:.1f} s")
        proxy.stop()
        upstream.kill()


def measure_subs(binary, fixture_binary, sessions=40, per_session=1000, idle=2000, extra_server=""):
    """RSS per subscription (one principal, `sessions` × `per_session` distinct URIs) and per
    idle initialize-only session, with `notifications/initialized` and without."""
    with tempfile.TemporaryDirectory() as work:
        upstream, url = fixture(fixture_binary, work, "--resources", "10", "--page-size", "100")
        server = f"max_subscriptions_per_session = {per_session}\nmax_sessions_per_principal = 10000\n{extra_server}"
        proxy = Proxy(binary, config(server, f"[[upstreams]]\nname = \"fx\"\nurl = \"{url}\"\n"), work)
        base = proxy.rss_kib()
        refused = 0
        kept = []
        for s in range(sessions):
            sid, connection = session(proxy.port, ALICE)
            kept.append((sid, connection))
            for i in range(per_session):
                uri = f"fx+fx://fx/item/{s * per_session + i}"
                answer = in_session(proxy.port, ALICE, sid, connection, "resources/subscribe", {"uri": uri}, i + 1)
                refused += not (answer and "result" in answer)
        held = sessions * per_session - refused
        subscribed = proxy.rss_kib()
        print(f"subscriptions: {held} held, {refused} refused; RSS {base} → {subscribed} KiB: "
              f"{(subscribed - base) * 1024 / max(held, 1):.0f} B per subscription held")
        before_idle = proxy.rss_kib()
        for _ in range(idle):
            session(proxy.port, BOB)[1].close()
        after_idle = proxy.rss_kib()
        print(f"idle sessions: {idle} initialize-only sessions: RSS {before_idle} → {after_idle} KiB: "
              f"{(after_idle - before_idle) * 1024 / idle / 1024:.1f} KiB per session")
        for _ in range(idle):
            bare_session(proxy.port, BOB)
        after_bare = proxy.rss_kib()
        print(f"idle sessions: {idle} more without notifications/initialized: RSS {after_idle} → {after_bare} KiB: "
              f"{(after_bare - after_idle) / idle:.1f} KiB per session")
        proxy.stop()
        upstream.kill()


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    what, binary = sys.argv[1], sys.argv[2]
    if what == "fds":
        measure_fds(binary)
    elif what == "search":
        measure_search(binary, sys.argv[3], extra_server=os.environ.get("SERVER_EXTRA", ""))
    elif what == "subs":
        measure_subs(binary, sys.argv[3], sessions=int(os.environ.get("SESSIONS", "40")),
                     per_session=int(os.environ.get("PER_SESSION", "1000")),
                     extra_server=os.environ.get("SERVER_EXTRA", ""))
    else:
        raise SystemExit(__doc__)
