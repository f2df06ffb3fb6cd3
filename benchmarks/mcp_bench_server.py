"""A tiny MCP server (stdio, official SDK) for ``bench_mcp.py``.

    python benchmarks/mcp_bench_server.py

Tools:

- ``echo(text)``: ``"<text> pid=<server pid>"``; trivial, and the pid tells which server
  process answered (one live connection means one pid for every call).
- ``count()``: 1, 2, 3... a counter held in this process, so it only counts up while the
  same process serves every call.
"""

from __future__ import annotations

import itertools
import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("bench")
_counter = itertools.count(1)  # lives as long as the process: the state a session keeps


@server.tool()
def echo(text: str) -> str:
    """Say the text back, with the server's pid."""
    return f"{text} pid={os.getpid()}"


@server.tool()
def count() -> int:
    """The next number of a counter kept in the server process (1 on a fresh process)."""
    return next(_counter)


if __name__ == "__main__":
    server.run()
