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


async def run_op(client, op):
    kind, _, rest = op.partition(":")
    try:
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
    async with Client(transport, mode=mode, cache=None) as client:
        for op in ops:
            out(await run_op(client, op))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:])
