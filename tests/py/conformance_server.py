#!/usr/bin/env python3
"""The server the official conformance suite (`@modelcontextprotocol/conformance`, pinned in
.ci/install-peers.sh) expects for its tools, prompts and completion scenarios, built on PyPI `mcp`
2.3.0 (`MCPServer`) from each scenario's written "Server Implementation Requirements" (shown by the
suite's own scenario descriptions). The suite's reference "everything server" is an example in the
suite's repository, not published to any registry; this one is the Python SDK's implementation of
the same written requirements, so the proxy is measured against a real SDK, not a fixture of its own.

    conformance_server.py --http PORT     # streamable HTTP on 127.0.0.1:PORT/mcp (0 = a free port)
    conformance_server.py --stdio         # stdio instead
        [--extra-tool NAME]...            # more tools, beyond the suite's (each returns its name)
        [--tagged-logging]                # one more tool, `log_tagged(tag)`: a debug, an info and a
                                          # warning message, each naming the tag, then the result

Readiness: once the socket listens, ONE line `LISTENING http://127.0.0.1:<port>/mcp` goes to
stdout. Logs go to stderr. Serves the 2025 era (initialize) and 2026-07-28 (server/discover).

Tools: test_simple_text, test_image_content, test_audio_content, test_embedded_resource,
test_multiple_content_types, test_tool_with_logging, test_error_handling, test_tool_with_progress,
test_sampling, test_elicitation, test_elicitation_sep1034_defaults, test_elicitation_sep1330_enums,
json_schema_2020_12_tool. Prompts: test_simple_prompt, test_prompt_with_arguments,
test_prompt_with_embedded_resource, test_prompt_with_image. Completion for prompt arguments.
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts.base import UserMessage

# A 1x1 red PNG and a tiny silent WAV (44-byte header + 2 samples).
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV = "UklGRigAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQQAAAAAAAAA"

parser = argparse.ArgumentParser()
transport = parser.add_mutually_exclusive_group(required=True)
transport.add_argument("--http", type=int, metavar="PORT")
transport.add_argument("--stdio", action="store_true", help="serve on stdin/stdout instead")
parser.add_argument(
    "--extra-tool", action="append", default=[], metavar="NAME", help="one more tool NAME (returns its name)"
)
parser.add_argument("--tagged-logging", action="store_true", help="one more tool, log_tagged (see above)")
ARGS = parser.parse_args()

mcp = MCPServer("conformance-python", version="1.0.0", log_level="WARNING")


async def set_logging_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
    """`logging/setLevel` (MCPServer has none of its own): accepted; every message is sent."""
    return types.EmptyResult()


mcp._lowlevel_server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_logging_level)  # pyright: ignore[reportPrivateUsage]


def text(value: str) -> types.TextContent:
    return types.TextContent(type="text", text=value)


def image() -> types.ImageContent:
    return types.ImageContent(type="image", data=PNG, mime_type="image/png")


def embedded(uri: str, mime_type: str, body: str) -> types.EmbeddedResource:
    resource = types.TextResourceContents(uri=uri, mime_type=mime_type, text=body)
    return types.EmbeddedResource(type="resource", resource=resource)


@mcp.tool(description="Returns a simple text response", structured_output=False)
def test_simple_text() -> list[types.ContentBlock]:
    return [text("This is a simple text response for testing.")]


@mcp.tool(description="Returns an image (a 1x1 red PNG)", structured_output=False)
def test_image_content() -> list[types.ContentBlock]:
    return [image()]


@mcp.tool(description="Returns audio (a tiny WAV)", structured_output=False)
def test_audio_content() -> list[types.ContentBlock]:
    return [types.AudioContent(type="audio", data=WAV, mime_type="audio/wav")]


@mcp.tool(description="Returns an embedded resource", structured_output=False)
def test_embedded_resource() -> list[types.ContentBlock]:
    return [embedded("test://embedded-resource", "text/plain", "This is an embedded resource content.")]


@mcp.tool(description="Returns text, an image and an embedded resource", structured_output=False)
def test_multiple_content_types() -> list[types.ContentBlock]:
    body = json.dumps({"test": "data", "value": 123})
    return [text("Multiple content types test:"), image(), embedded("test://mixed-content-resource", "application/json", body)]


@mcp.tool(description="Sends three info log messages while it runs", structured_output=False)
async def test_tool_with_logging(ctx: Context) -> list[types.ContentBlock]:
    await ctx.info("Tool execution started")
    await anyio.sleep(0.05)
    await ctx.info("Tool processing data")
    await anyio.sleep(0.05)
    await ctx.info("Tool execution completed")
    return [text("Tool with logging executed successfully")]


@mcp.tool(description="Always fails (isError)", structured_output=False)
def test_error_handling() -> list[types.ContentBlock]:
    raise ToolError("This tool intentionally returns an error for testing")


@mcp.tool(description="Reports progress 0, 50, 100 of 100", structured_output=False)
async def test_tool_with_progress(ctx: Context) -> list[types.ContentBlock]:
    for step in (0, 50, 100):
        await ctx.report_progress(step, 100)
        if step < 100:
            await anyio.sleep(0.05)
    return [text("Tool with progress executed successfully")]


@mcp.tool(description="Asks the client's LLM (sampling/createMessage)", structured_output=False)
async def test_sampling(prompt: str, ctx: Context) -> list[types.ContentBlock]:
    message = types.SamplingMessage(role="user", content=text(prompt))
    result = await ctx.session.create_message([message], max_tokens=100, related_request_id=ctx.request_id)
    content = result.content
    answer = content.text if isinstance(content, types.TextContent) else str(content)
    return [text(f"LLM response: {answer}")]


async def elicit(ctx: Context, message: str, schema: dict[str, Any]) -> types.ElicitResult:
    return await ctx.session.elicit(message, schema, related_request_id=ctx.request_id)


@mcp.tool(description="Asks the user (elicitation/create)", structured_output=False)
async def test_elicitation(message: str, ctx: Context) -> list[types.ContentBlock]:
    properties = {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"},
    }
    schema = {"type": "object", "properties": properties, "required": ["username", "email"]}
    result = await elicit(ctx, message, schema)
    return [text(f"User response: action={result.action}, content={json.dumps(result.content)}")]


@mcp.tool(description="Elicitation with defaults of every primitive type (SEP-1034)", structured_output=False)
async def test_elicitation_sep1034_defaults(ctx: Context) -> list[types.ContentBlock]:
    properties = {
        "name": {"type": "string", "default": "John Doe"},
        "age": {"type": "integer", "default": 30},
        "score": {"type": "number", "default": 95.5},
        "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
        "verified": {"type": "boolean", "default": True},
    }
    result = await elicit(ctx, "Please review your information", {"type": "object", "properties": properties})
    return [text(f"Elicitation completed: action={result.action}, content={json.dumps(result.content)}")]


@mcp.tool(description="Elicitation with the five enum forms (SEP-1330)", structured_output=False)
async def test_elicitation_sep1330_enums(ctx: Context) -> list[types.ContentBlock]:
    options = ["option1", "option2", "option3"]
    titled = [{"const": f"value{i}", "title": t} for i, t in enumerate(["First Option", "Second Option", "Third Option"], 1)]
    choices = [{"const": f"value{i}", "title": t} for i, t in enumerate(["First Choice", "Second Choice", "Third Choice"], 1)]
    properties = {
        "untitledSingle": {"type": "string", "enum": options},
        "titledSingle": {"type": "string", "oneOf": titled},
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {"type": "array", "items": {"type": "string", "enum": options}},
        "titledMulti": {"type": "array", "items": {"anyOf": choices}},
    }
    result = await elicit(ctx, "Please choose", {"type": "object", "properties": properties})
    return [text(f"Elicitation completed: action={result.action}, content={json.dumps(result.content)}")]


@mcp.tool(name="json_schema_2020_12_tool", description="Tool with JSON Schema 2020-12 features", structured_output=False)
def json_schema_tool(name: str = "", address: dict[str, Any] | None = None) -> list[types.ContentBlock]:
    return [text(json.dumps({"name": name, "address": address}))]


# The SEP-1613 scenario checks that the listed inputSchema keeps `$schema`, `$defs` and
# `additionalProperties`: publish exactly the schema it describes.
mcp._tool_manager._tools["json_schema_2020_12_tool"].parameters = {  # pyright: ignore[reportPrivateUsage]
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}


for extra in ARGS.extra_tool:
    # Beyond the suite: names a proxy must not offer un-prefixed (`docs__search`, `proxy_…`).
    mcp.add_tool(lambda name=extra: f"extra tool {name}", name=extra, description=f"Extra tool {extra}")


async def log_tagged(tag: str, ctx: Context) -> list[types.ContentBlock]:
    """Beyond the suite: whose call a log message belongs to, for the proxy's relay tests."""
    await ctx.debug(f"{tag} debug")
    await anyio.sleep(0.01)
    await ctx.info(f"{tag} info")
    await anyio.sleep(0.01)
    await ctx.warning(f"{tag} warning")
    return [text(f"logged {tag}")]


