"""An MCP server (stdio) that first floods its stderr, then serves or dies.

    python noisy_server.py MEGABYTES serve    # write that much stderr, then serve `echo`
    python noisy_server.py MEGABYTES die      # write that much stderr, then exit 1

The flood is lines of ``x`` written 1 MiB at a time (fast); its last line is always
``noisy server: last words`` so a test can see that the end of stderr was kept.
"""

from __future__ import annotations

import os
import sys

LINE = b"x" * 1023 + b"\n"
MIB = LINE * 1024


def flood(megabytes: int) -> None:
    for _ in range(megabytes):
        view = memoryview(MIB)
        while view:  # a pipe may take less than asked
            view = view[os.write(2, view):]
    os.write(2, b"noisy server: last words\n")


if __name__ == "__main__":
    flood(int(sys.argv[1]))
    if sys.argv[2] == "die":
        sys.exit(1)
    from mcp.server.mcpserver import MCPServer  # only a server that lives needs the SDK

    server = MCPServer("noisy")

    @server.tool()
    def echo(text: str) -> str:
        """Say the text back."""
        return f"echo: {text}"

    server.run()
