"""``silica mcp ...``: serve the user's tools to any MCP host."""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Annotated

from cyclopts import App, Parameter

from silica.cli.output import SafeLogFormatter, fail
from silica.errors import SilicaError

app = App(name="mcp", help="Serve your tools to MCP hosts.")


@app.command
def serve(*, http: bool = False, host: str = "127.0.0.1", port: int = 8765,
          shell: Annotated[bool, Parameter(negative="")] = False):
    """Serve every runnable tool over MCP: on stdin/stdout, or over streamable HTTP.

    The tool list follows the tool folders: add, change or remove a tool file while serving
    and clients are told the list changed.

    Parameters
    ----------
    http
        Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio.
    host
        With --http: the address to listen on. Other than a loopback address, anyone who can
        reach it can run your tools.
    port
        With --http: the port (0 takes a free one; the address is printed on stderr).
    shell
        Offer the shell tool too. Hosts ask their user before each call, so every command
        runs, unless [shell] allow in config.toml is set: then only the commands it matches.
    """
    # The SDK is imported here, not at startup: `silica --version` stays light.
    from silica.cli.tools import toolbox
    from silica.mcp.server import serve_http, serve_shell, serve_stdio

    handler = logging.StreamHandler(sys.stderr)  # log lines quote tools' warnings: made safe
    handler.setFormatter(SafeLogFormatter("%(name)s: %(levelname)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    logging.getLogger("silica").setLevel(logging.INFO)
    box = toolbox()
    serve_shell(box, shell)
    try:
        asyncio.run(serve_http(box, host, port) if http else serve_stdio(box))
    except SilicaError as exc:
        fail(str(exc))
    except KeyboardInterrupt:  # Ctrl-C is how a person stops a server
        pass
