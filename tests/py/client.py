#!/usr/bin/env python3
"""Scriptable MCP client for the proxy's tests, built on PyPI `mcp` 2.3.0 (`mcp.Client`).

Usage:
    client.py (--url URL | --stdio PROGRAM [ARG...] [--]) [--mode legacy|2026-07-28|auto]
              [--header 'K: V']... [--timeout S] [--client-cache off|default] OP...

`--stdio` takes every following token as the program and its args until one of this script's own
options (`--mode`, `--header`, `--url`, `--timeout`, `--client-cache`) or a lone `--` (consumed).
`--client-cache default` keeps the SDK's own response cache as a host has it out of the box (it honours
the `ttlMs`/`cacheScope` it is told); `off` (the default here) turns it off. Everything after the
options is an OP. OPs run in order on ONE connection; each prints exactly one JSON line on stdout
(flushed). Diagnostics go to stderr. Exit status: 0 unless connecting failed or the connection broke
with a non-MCP error (then 1); a failed op is reported as `"error": {"code", "message"[, "data"]}`.

OPs:
  list_all                    {"op":"list_all","uris":[...],"pages":n,"ttlMs":min|null,"cacheScope":..|null}
                              (follows nextCursor; ttlMs/cacheScope are null when absent on the wire)
  templates_all               {"op":"templates_all","uriTemplates":[...],"pages":n}
  read:URI                    {"op":"read","uri":URI,"contents":[{"uri","mimeType","text"|"blob"}],
                               "ttlMs":n|null,"cacheScope":s|null}  or  {"op":"read","uri":URI,"error":{...}}
  list_cursor:CURSOR          {"op":"list_cursor","page":{raw resources/list result}} or {"op":...,"error":{...}}
  subscribe:URI               legacy resources/subscribe -> {"op":"subscribe","uri":URI,"ok":true} | error
  unsubscribe:URI             legacy resources/unsubscribe -> {"op":"unsubscribe","uri":URI,"ok":true} | error
  listen:URI[,URI...]         2026-07-28 subscriptions/listen (resourceSubscriptions=URIs,
                              resourcesListChanged=true), kept open until exit ->
                              {"op":"listen","uris":[...],"honored":{...}} | error. `listen:` = list changes only.
  wait_updated:URI:TIMEOUT_S  {"op":"wait_updated","uri":URI,"received":bool,"via":"legacy"|"listen"|null}
                              consumes one pending notifications/resources/updated for URI (received at any time
                              since connecting, from either mechanism) or waits up to TIMEOUT_S for one.
  wait_list_changed:TIMEOUT_S {"op":"wait_list_changed","received":bool,"via":...} (same, for list_changed)
  call:TOOL:JSONARGS          {"op":"call","tool":TOOL,"result":{raw CallToolResult}} | error
  call_progress:TOOL:JSONARGS the same call asking for progress: {"op":"progress","progress":n} at its first
                              progress notification, then {"op":"call_progress","tool":TOOL,"result":{...}} | error
  call_sampled:REPLY:TOOL:JSONARGS
                              the call, every sampling/createMessage asked for it answered with the assistant
                              text REPLY (no `:` in it) -> {"op":"call_sampled","tool":TOOL,"sampled":n,
                              "result":{...}} | error; n: the sampling requests this call was asked
  call_elicited:NAME:TOOL:JSONARGS
                              the call, every elicitation/create asked for it accepted with content
                              {"name": NAME} -> {"op":"call_elicited","tool":TOOL,"elicited":n,"result":{...}} | error
  updates:N:TIMEOUT_S         waits until N notifications/resources/updated were received since connecting (or
                              TIMEOUT_S passed) -> {"op":"updates","heard":[{"uri","via","at","during"}...]}: every
                              one received so far, consumed by wait_updated or not, in arrival order; `at` in
                              seconds since connecting, `during` the index (from 0) of the op running when it came
  ready                       {"op":"ready"} (flushed: subscriptions made by earlier ops are in place)
  sleep_until_stdin           blocks until a line (or EOF) arrives on stdin -> {"op":"sleep_until_stdin","eof":bool}
  info                        {"op":"info","protocolVersion":..,"serverInfo":..,"capabilities":..}
                              (with --mode 2026-07-28 the SDK adopts the version without a discover call,
                              so capabilities are {} until a `discover` op)
  discover[:VERSION]          sends server/discover (default 2026-07-28), nothing adopted ->
                              {"op":"discover","result":{raw}} | error

A host that has a call_sampled (call_elicited) op declares sampling (elicitation) and answers it as that op
says while the op runs; one that has none declares neither.

With OTEL_EXPORTER_OTLP_ENDPOINT set, the SDK's own CLIENT spans are exported there (one at a time, as
each ends), and every request carries its span's context in `_meta.traceparent` (the SDK injects it).

Notifications are recorded from the session's message handler, which sees both legacy notifications
and listen-stream events (the SDK tees listen events there too); `via` is "listen" when the
notification carried `_meta["io.modelcontextprotocol/subscriptionId"]`.
"""

