"""``silica serve``: the agent as a local daemon (HTTP, Socket.IO, SSE and a web page)."""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated

from cyclopts import Parameter

from silica.cli.agent import AllowShell
from silica.cli.output import SafeLogFormatter, fail, warn

TOKEN_VAR = "SILICA_SERVE_TOKEN"
_TOKEN = re.compile(r"^[\x21-\x7e]{1,512}$")  # sent in headers and a cookie: printable ASCII


def serve(
    *,
    host: str | None = None,
    port: int | None = None,
    token: str | None = None,
    redis: str | None = None,
    open: Annotated[bool, Parameter(name="--open", negative="")] = False,  # noqa: A002
    allow_shell: AllowShell = False,
):
    """Serve the agent over HTTP, Socket.IO and SSE, with a web page at /.

    Sessions, images, tools and config are the CLI's own: silica chat --resume ID goes on
    with a session started here, and the page lists sessions started by silica chat.

    Parameters
    ----------
    host
        The address to listen on (default: [serve] host, 127.0.0.1). Any other than a
        loopback address needs a token.
    port
        The port (default: [serve] port, 8700; 0 takes a free one).
    token
        The token every request needs (default: $SILICA_SERVE_TOKEN; none on 127.0.0.1).
    redis
        A redis:// URL: share events with other silica serve processes.
    open
        Open the page in a browser once listening.
    """
    from silica.config import load_settings
    from silica.errors import SilicaError
    from silica.serve.options import ServeOptions, is_loopback

    try:
        settings = load_settings()
    except SilicaError as exc:
        fail(str(exc))
    host = host or settings.serve.host
    port = settings.serve.port if port is None else port
    if not 0 <= port <= 65535:
        fail(f"--port must be 0-65535, not {port}", 2)
    token = token or os.environ.get(TOKEN_VAR) or None
    if token is not None and not _TOKEN.fullmatch(token):
        fail("the token must be 1-512 printable characters without spaces; make one with: "
             "python -c \"import secrets; print(secrets.token_urlsafe())\"", 2)
    if not is_loopback(host) and not token:
        fail(f"--host {host} is reachable from other machines, and anyone who reaches silica "
             f"serve can run your tools: give a token with --token or ${TOKEN_VAR} (make one "
             "with: python -c \"import secrets; print(secrets.token_urlsafe())\"), or serve "
             "on 127.0.0.1", 2)
    if redis is not None and not re.match(r"^rediss?://", redis):
        fail(f"--redis must be a redis:// or rediss:// URL, not {redis!r}", 2)
    _log_to_stderr()
    options = ServeOptions.make(settings, cwd=Path.cwd(), token=token, host=host,
                                allow_shell=allow_shell, redis=redis)
    if token and len(token) < 16:
        warn("the token is short; anyone who guesses it can run your tools (use 16 or more "
             "random characters)")
    _serve(options, host, port, open)


def _serve(options, host: str, port: int, open_page: bool) -> None:
    from silica.errors import SilicaError
    from silica.plugins import get_plugin_manager
    from silica.serve.daemon import serve

    get_plugin_manager()  # plugins load now: their signal handlers are set before ours
    # uvicorn restores these after it stops and raises the signal again: the daemon has
    # stopped cleanly by then, so the process ends quietly (exit 0)
    signal.signal(signal.SIGTERM, _stopped)
    signal.signal(signal.SIGINT, _stopped)

    def started(url: str) -> None:
        sys.stdout.write(f"silica serve: {url}\n")
        sys.stdout.flush()
        if open_page:
            threading.Timer(0.5, _open, (url,)).start()

    try:
        serve(options, host=host, port=port, on_start=started)
    except SilicaError as exc:
        fail(str(exc))


def _stopped(signum, frame) -> None:
    """After the daemon stopped: nothing left to do."""


def _open(url: str) -> None:
    import webbrowser

    try:
        webbrowser.open(url)
    except Exception as exc:  # no browser here: the printed address still works
        warn(f"could not open a browser ({exc}); open {url} yourself")


def _log_to_stderr() -> None:
    handler = logging.StreamHandler(sys.stderr)  # log lines may quote a client's input
    handler.setFormatter(SafeLogFormatter("silica serve: %(levelname)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)
