#!/usr/bin/env python3
"""A 2025 host (PyPI `mcp` 2.3.0, `mcp.Client`) that answers sampling, for tests/cluster/answers.rs.

Usage: answering_client.py --url URL [--header 'K: V']... TAG...

It opens one 2025-era session (the initialize handshake), declaring sampling, and for each TAG
calls the tool `fx__sample {"tag": TAG}`: the upstream asks the host for a message during the
call and the host answers "answered by python: <prompt>". Behind a round-robin load balancer
the answer, a new POST, lands on another replica than the call. One JSON line per call:
  {"tag":TAG,"result":{raw CallToolResult}} | {"tag":TAG,"error":{code,message}}
"""

from __future__ import annotations

import json
import sys
import warnings

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

warnings.simplefilter("ignore")


def out(obj):
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


async def on_sampling(context, params):
    prompt = " ".join(getattr(message.content, "text", "") for message in params.messages)
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=f"answered by python: {prompt}"),
        model="test-model",
        stop_reason="endTurn",
    )


async def main(argv):
    url, headers, tags = None, {}, []
    i = 0
    while i < len(argv):
        if argv[i] == "--url":
            url, i = argv[i + 1], i + 2
        elif argv[i] == "--header":
            k, _, v = argv[i + 1].partition(":")
            headers[k.strip()] = v.strip()
            i += 2
        else:
            tags.append(argv[i])
            i += 1
    transport = streamable_http_client(url, http_client=create_mcp_http_client(headers=headers or None))
    async with Client(transport, mode="legacy", cache=None, sampling_callback=on_sampling) as client:
        for tag in tags:
            try:
                result = await client.call_tool("fx__sample", {"tag": tag})
                out({"tag": tag, "result": result.model_dump(by_alias=True, mode="json", exclude_none=True)})
            except MCPError as e:
                out({"tag": tag, "error": {"code": e.code, "message": e.message}})


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:])
