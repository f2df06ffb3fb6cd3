"""``silica mcp ...``: serve the user's tools to any MCP host; log in to remote servers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from typing import Annotated

from cyclopts import App, Parameter

from silica.cli.output import SafeLogFormatter, fail

app = App(name="mcp", help="Serve your tools to MCP hosts; log in to remote MCP servers.")


TOKEN_VAR = "SILICA_MCP_TOKEN"


@app.command
def serve(*, http: bool = False, host: str = "127.0.0.1", port: int = 8765,
          token_file: Annotated[str | None, Parameter(allow_leading_hyphen=True)] = None,
          no_token: Annotated[bool, Parameter(name="--no-token", negative="")] = False,
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
    token_file
        With --http: hosts must send "Authorization: Bearer TOKEN" with the token on the
        first line of this file ("-": from stdin, or asked for at a terminal). Default:
        $SILICA_MCP_TOKEN, else a random token per start, printed on stderr.
    no_token
        With --http: no token; every user of this machine can then run your tools.
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
    if http and not 0 <= port <= 65535:
        fail(f"--port must be 0-65535, not {port}", 2)
    token = _token(token_file, no_token) if http else None
    box = toolbox()
    serve_shell(box, shell)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a person stops a server
        asyncio.run(serve_http(box, host, port, token) if http else serve_stdio(box))


def _token(token_file: str | None, no_token: bool) -> str | None:
    """The bearer token ``--http`` needs (``None``: ``--no-token``); a new one is shown once
    on stderr, with how to give it to a host."""
    from silica.cli.output import err, say, warn
    from silica.security.tokens import choose_token

    choice = choose_token(token_file=token_file, given=None, no_token=no_token,
                          variable=TOKEN_VAR)
    for warning in choice.warnings:
        warn(warning)
    if choice.made:
        token = choice.token
        say(f"silica mcp serve: hosts must send the header \"Authorization: Bearer {token}\" "
            "(in the host's settings for this server, e.g. \"headers\": {\"Authorization\": "
            f"\"Bearer {token}\"}}). This token is new each start: for a fixed one, use "
            f"--token-file PATH or ${TOKEN_VAR}.", console=err)
    return choice.token


def _remote(name: str):
    """The HTTP server ``name`` from config.toml, or the error that says what to do."""
    from silica.cli.tools import user_settings

    servers = user_settings().mcp.servers
    server = servers.get(name)
    if server is None:
        known = ", ".join(sorted(servers)) or "none"
        fail(f"no MCP server named {name!r} in config.toml (servers: {known})", 2)
    if not server.url:
        fail(f"the MCP server {name!r} runs as a command, and logs in to nothing; login is "
             "for servers reached by url", 2)
    return server


@app.command
def login(name: str, *, no_browser: Annotated[bool, Parameter(negative="")] = False,
          timeout: float = 300.0):
    """Log in to the remote MCP server NAME with OAuth: approve in a browser, and silica
    keeps the tokens (file mode 0600 under the silica home), refreshing them as they expire.

    Parameters
    ----------
    name
        The server's name under [mcp.servers] in config.toml.
    no_browser
        Print the URL to open instead of opening a browser (also the default when there is
        no display); silica waits for the browser's redirect back to 127.0.0.1.
    timeout
        Seconds to wait for the approval.
    """
    from silica.cli.output import err, say
    from silica.mcp import oauth
    from silica.mcp.client import McpServerError

    server = _remote(name)
    if not timeout > 0:
        fail("--timeout must be more than 0", 2)
    show = lambda text: say(text, console=err)  # noqa: E731

    async def run() -> bool:
        settings = server.oauth
        if settings is not None and settings.approve == "direct":
            return await oauth.login(name, server, oauth.Direct(name), timeout)
        browser = not no_browser and not oauth.headless()
        async with oauth.Loopback(name, browser, show, timeout) as approval:
            return await oauth.login(name, server, approval, timeout)

    try:
        done = asyncio.run(run())
    except McpServerError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail(f"login to {name!r} interrupted; no token was saved", 130)
    if not done:
        say(f"the MCP server {name!r} did not ask for a login; nothing to save", console=err)
        return
    say(f"logged in to the MCP server {name!r}")


@app.command
def logout(name: str):
    """Forget the login to the remote MCP server NAME (its tokens are deleted).

    Parameters
    ----------
    name
        The server's name under [mcp.servers] in config.toml.
    """
    from silica.cli.output import say
    from silica.mcp import oauth

    server = _remote(name)
    if oauth.logout(name, server):
        say(f"logged out of the MCP server {name!r}: its tokens are deleted")
    else:
        say(f"not logged in to the MCP server {name!r}: nothing to delete")
