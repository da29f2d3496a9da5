#!/usr/bin/env python3
"""An MCP upstream that declares one kind of offering only, built on PyPI `mcp` 2.3.0 (the
low-level `Server`, both eras, stdio), for tests/interop/servers_people_run.rs.

    one_kind_server.py prompts    prompt `greet(name)` -> one user message "Hello, <name>!"
    one_kind_server.py resources  resources `one://note/1`, `one://note/2` (text/plain,
                                  "note 1", "note 2"); no templates

It declares only the handlers it registers, so a `prompts` server has no `resources` or `tools`
capability (and answers their lists -32601), and the other way round.
"""

from __future__ import annotations

import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

NOTES = {"one://note/1": "note 1", "one://note/2": "note 2"}


async def list_prompts(_ctx, _params) -> types.ListPromptsResult:
    argument = types.PromptArgument(name="name", description="Who to greet", required=True)
    return types.ListPromptsResult(prompts=[types.Prompt(name="greet", description="A greeting", arguments=[argument])])


async def get_prompt(_ctx, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    if params.name != "greet":
        raise ValueError(f"no prompt {params.name}")
    who = (params.arguments or {}).get("name", "world")
    text = types.TextContent(type="text", text=f"Hello, {who}!")
    return types.GetPromptResult(messages=[types.PromptMessage(role="user", content=text)])


async def list_resources(_ctx, _params) -> types.ListResourcesResult:
    found = [types.Resource(uri=uri, name=uri.rsplit("/", 1)[1], mime_type="text/plain") for uri in NOTES]
    return types.ListResourcesResult(resources=found)


async def read_resource(_ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    uri = str(params.uri)
    text = types.TextResourceContents(uri=uri, mime_type="text/plain", text=NOTES[uri])
    return types.ReadResourceResult(contents=[text])


def server(kind: str) -> Server:
    if kind == "prompts":
        return Server("one-kind-prompts", version="1.0.0", on_list_prompts=list_prompts, on_get_prompt=get_prompt)
    return Server(
        "one-kind-resources", version="1.0.0", on_list_resources=list_resources, on_read_resource=read_resource
    )


async def main(kind: str) -> None:
    served = server(kind)
    async with stdio_server() as (read, write):
        await served.run(read, write, served.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
