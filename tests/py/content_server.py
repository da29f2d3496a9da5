#!/usr/bin/env python3
"""An MCP upstream whose tools, prompt and completion put URIs in every slot a proxy must rewrite
or filter, built on PyPI `mcp` 2.3.0 (`MCPServer`, both eras), for tests/interop/content.rs.
Stdio only.

Resources: `py://doc/public/1`, `py://doc/public/2`, `py://doc/secret/1` (text/plain); the
resource template `py://doc/{kind}/{n}`. `py://doc/public/1` and the template list the icons
`py://doc/secret/list.png`, `py://icons/list.png` and `https://example.com/list.png`.
Tools:
- `find_docs(include_secret: bool = False)`: structured output (the SDK adds the JSON text mirror)
  `{"matches": [{"uri", "title"}…], "best": "py://doc/public/1", "homepage": "https://example.com/docs"}`,
  the secret appended to the matches when asked. Icons: `py://icons/find.png`,
  `https://example.com/find.png`, `py://doc/secret/icon.png`.
- `report(include_secret: bool = False)`: a hand-made result: structuredContent
  `{"docs": [uri…], "elsewhere": ["fx://fx/item/1", "fx://fx/hidden/1"], "home": "https://example.com/"}`,
  then text blocks: its exact JSON mirror, a differing JSON (`{"all": [uri…]}`) and prose
  (`"Found: uri, uri"`).
- `widgets()`: an image block with `_meta.ui.resourceUri` `ui://widget/secret`, an embedded
  `py://doc/public/1` with `_meta.ui.resourceUri` `ui://widget/open` (on the block and on its
  contents), and a resource link to `py://doc/public/2` with icons `py://icons/link.png` and
  `py://doc/secret/link.png`.
Prompt `open_doc(uri)`, icons `py://icons/prompt.png` and `py://doc/secret/prompt.png`.
Completion (any reference, any argument): `py://doc/public/1`, `py://doc/secret/1`,
`docs+py://doc/secret/2`, `fx://fx/item/1`, `https://example.com/x`, `plain`; `total` 6 and
`hasMore` false — unless the value typed so far is `more`: then `total` 40 and `hasMore` true.
"""

from __future__ import annotations

import json

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resources import TextResource
from mcp_types import (
    CallToolResult,
    Completion,
    EmbeddedResource,
    Icon,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from pydantic import BaseModel

mcp = MCPServer("py-content", version="1.0.0", log_level="WARNING")

DOCS = {
    "py://doc/public/1": "Public 1",
    "py://doc/public/2": "Public 2",
    "py://doc/secret/1": "Secret 1",
}
PUBLIC = ["py://doc/public/1", "py://doc/public/2"]
SECRET = "py://doc/secret/1"
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

LISTED_ICONS = [
    Icon(src="py://doc/secret/list.png"),
    Icon(src="py://icons/list.png"),
    Icon(src="https://example.com/list.png"),
]

for uri, title in DOCS.items():
    icons = LISTED_ICONS if uri == "py://doc/public/1" else None
    mcp.add_resource(TextResource(uri=uri, name=title, text=f"{title} text", mime_type="text/plain", icons=icons))


@mcp.resource("py://doc/{kind}/{n}", icons=LISTED_ICONS)
def doc(kind: str, n: str) -> str:
    return f"{kind} {n}"


class Match(BaseModel):
    uri: str
    title: str


class Found(BaseModel):
    matches: list[Match]
    best: str
    homepage: str


def uris(include_secret: bool) -> list[str]:
    return PUBLIC + ([SECRET] if include_secret else [])


@mcp.tool(icons=[Icon(src="py://icons/find.png"), Icon(src="https://example.com/find.png"), Icon(src="py://doc/secret/icon.png")])
def find_docs(include_secret: bool = False) -> Found:
    """Find documents; their resource URIs come back in structured output."""
    return Found(
        matches=[Match(uri=uri, title=DOCS[uri]) for uri in uris(include_secret)],
        best="py://doc/public/1",
        homepage="https://example.com/docs",
    )


@mcp.tool()
def report(include_secret: bool = False) -> CallToolResult:
    """Structured content beside a mirror, a differing JSON text and prose."""
    found = uris(include_secret)
    structured = {"docs": found, "elsewhere": ["fx://fx/item/1", "fx://fx/hidden/1"], "home": "https://example.com/"}
    texts = [json.dumps(structured), json.dumps({"all": found}), "Found: " + ", ".join(found)]
    return CallToolResult(content=[TextContent(text=t) for t in texts], structured_content=structured)


@mcp.tool()
def widgets() -> CallToolResult:
    """Content blocks carrying MCP Apps `_meta.ui.resourceUri` and icons."""
    image = ImageContent(data=PIXEL, mime_type="image/png", meta={"ui": {"resourceUri": "ui://widget/secret"}})
    contents = TextResourceContents(
        uri="py://doc/public/1", text="Public 1 text", meta={"ui": {"resourceUri": "ui://widget/open"}}
    )
    embedded = EmbeddedResource(resource=contents, meta={"ui": {"resourceUri": "ui://widget/open"}})
    icons = [Icon(src="py://icons/link.png"), Icon(src="py://doc/secret/link.png")]
    link = ResourceLink(name="Public 2", uri="py://doc/public/2", icons=icons)
    return CallToolResult(content=[image, embedded, link])


@mcp.prompt(icons=[Icon(src="py://icons/prompt.png"), Icon(src="py://doc/secret/prompt.png")])
def open_doc(uri: str) -> str:
    """Open a document."""
    return f"Open {uri}"


@mcp.completion()
async def complete(ref, argument, context):
    values = ["py://doc/public/1", SECRET, "docs+py://doc/secret/2", "fx://fx/item/1", "https://example.com/x", "plain"]
    if argument.value == "more":
        return Completion(values=values, total=40, has_more=True)
    return Completion(values=values, total=6, has_more=False)


if __name__ == "__main__":
    mcp.run("stdio")
