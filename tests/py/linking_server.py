#!/usr/bin/env python3
"""An MCP upstream whose tool answers with structuredContent that names its own resources, built on
PyPI `mcp` 2.3.0 (`MCPServer`, both eras), for tests/interop/ts_client.rs. Stdio only.

Resources: `py://doc/public/1`, `py://doc/public/2`, `py://doc/secret/1` (text/plain).
Tool `find_docs(include_secret: bool = False)` -> structured output (its outputSchema is derived
from the return type):
    {"matches": [{"uri": "py://doc/public/1", "title": "Public 1"}, ...],
     "best": "py://doc/public/1", "homepage": "https://example.com/docs",
     "summary": "py://doc/public/1 is the best match"}
with `py://doc/secret/1` appended to the matches when include_secret is true. The SDK also sends
the serialized JSON as a text block.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resources import TextResource
from pydantic import BaseModel

mcp = MCPServer("py-links", version="1.0.0", log_level="WARNING")

DOCS = {
    "py://doc/public/1": "Public 1",
    "py://doc/public/2": "Public 2",
    "py://doc/secret/1": "Secret 1",
}

for uri, title in DOCS.items():
    mcp.add_resource(TextResource(uri=uri, name=title, text=f"{title} text", mime_type="text/plain"))


class Match(BaseModel):
    uri: str
    title: str


class Found(BaseModel):
    matches: list[Match]
    best: str
    homepage: str
    summary: str


@mcp.tool()
def find_docs(include_secret: bool = False) -> Found:
    """Find documents; their resource URIs come back in structured output."""
    uris = ["py://doc/public/1", "py://doc/public/2"] + (["py://doc/secret/1"] if include_secret else [])
    return Found(
        matches=[Match(uri=uri, title=DOCS[uri]) for uri in uris],
        best="py://doc/public/1",
        homepage="https://example.com/docs",
        summary="py://doc/public/1 is the best match",
    )


if __name__ == "__main__":
    mcp.run("stdio")
