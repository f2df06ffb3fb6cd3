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
from silica.security.tokens import SHORT, choose_token
from silica.security.urls import mask_urls, secret_spans

TOKEN_VAR = "SILICA_SERVE_TOKEN"
REDIS_VAR = "SILICA_SERVE_REDIS"


def serve(
    *,
    host: str | None = None,
    port: int | None = None,
    token_file: Annotated[str | None, Parameter(allow_leading_hyphen=True)] = None,
    token: str | None = None,
    no_token: Annotated[bool, Parameter(name="--no-token", negative="")] = False,
    redis: str | None = None,
    no_worker: Annotated[bool, Parameter(name="--no-worker", negative="")] = False,
    open: Annotated[bool, Parameter(name="--open", negative="")] = False,  # noqa: A002
    allow_shell: AllowShell = False,
):
    """Serve the agent over HTTP, Socket.IO and SSE, with a web page at /.

    Every request needs a token: a fresh random one each start unless you give one, shown in
    the link printed at start (open it: the page keeps the token in a cookie).

    Sessions, images, tools and config are the CLI's own: silica chat --resume ID goes on
    with a session started here, and the page lists sessions started by silica chat.

    Parameters
    ----------
    host
        The address to listen on (default: [serve] host, 127.0.0.1).
    port
        The port (default: [serve] port, 8700; 0 takes a free one).
    token_file
        Read the token from the first line of this file ("-": from stdin, or asked for at a
        terminal). Default: $SILICA_SERVE_TOKEN, else a random token per start.
    token
        The token itself. Every local user can read a command line: prefer --token-file or
        $SILICA_SERVE_TOKEN.
    no_token
        Serve on a loopback address without a token: every local user can then run your
        tools through it.
    redis
        A redis:// URL: share events with other silica serve processes (default:
        $SILICA_SERVE_REDIS, else [serve] redis). Put a password in the variable or the
        config, not on the command line.
    no_worker
        Run no turns here: queue each in Redis for silica worker processes, and stream
        their events (needs --redis).
    open
        Open the page in a browser once listening.
    """
    from silica.config import load_settings
    from silica.extras import require
    from silica.images.store import check_image_store
    from silica.serve.options import (
        ExposedWithoutToken,
        ServeOptions,
        check_exposure,
        is_loopback,
    )

    require("serve")
    settings = load_settings()
    check_image_store(settings)  # an object store that cannot be used is said before serving
    choice = choose_token(token_file=token_file, given=token, no_token=no_token,
                          variable=TOKEN_VAR)
    token = choice.token
    host = host or settings.serve.host
    port = settings.serve.port if port is None else port
    if not 0 <= port <= 65535:
        fail(f"--port must be 0-65535, not {port}", 2)
    try:
        check_exposure(is_loopback(host), token)
    except ExposedWithoutToken:
        fail(f"--host {host} is reachable from other machines, and anyone who reaches silica "
             "serve can run your tools: leave out --no-token (a random token is made), give "
             f"one with --token-file or ${TOKEN_VAR}, or serve on 127.0.0.1", 2)
    for warning in choice.warnings:
        warn(warning)
    redis = _redis(redis)
    _log_to_stderr()
    from silica.agent.sessions import open_sessions

    open_sessions()  # an unusable sessions database: one line, before the daemon starts
    options = ServeOptions.make(settings, cwd=Path.cwd(), token=token, host=host,
                                allow_shell=allow_shell, redis=redis, no_worker=no_worker)
    if no_worker and not options.redis:
        fail("--no-worker queues turns in Redis for silica worker processes: give --redis "
             f"URL (or ${REDIS_VAR}, or [serve] redis in config.toml), or leave out "
             "--no-worker to run turns in this daemon", 2)
    if options.redis:
        require("redis")
    if token and len(token) < SHORT:
        warn(f"the token is short; anyone who guesses it can run your tools (use {SHORT} or "
             "more random characters)")
    _serve(options, host, port, open)


def _redis(redis: str | None) -> str | None:
    """The Redis URL of ``--redis`` or ``$SILICA_SERVE_REDIS`` (``None``: the config's)."""
    if redis is not None and secret_spans(redis):
        # masked in /proc/<pid>/cmdline already (silica.security.process.harden_process)
        warn("--redis holds a password, which every user of this machine can read on a "
             f"command line (ps, /proc) until silica starts; set ${REDIS_VAR} or [serve] "
             "redis in config.toml instead")
    redis = redis or os.environ.get(REDIS_VAR) or None
    if redis is not None and not re.match(r"^rediss?://", redis):
        fail(f"--redis must be a redis:// or rediss:// URL, not {mask_urls(redis)!r}", 2)
    return redis


def _serve(options, host: str, port: int, open_page: bool) -> None:
    from silica.plugins import get_plugin_manager
    from silica.serve.daemon import serve

    get_plugin_manager()  # plugins load now, before the daemon starts
    # uvicorn restores these after it stops and raises the signal again: the daemon has
    # stopped cleanly by then, so the process ends quietly (exit 0)
    signal.signal(signal.SIGTERM, _stopped)
    signal.signal(signal.SIGINT, _stopped)

    def started(url: str) -> None:
        sys.stdout.write(f"silica serve: {url}\n")
        sys.stdout.flush()
        if open_page:
            threading.Timer(0.5, _open, (url,)).start()

    serve(options, host=host, port=port, on_start=started)


def _stopped(signum, frame) -> None:
    """After the daemon stopped: nothing left to do."""


def _open(url: str) -> None:
    import webbrowser

    try:
        webbrowser.open(url)
    except Exception as exc:  # no browser here: the printed address still works
        warn(f"could not open a browser ({exc}); open {url} yourself")


def _log_to_stderr(name: str = "silica serve") -> None:
    handler = logging.StreamHandler(sys.stderr)  # log lines may quote a client's input
    handler.setFormatter(SafeLogFormatter(f"{name}: %(levelname)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)
