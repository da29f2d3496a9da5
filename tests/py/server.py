#!/usr/bin/env python3
"""A small dual-era MCP upstream for the proxy's tests, built on PyPI `mcp` 2.3.0 (`MCPServer`).

Serves the 2025 era (initialize + resources/subscribe) and 2026-07-28 (server/discover +
subscriptions/listen) on the same endpoint.

    server.py                 # stdio
    server.py --http PORT     # streamable HTTP on 127.0.0.1:PORT/mcp (PORT 0 = pick a free port)

HTTP readiness: once the socket listens, ONE line `LISTENING http://127.0.0.1:<port>/mcp` is printed
to stdout and flushed (the socket is bound and listening before the line is printed, so a connect
succeeds from then on). Nothing else is written to stdout in HTTP mode; logs go to stderr.

Resources:
  - static `py://note/1`, `py://note/2` (text/plain) and the template `py://note/{id}` (any id in
    1..=`--notes` N, default 2; other ids -> -32602 "not found");
  - text `note <id> v<version>`, version starting at 1;
  - every cacheable result carries ttlMs=60000, cacheScope=public (2026-07-28 clients only; legacy
    results carry neither, as the 2025 wire has no such fields).
With OTEL_EXPORTER_OTLP_ENDPOINT set, the SDK's own SERVER spans are exported there (tests/py/traces_export.py).

Tools:
  - `bump(id)`: version += 1, then `notifications/resources/updated {uri: py://note/<id>}` to legacy
    sessions that subscribed to that uri (resources/subscribe) and to every listen stream whose
    filter names it. Returns `{"id":…, "version":…}` as text.
  - `add_note(id)`: makes `py://note/<id>` a listed resource (if not yet) and sends
    `notifications/resources/list_changed` to every legacy session and to listen streams that set
    resourcesListChanged.
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
from mcp.server.caching import CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.server.mcpserver.resources import FunctionResource
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from traces_export import export_traces_if_asked

log = logging.getLogger("py-notes")

TTL_MS = 60_000

parser = argparse.ArgumentParser()
parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT/mcp")
parser.add_argument("--notes", type=int, default=2, help="how many notes exist at start (py://note/1..N)")
ARGS = parser.parse_args()

# Legacy (2025) subscriptions: uri -> sessions that called resources/subscribe.
legacy_subs: dict[str, list[Any]] = {}
# Every initialized legacy session (for list_changed fan-out).
legacy_sessions: list[Any] = []


def _remember(session: Any) -> None:
    if all(s is not session for s in legacy_sessions):
        legacy_sessions.append(session)


async def remember_legacy_sessions(ctx: ServerRequestContext[Any], call_next: Any) -> Any:
    """Middleware: note each legacy session once it is past `initialize` (modern requests are stateless)."""
    if ctx.method != "initialize" and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        _remember(ctx.session)
    return await call_next(ctx)


hint = CacheHint(ttl_ms=TTL_MS, scope="public")
mcp = MCPServer(
    "py-notes",
    version="1.0.0",
    log_level="WARNING",
    cache_hints={
        "resources/read": hint,
        "resources/list": hint,
        "resources/templates/list": hint,
    },
    middleware=[remember_legacy_sessions],
)
lowlevel = mcp._lowlevel_server  # pyright: ignore[reportPrivateUsage]

versions: dict[int, int] = {}


def uri_of(note_id: int) -> str:
    return f"py://note/{note_id}"


def text_of(note_id: int) -> str:
    return f"note {note_id} v{versions[note_id]}"


def add_static(note_id: int) -> None:
    versions.setdefault(note_id, 1)
    mcp.add_resource(
        FunctionResource.from_function(
            fn=lambda: text_of(note_id),
            uri=uri_of(note_id),
            name=f"note-{note_id}",
            description=f"Note {note_id}",
            mime_type="text/plain",
        )
    )


for i in range(1, ARGS.notes + 1):
    add_static(i)


@mcp.resource("py://note/{id}", name="note", description="A note by id", mime_type="text/plain")
def note(id: str) -> str:
    try:
        note_id = int(id)
    except ValueError:
        note_id = -1
    if note_id not in versions:
        # Unknown resource: the SDK's not-found error (-> -32602), never empty contents.
        raise ResourceNotFoundError(f"Unknown resource: py://note/{id}")
    return text_of(note_id)


async def _send_legacy(sessions: list[Any], what: str, send) -> None:
    dead = []
    for s in list(sessions):
        try:
            with anyio.fail_after(5):
                await send(s)
        except Exception as e:  # a gone session must not fail the tool call
            log.warning("legacy %s to a session failed: %r", what, e)
            dead.append(s)
    for s in dead:
        if s in sessions:
            sessions.remove(s)


async def on_subscribe(ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams) -> types.EmptyResult:
    subs = legacy_subs.setdefault(str(params.uri), [])
    if all(s is not ctx.session for s in subs):
        subs.append(ctx.session)
    _remember(ctx.session)
    return types.EmptyResult()


async def on_unsubscribe(ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams) -> types.EmptyResult:
    subs = legacy_subs.get(str(params.uri), [])
    legacy_subs[str(params.uri)] = [s for s in subs if s is not ctx.session]
    return types.EmptyResult()


lowlevel.add_request_handler("resources/subscribe", types.SubscribeRequestParams, on_subscribe)
lowlevel.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, on_unsubscribe)

# MCPServer builds the initialize result with default NotificationOptions (listChanged false);
# advertise resources.listChanged for legacy clients too (modern ones derive it from listen).
_orig_init_opts = lowlevel.create_initialization_options


def _init_opts(notification_options=None, *a, **k):
    return _orig_init_opts(notification_options or NotificationOptions(resources_changed=True), *a, **k)


lowlevel.create_initialization_options = _init_opts  # type: ignore[method-assign]


@mcp.tool()
async def bump(id: int, ctx: Context) -> str:
    """Increment a note's version and notify subscribers that py://note/<id> changed."""
    if id not in versions:
        raise ToolError(f"no note {id}")
    versions[id] += 1
    uri = uri_of(id)
    await ctx.notify_resource_updated(uri)  # 2026-07-28 listen streams
    await _send_legacy(legacy_subs.get(uri, []), "updated", lambda s: s.send_resource_updated(uri))
    return json.dumps({"id": id, "version": versions[id]})


@mcp.tool()
async def add_note(id: int, ctx: Context) -> str:
    """Make py://note/<id> a listed resource and send resources/list_changed."""
    if id not in versions:
        add_static(id)
    await ctx.notify_resources_changed()  # listen streams with resourcesListChanged
    await _send_legacy(legacy_sessions, "list_changed", lambda s: s.send_resource_list_changed())
    return json.dumps({"id": id, "version": versions[id]})


async def serve_http(port: int) -> None:
    import uvicorn  # noqa: PLC0415

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    real_port = sock.getsockname()[1]
    app = mcp.streamable_http_app(host="127.0.0.1")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    # The socket already listens: connections queue in the backlog until uvicorn accepts them.
    print(f"LISTENING http://127.0.0.1:{real_port}/mcp", flush=True)
    await server.serve(sockets=[sock])


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    export_traces_if_asked()
    if ARGS.http is not None:
        anyio.run(serve_http, ARGS.http)
    else:
        mcp.run("stdio")


if __name__ == "__main__":
    main()
