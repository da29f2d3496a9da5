#!/usr/bin/env python3
"""An MCP upstream that remembers one value per session, built on PyPI `mcp` 2.3.0 (`MCPServer`,
both eras, stdio), for tests/fast/upstream_sessions/. Over stdio a process is one session, so
its state is the process's:

    tool `remember(value)`   keeps `value` for this session; answers "kept <value>", after telling
                             this session `notifications/resources/updated` for `session://value`
                             when it subscribed to it (resources/subscribe or a listen stream)
    tool `recall()`          answers the value kept in this session ("nothing" before any)
    tool `pid()`             answers this process's id (one per upstream session)
    tool `level()`           the level this session's client set with `logging/setLevel` ("none" before)
    tool `declared()`        what the client (the proxy) declared of sampling and elicitation:
                             "sampling,elicitation", "sampling", "elicitation" or "none"
    tool `unlock()`          offers the tool `secret` in this session from now on, and says that
                             this session's tool list changed
    tool `secret()`          (once unlocked) answers "the secret of <pid>"
    tool `ask()`             logs "asking <pid>" (info) and elicits a `word` from the client:
                             answers "heard <word>", or "declined"
    resource `session://value`  the kept value, as text
"""

from __future__ import annotations

import logging
import os
import sys

from typing import Any

import mcp_types as types
from pydantic import BaseModel
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer

mcp = MCPServer("session-python", version="1.0.0", log_level="WARNING")
lowlevel = mcp._lowlevel_server  # pyright: ignore[reportPrivateUsage]
KEPT: dict[str, str] = {}
VALUE_URI = "session://value"
# The 2025 subscription of this process's one session: uri -> its session.
SUBSCRIBED: dict[str, Any] = {}


async def on_subscribe(ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams) -> types.EmptyResult:
    SUBSCRIBED[str(params.uri)] = ctx.session
    return types.EmptyResult()


async def on_unsubscribe(ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams) -> types.EmptyResult:
    SUBSCRIBED.pop(str(params.uri), None)
    return types.EmptyResult()


async def on_set_level(ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams) -> types.EmptyResult:
    KEPT["level"] = str(params.level)
    return types.EmptyResult()


lowlevel.add_request_handler("logging/setLevel", types.SetLevelRequestParams, on_set_level)
lowlevel.add_request_handler("resources/subscribe", types.SubscribeRequestParams, on_subscribe)
lowlevel.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, on_unsubscribe)


@mcp.tool(description="Keep a value for this session", structured_output=False)
async def remember(value: str, ctx: Context) -> str:
    KEPT["value"] = value
    await ctx.notify_resource_updated(VALUE_URI)  # 2026-07-28 listen streams
    if (session := SUBSCRIBED.get(VALUE_URI)) is not None:
        await session.send_resource_updated(VALUE_URI)
    return f"kept {value}"


@mcp.tool(description="The value kept in this session", structured_output=False)
def recall() -> str:
    return KEPT.get("value", "nothing")


@mcp.tool(description="The logging level this session's client set", structured_output=False)
def level() -> str:
    return KEPT.get("level", "none")


@mcp.tool(description="This server process's id", structured_output=False)
def pid() -> str:
    return str(os.getpid())


@mcp.tool(description="What the client declared of sampling and elicitation", structured_output=False)
def declared(ctx: Context) -> str:
    capabilities = ctx.session.client_capabilities
    kinds = [kind for kind in ("sampling", "elicitation") if getattr(capabilities, kind, None) is not None]
    return ",".join(kinds) or "none"


def secret() -> str:
    return f"the secret of {os.getpid()}"


@mcp.tool(description="Offer the tool `secret` in this session from now on", structured_output=False)
async def unlock(ctx: Context) -> str:
    if "secret" not in KEPT:
        mcp.add_tool(secret, name="secret", description="Offered once this session unlocked it", structured_output=False)
        KEPT["secret"] = "unlocked"
    if ctx.protocol_version == "2026-07-28":
        await ctx.notify_tools_changed()  # its listen streams
    else:
        await ctx.session.send_tool_list_changed()
    return "unlocked"


class Word(BaseModel):
    word: str


@mcp.tool(description="Log, then ask the client for a word", structured_output=False)
async def ask(ctx: Context) -> str:
    await ctx.info(f"asking {os.getpid()}")
    answer = await ctx.elicit("Say a word", schema=Word)
    return f"heard {answer.data.word}" if answer.action == "accept" else "declined"


@mcp.resource("session://value", mime_type="text/plain")
def value() -> str:
    return KEPT.get("value", "nothing")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    mcp.run("stdio")