if ARGS.tagged_logging:
    mcp.add_tool(log_tagged, description="Logs at debug, info and warning, each naming the tag", structured_output=False)


@mcp.prompt(description="A simple prompt without arguments")
def test_simple_prompt() -> list[UserMessage]:
    return [UserMessage("This is a simple prompt for testing.")]


@mcp.prompt(description="A prompt with two required arguments")
def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
    return [UserMessage(f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'")]


@mcp.prompt(description="A prompt that embeds a resource")
def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:  # noqa: N803 (the suite's name)
    resource = embedded(resourceUri, "text/plain", "Embedded resource content for testing.")
    return [UserMessage(resource), UserMessage("Please process the embedded resource above.")]


@mcp.prompt(description="A prompt with an image")
def test_prompt_with_image() -> list[UserMessage]:
    return [UserMessage(image()), UserMessage("Please analyze the image above.")]


@mcp.completion()
async def complete(ref: Any, argument: types.CompletionArgument, context: Any) -> types.Completion:
    words = ["paris", "park", "party", "test", "testing"]
    values = [w for w in words if w.startswith(argument.value)]
    return types.Completion(values=values, total=len(values), has_more=False)


async def serve_http(port: int) -> None:
    import uvicorn  # noqa: PLC0415

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    app = mcp.streamable_http_app(host="127.0.0.1")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    print(f"LISTENING http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    await server.serve(sockets=[sock])


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if ARGS.stdio:
        mcp.run("stdio")
    else:
        anyio.run(serve_http, ARGS.http)
