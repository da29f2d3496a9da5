#!/usr/bin/env python3
"""Tools and prompts through an MCP server with PyPI `mcp` 2.3.0 (`mcp.Client`), for tests/tools.rs.

Usage: tools_client.py --url URL [--mode legacy|2026-07-28] [--header 'K: V']... OP...

OPs run in order on one connection; each prints one JSON line on stdout:
  tools_all                 {"op":"tools_all","names":[...],"pages":n,"tools":[raw]}   (follows nextCursor)
  prompts_all               {"op":"prompts_all","names":[...],"pages":n}
  call:NAME:JSONARGS        {"op":"call","name":NAME,"result":{raw CallToolResult}} | {"op":..,"error":{code,message}}
  call_progress:NAME:JSON   the same, asking for progress: {"op":..,"progress":[values seen by progress_callback],..}
  prompt:NAME:JSONARGS      {"op":"prompt","name":NAME,"result":{raw GetPromptResult}} | error
  complete:PROMPT:ARG:VALUE {"op":"complete","values":[...]} | error
  logs_reach:NAME           call NAME (logging three messages) until a call's three log messages
                            arrive (the host's GET stream is open), then {"op":..,"ready":true}
  call_logs:NAME:N:JSONARGS call NAME, then wait for N log messages (the proxy relays them on the
                            GET stream, which may be read after the result):
                            {"op":..,"logs":[data of each message since the last op],"result":{..}}
"""

from __future__ import annotations

import json
import sys
import warnings

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import PromptReference

warnings.simplefilter("ignore")


def out(obj):
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def dump(model):
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


async def all_pages(fetch, items):
    names, raw, pages, cursor = [], [], 0, None
    while True:
        page = await fetch(cursor=cursor)
        pages += 1
        for item in getattr(page, items):
            names.append(item.name)
            raw.append(dump(item))
        cursor = page.next_cursor
        if not cursor:
            return names, raw, pages


LOGS: list = []
LOGGED = anyio.Event()


async def on_log(params):
    global LOGGED
    LOGS.append(params.data)
    LOGGED.set()
    LOGGED = anyio.Event()


async def logs_after(count, seconds):
    """Wait until `count` log messages arrived (at most `seconds`); take them."""
    with anyio.move_on_after(seconds):
        while len(LOGS) < count:
            await LOGGED.wait()
    taken = LOGS[:]
    LOGS.clear()
    return taken


async def run_op(client, op):
    kind, _, rest = op.partition(":")
    try:
        if kind == "logs_reach":
            for _ in range(10):
                await client.call_tool(rest, {})
                if len(await logs_after(3, 2)) == 3:
                    return {"op": kind, "ready": True}
            return {"op": kind, "ready": False}
        if kind == "call_logs":
            name, count, args = rest.split(":", 2)
            result = await client.call_tool(name, json.loads(args or "{}"))
            return {"op": kind, "logs": await logs_after(int(count), 15), "result": dump(result)}
        if kind == "tools_all":
            names, raw, pages = await all_pages(client.list_tools, "tools")
            return {"op": kind, "names": names, "pages": pages, "tools": raw}
        if kind == "prompts_all":
            names, _, pages = await all_pages(client.list_prompts, "prompts")
            return {"op": kind, "names": names, "pages": pages}
        if kind == "call":
            name, _, args = rest.partition(":")
            result = await client.call_tool(name, json.loads(args or "{}"))
            return {"op": kind, "name": name, "result": dump(result)}
        if kind == "call_progress":
            name, _, args = rest.partition(":")
            seen = []

            async def on_progress(progress, total, message):
                seen.append(progress)

            result = await client.call_tool(name, json.loads(args or "{}"), progress_callback=on_progress)
            return {"op": kind, "name": name, "progress": seen, "result": dump(result)}
        if kind == "prompt":
            name, _, args = rest.partition(":")
            result = await client.get_prompt(name, json.loads(args or "{}"))
            return {"op": kind, "name": name, "result": dump(result)}
        if kind == "complete":
            name, argument, value = rest.split(":", 2)
            result = await client.complete(PromptReference(type="ref/prompt", name=name), {"name": argument, "value": value})
            return {"op": kind, "values": result.completion.values}
    except MCPError as e:
        return {"op": kind, "error": {"code": e.code, "message": e.message}}
    raise SystemExit(f"unknown op {op!r}")


async def main(argv):
    url, mode, headers, ops = None, "legacy", {}, []
    i = 0
    while i < len(argv):
        if argv[i] == "--url":
            url, i = argv[i + 1], i + 2
        elif argv[i] == "--mode":
            mode, i = argv[i + 1], i + 2
        elif argv[i] == "--header":
            k, _, v = argv[i + 1].partition(":")
            headers[k.strip()] = v.strip()
            i += 2
        else:
            ops.append(argv[i])
            i += 1
    transport = streamable_http_client(url, http_client=create_mcp_http_client(headers=headers or None))
    async with Client(transport, mode=mode, cache=None, logging_callback=on_log) as client:
        for op in ops:
            out(await run_op(client, op))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:])
