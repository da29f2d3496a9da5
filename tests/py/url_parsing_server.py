#!/usr/bin/env python3
"""An MCP upstream that resolves resource URIs the way many servers do: with a URL parser
(`urllib.parse`), by host and path, so every spelling of an authority that parses to the same
host reads the same resource. Built on PyPI `mcp` 2.3.0 (`MCPServer`, both eras); stdio only.
For tests/interop/url_spellings.rs.

Resources: `web://public.corp/readme` and `web://secret.corp/key` (text/plain, text
`content of <host>/<path>`). A read of any `web:` URI whose parsed hostname, without a trailing
`.`, and path name one of them answers with it, whatever user info, port or case the URI has.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.server.mcpserver.resources import TextResource

PAGES = {("public.corp", "/readme"), ("secret.corp", "/key")}


class UrlParsingServer(MCPServer):
    async def read_resource(self, uri, context=None):
        parts = urlsplit(str(uri))
        host = (parts.hostname or "").rstrip(".")
        if parts.scheme != "web" or (host, parts.path) not in PAGES:
            raise ResourceNotFoundError(f"Unknown resource: {uri}")
        return [ReadResourceContents(content=f"content of {host}{parts.path}", mime_type="text/plain")]


mcp = UrlParsingServer("url-parsing", version="1.0.0", log_level="WARNING")
for host, path in sorted(PAGES):
    uri = f"web://{host}{path}"
    mcp.add_resource(TextResource(uri=uri, name=host, text=f"content of {host}{path}", mime_type="text/plain"))

if __name__ == "__main__":
    mcp.run("stdio")
