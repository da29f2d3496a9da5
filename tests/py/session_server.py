#!/usr/bin/env python3
"""An MCP upstream that remembers one value per session, built on PyPI `mcp` 2.3.0 (`MCPServer`,
both eras, stdio), for tests/fast/upstream_sessions.rs. Over stdio a process is one session, so
its state is the process's:

    tool `remember(value)`   keeps `value` for this session; answers "kept <value>"
    tool `recall()`          answers the value kept in this session ("nothing" before any)
    tool `pid()`             answers this process's id (one per upstream session)
    tool `declared()`        what the client (the proxy) declared of sampling and elicitation:
                             "sampling,elicitation", "sampling", "elicitation" or "none"
    resource `session://value`  the kept value, as text
"""

from __future__ import annotations

import logging
import os
import sys

from mcp.server.mcpserver import Context, MCPServer

mcp = MCPServer("session-python", version="1.0.0", log_level="WARNING")
KEPT: dict[str, str] = {}


@mcp.tool(description="Keep a value for this session", structured_output=False)
def remember(value: str) -> str:
    KEPT["value"] = value
    return f"kept {value}"


@mcp.tool(description="The value kept in this session", structured_output=False)
def recall() -> str:
    return KEPT.get("value", "nothing")


@mcp.tool(description="This server process's id", structured_output=False)
def pid() -> str:
    return str(os.getpid())


@mcp.tool(description="What the client declared of sampling and elicitation", structured_output=False)
def declared(ctx: Context) -> str:
    capabilities = ctx.session.client_capabilities
    kinds = [kind for kind in ("sampling", "elicitation") if getattr(capabilities, kind, None) is not None]
    return ",".join(kinds) or "none"


@mcp.resource("session://value", mime_type="text/plain")
def value() -> str:
    return KEPT.get("value", "nothing")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    mcp.run("stdio")