from __future__ import annotations

import json
import sys
import traceback
import warnings
from contextlib import AsyncExitStack
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from traces_export import export_traces_if_asked

warnings.simplefilter("ignore")  # subscribe_resource etc. are deprecated-for-2026 and warn

SUBSCRIPTION_ID_META_KEY = "io.modelcontextprotocol/subscriptionId"
OWN_OPTIONS = {"--mode", "--header", "--url", "--timeout", "--client-cache"}
KNOWN_OPS = {
    "list_all", "templates_all", "read", "list_cursor", "subscribe", "unsubscribe", "listen", "wait_updated",
    "wait_list_changed", "call", "call_progress", "call_sampled", "call_elicited", "updates", "ready",
    "sleep_until_stdin", "sleep", "info", "discover",
}


def die(msg: str) -> None:
    print(f"client.py: {msg}", file=sys.stderr)
    sys.exit(2)


def out(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def err_obj(e: MCPError) -> dict[str, Any]:
    d: dict[str, Any] = {"code": e.code, "message": e.message}
    if e.data is not None:
        d["data"] = e.data
    return d


def dump(model: Any) -> Any:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def wire_cache(result: Any) -> tuple[int | None, str | None]:
    """ttlMs/cacheScope as they were on the wire (the model defaults them to 0/private when absent)."""
    fs = result.model_fields_set
    return (result.ttl_ms if "ttl_ms" in fs else None, result.cache_scope if "cache_scope" in fs else None)


def parse_args(argv: list[str]) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "url": None, "stdio": None, "mode": "legacy", "headers": {}, "timeout": 30.0, "client_cache": "off", "ops": [],
    }
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--url":
            cfg["url"] = argv[i + 1]
            i += 2
        elif a == "--stdio":
            j = i + 1
            cmd: list[str] = []
            while j < len(argv) and argv[j] not in OWN_OPTIONS and argv[j] != "--":
                cmd.append(argv[j])
                j += 1
            if j < len(argv) and argv[j] == "--":
                j += 1
            if not cmd:
                die("--stdio needs a PROGRAM")
            cfg["stdio"] = cmd
            i = j
        elif a == "--mode":
            cfg["mode"] = argv[i + 1]
            i += 2
        elif a == "--header":
            k, sep, v = argv[i + 1].partition(":")
            if not sep:
                die(f"bad --header {argv[i + 1]!r}, want 'K: V'")
            cfg["headers"][k.strip()] = v.strip()
            i += 2
        elif a == "--timeout":
            cfg["timeout"] = float(argv[i + 1])
            i += 2
        elif a == "--client-cache":
            if argv[i + 1] not in ("off", "default"):
                die(f"--client-cache takes off or default, not {argv[i + 1]!r}")
            cfg["client_cache"] = argv[i + 1]
            i += 2
        elif a.startswith("--"):
            die(f"unknown option {a}")
        else:
            cfg["ops"].append(a)
            i += 1
    if (cfg["url"] is None) == (cfg["stdio"] is None):
        die("exactly one of --url URL / --stdio PROGRAM [ARG...] is required")
    for op in cfg["ops"]:
        if op.partition(":")[0] not in KNOWN_OPS:
            die(f"unknown op {op!r}")
    return cfg


class Events:
    """Notifications seen on this connection, consumed by the wait_* ops; every `updated` also kept in `heard`."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, str | None, str]] = []  # (kind, uri, via)
        self.heard: list[dict[str, Any]] = []  # every updated: {"uri", "via", "at", "during"}
        self.started = anyio.current_time()
        self.op = 0  # the index of the op running
        self.wake = anyio.Event()

    def add(self, kind: str, uri: str | None, via: str) -> None:
        self.pending.append((kind, uri, via))
        if kind == "updated":
            at = round(anyio.current_time() - self.started, 3)
            self.heard.append({"uri": uri, "via": via, "at": at, "during": self.op})
        self.wake.set()
        self.wake = anyio.Event()

    async def take(self, kind: str, uri: str | None, timeout: float) -> str | None:
        with anyio.move_on_after(timeout):
            while True:
                for n, (k, u, via) in enumerate(self.pending):
                    if k == kind and (uri is None or u == uri):
                        del self.pending[n]
                        return via
                await self.wake.wait()
        return None

    async def until_heard(self, count: int, timeout: float) -> None:
        with anyio.move_on_after(timeout):
            while len(self.heard) < count:
                await self.wake.wait()


class Answers:
    """What this host answers the server's sampling and elicitation with, set by the op running."""

    def __init__(self) -> None:
        self.reply: str | None = None  # call_sampled's REPLY
        self.name: str | None = None  # call_elicited's NAME
        self.asked = 0

    async def sample(self, context: Any, params: types.CreateMessageRequestParams) -> Any:
        if self.reply is None:
            return types.ErrorData(code=-32600, message="no call_sampled op is running")
        self.asked += 1
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=self.reply), model="client.py",
            stop_reason="endTurn",
        )

    async def elicit(self, context: Any, params: types.ElicitRequestParams) -> Any:
        if self.name is None:
            return types.ErrorData(code=-32600, message="no call_elicited op is running")
        self.asked += 1
        return types.ElicitResult(action="accept", content={"name": self.name})


