"""An MCP server (official SDK) that keeps state, for the tests of live connections.

    python state_server.py [--pidfile P] [--cancel-log P] [--tools N] [--http PORT]

``--pidfile`` appends the server's pid (one line per start); ``--cancel-log`` gets a line
``cancelled`` whenever a call of ``slow`` is cancelled; ``--tools N`` adds N tools
``t0..``; ``--http PORT`` serves streamable HTTP on 127.0.0.1:PORT (``/mcp``) instead of
stdio (``--sse PORT``: the older HTTP+SSE transport, at ``/sse``). Tools: ``count`` (1, 2,
3, ... per process), ``slow``, ``later`` (its text, after a pause), ``die``, ``where``
(the working directory), ``header`` (a request header, over HTTP), ``grow`` (adds a tool
and says so with a tools-list-changed event).
"""

from __future__ import annotations

import argparse
import os
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer

parser = argparse.ArgumentParser()
parser.add_argument("--pidfile")
parser.add_argument("--cancel-log")
parser.add_argument("--tools", type=int, default=0)
parser.add_argument("--http", type=int)
parser.add_argument("--sse", type=int)
options = parser.parse_args()

if options.pidfile:
    with open(options.pidfile, "a") as f:
        f.write(f"{os.getpid()}\n")

server = MCPServer("state")
counter = 0


@server.tool()
def count() -> str:
    """One more than last time."""
    global counter
    counter += 1
    return str(counter)


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep (cancellable), then answer."""
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        if options.cancel_log:
            with open(options.cancel_log, "a") as f:
                f.write("cancelled\n")
        raise
    return "awake"


@server.tool()
async def later(text: str, seconds: float) -> str:
    """Say ``text`` back after ``seconds``: calls made together are answered out of order."""
    await anyio.sleep(seconds)
    return text


@server.tool()
def die() -> str:
    """The server process dies in the middle of the call."""
    print("state server: dying on purpose", file=sys.stderr, flush=True)
    os._exit(5)


@server.tool()
def where() -> str:
    """The server's working directory."""
    return os.getcwd()


@server.tool()
def header(name: str, ctx: Context) -> str:
    """A header of the HTTP request that carried this call."""
    request = ctx.request_context.request
    return request.headers.get(name, "(none)") if request is not None else "(not http)"


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool ``grown`` and tell the client its tool list changed."""
    server.add_tool(lambda: "grown", name="grown", description="Added by grow.")
    await ctx.notify_tools_changed()
    return "grew"


for i in range(options.tools):
    server.add_tool(lambda: "ok", name=f"t{i}", description=f"tool {i}")

if __name__ == "__main__":
    if options.http:
        server.run("streamable-http", port=options.http)
    elif options.sse:
        server.run("sse", port=options.sse)
    else:
        server.run()