async def run(cfg: dict[str, Any]) -> int:
    events = Events()
    answers = Answers()
    kinds = {op.partition(":")[0] for op in cfg["ops"]}
    callbacks: dict[str, Any] = {}
    if "call_sampled" in kinds:
        callbacks["sampling_callback"] = answers.sample
    if "call_elicited" in kinds:
        callbacks["elicitation_callback"] = answers.elicit

    async def on_message(msg: Any) -> None:
        if isinstance(msg, Exception):
            print(f"client.py: transport exception: {msg!r}", file=sys.stderr)
            return
        meta = getattr(getattr(msg, "params", None), "meta", None) or {}
        via = "listen" if SUBSCRIPTION_ID_META_KEY in meta else "legacy"
        if isinstance(msg, types.ResourceUpdatedNotification):
            events.add("updated", str(msg.params.uri), via)
        elif isinstance(msg, types.ResourceListChangedNotification):
            events.add("list_changed", None, via)

    async with AsyncExitStack() as stack:
        if cfg["stdio"] is not None:
            server: Any = StdioServerParameters(command=cfg["stdio"][0], args=cfg["stdio"][1:])
        else:
            http = create_mcp_http_client(headers=cfg["headers"] or None)
            await stack.enter_async_context(http)
            server = streamable_http_client(cfg["url"], http_client=http)
        # The SDK's default cache is what a host gets when it passes no `cache`.
        cache: dict[str, Any] = {"cache": None} if cfg["client_cache"] == "off" else {}
        try:
            client = await stack.enter_async_context(
                Client(
                    server,
                    mode=cfg["mode"],
                    message_handler=on_message,
                    read_timeout_seconds=cfg["timeout"],
                    **cache,
                    **callbacks,
                )
            )
        except BaseException as e:  # noqa: BLE001 - report the real cause of a failed connect
            print(f"client.py: connect failed: {e!r}", file=sys.stderr)
            traceback.print_exc(file=sys.stderr)
            return 1

        tg = await stack.enter_async_context(anyio.create_task_group())
        # Cancel the drain tasks before the task group's exit waits on them (stack is LIFO).
        stack.callback(tg.cancel_scope.cancel)

        for index, op in enumerate(cfg["ops"]):
            name, _, arg = op.partition(":")
            events.op = index
            try:
                await do_op(name, arg, client, events, answers, stack, tg, cfg)
            except MCPError as e:
                out({"op": name, **({"uri": arg} if name in ("read", "subscribe", "unsubscribe") else {}),
                     "error": err_obj(e)})
    return 0


async def drain(sub: Any, uris: list[str]) -> None:
    try:
        async for _ in sub:  # events are recorded via message_handler; keep the backlog empty
            pass
        print(f"client.py: listen {uris} ended (closed by the server, or this client is exiting)", file=sys.stderr)
    except Exception as e:  # noqa: BLE001
        print(f"client.py: listen {uris} lost: {e!r}", file=sys.stderr)


async def do_op(name: str, arg: str, client: Client, events: Events, answers: Answers, stack: AsyncExitStack,
                tg: Any, cfg: dict[str, Any]) -> None:
    if name == "list_all":
        uris: list[str] = []
        pages = 0
        cursor: str | None = None
        ttls: list[int] = []
        scopes: list[str] = []
        while True:
            page = await client.list_resources(cursor=cursor)
            pages += 1
            uris.extend(str(r.uri) for r in page.resources)
            ttl, scope = wire_cache(page)
            if ttl is not None:
                ttls.append(ttl)
            if scope is not None:
                scopes.append(scope)
            cursor = page.next_cursor
            if not cursor:
                break
            if pages > 1000:
                raise RuntimeError("more than 1000 pages: cursor loop?")
        out({"op": "list_all", "uris": uris, "pages": pages, "ttlMs": min(ttls) if ttls else None,
             "cacheScope": ("private" if "private" in scopes else "public") if scopes else None})
    elif name == "templates_all":
        tpls: list[str] = []
        pages = 0
        cursor = None
        while True:
            page = await client.list_resource_templates(cursor=cursor)
            pages += 1
            tpls.extend(t.uri_template for t in page.resource_templates)
            cursor = page.next_cursor
            if not cursor or pages > 1000:
                break
        out({"op": "templates_all", "uriTemplates": tpls, "pages": pages})
    elif name == "read":
        res = await client.read_resource(arg)
        contents = []
        for c in res.contents:
            d: dict[str, Any] = {"uri": str(c.uri), "mimeType": c.mime_type}
            if isinstance(c, types.TextResourceContents):
                d["text"] = c.text
            else:
                d["blob"] = c.blob
            contents.append(d)
        ttl, scope = wire_cache(res)
        out({"op": "read", "uri": arg, "contents": contents, "ttlMs": ttl, "cacheScope": scope})
    elif name == "list_cursor":
        page = await client.list_resources(cursor=arg)
        out({"op": "list_cursor", "page": dump(page)})
    elif name == "subscribe":
        await client.subscribe_resource(arg)
        out({"op": "subscribe", "uri": arg, "ok": True})
    elif name == "unsubscribe":
        await client.unsubscribe_resource(arg)
        out({"op": "unsubscribe", "uri": arg, "ok": True})
    elif name == "listen":
        uris = [u for u in arg.split(",") if u]
        sub = await stack.enter_async_context(
            client.listen(resource_subscriptions=uris, resources_list_changed=True)
        )
        tg.start_soon(drain, sub, uris)
        out({"op": "listen", "uris": uris, "honored": dump(sub.honored)})
    elif name == "wait_updated":
        uri, _, t = arg.rpartition(":")
        via = await events.take("updated", uri, float(t))
        out({"op": "wait_updated", "uri": uri, "received": via is not None, "via": via})
    elif name == "wait_list_changed":
        via = await events.take("list_changed", None, float(arg))
        out({"op": "wait_list_changed", "received": via is not None, "via": via})
    elif name == "call":
        tool, _, js = arg.partition(":")
        args = json.loads(js) if js else {}
        res = await client.call_tool(tool, args)
        out({"op": "call", "tool": tool, "result": dump(res)})
    elif name == "call_progress":
        tool, _, js = arg.partition(":")
        args = json.loads(js) if js else {}
        told = False

        async def progressed(progress: float, total: float | None, message: str | None) -> None:
            nonlocal told
            if not told:
                told = True
                out({"op": "progress", "progress": progress})

        res = await client.call_tool(tool, args, progress_callback=progressed)
        out({"op": "call_progress", "tool": tool, "result": dump(res)})
    elif name in ("call_sampled", "call_elicited"):
        answer, _, rest = arg.partition(":")
        tool, _, js = rest.partition(":")
        args = json.loads(js) if js else {}
        answers.asked = 0
        if name == "call_sampled":
            answers.reply = answer
        else:
            answers.name = answer
        try:
            res = await client.call_tool(tool, args)
        finally:
            answers.reply = answers.name = None
        counted = "sampled" if name == "call_sampled" else "elicited"
        out({"op": name, "tool": tool, counted: answers.asked, "result": dump(res)})
    elif name == "updates":
        count, _, t = arg.partition(":")
        await events.until_heard(int(count), float(t))
        out({"op": "updates", "heard": events.heard})
    elif name == "ready":
        out({"op": "ready"})
    elif name == "sleep_until_stdin":
        line = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        out({"op": "sleep_until_stdin", "eof": line == ""})
    elif name == "info":
        si = client.server_info
        out({"op": "info", "protocolVersion": client.protocol_version,
             "serverInfo": dump(si) if si is not None else None,
             "capabilities": dump(client.server_capabilities)})
    elif name == "discover":
        # session.discover() returns the adopted (synthesized) result under --mode 2026-07-28 without any
        # wire traffic; send_discover always asks the server and returns its raw result.
        raw = await client.session.send_discover(arg or "2026-07-28")
        out({"op": "discover", "result": raw})
    else:  # parse_args rejects unknown ops
        raise AssertionError(name)


def main() -> None:
    cfg = parse_args(sys.argv[1:])
    export_traces_if_asked()
    try:
        code = anyio.run(run, cfg)
    except Exception as e:  # noqa: BLE001 - a broken connection: say why, exit 1
        print(f"client.py: connection failed: {e!r}", file=sys.stderr)
        traceback.print_exc(file=sys.stderr)
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
