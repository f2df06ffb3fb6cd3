"""Logging to the clients of ``silica mcp serve``: ``logging/setLevel`` and the log records
a request makes.

The level is kept per connection (``logging/setLevel``, 2025-11-25) or taken from a
request's ``_meta`` log level (2026-07-28, where the method is gone). silica's own log
records (logger ``silica``) made while a request is handled go to that request's client as
``notifications/message`` when at or above its level, before the request's response.
``log_level()`` tells code running inside a request (a built-in tool) which level its
client wants.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
from typing import Any, cast

import mcp.types as types
from mcp.server.connection import Connection
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp_types import LOG_LEVEL_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

LEVELS: tuple[types.LoggingLevel, ...] = (
    "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
LOG_FLUSH = 5.0  # seconds a response waits for its log messages to be sent


def install(server: Server[Any]) -> None:
    """Serve ``logging/setLevel`` on ``server`` and send its clients their log records."""
    # Registered this way, not as Server(on_set_logging_level=...), which warns that
    # 2026-07-28 dropped the method: silica serves both revisions.
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)
    server.middleware.append(_log_scope)
    logger = logging.getLogger("silica")
    if not any(isinstance(h, ClientLogHandler) for h in logger.handlers):
        logger.addHandler(ClientLogHandler())


async def set_level(ctx: ServerRequestContext,
                    params: types.SetLevelRequestParams) -> types.EmptyResult:
    connection(ctx).state["silica.log_level"] = params.level
    return types.EmptyResult()


def connection(ctx: ServerRequestContext) -> Connection:
    # The SDK builds a ServerSession per request around the connection, which it keeps
    # private; the connection's ``state`` is its documented per-connection scratch space.
    return cast(Connection, ctx.session._connection)  # noqa: SLF001


_request: contextvars.ContextVar[ServerRequestContext | None] = contextvars.ContextVar(
    "silica_mcp_request", default=None)
# the log messages a request has queued for its client, sent before its response
_pending: contextvars.ContextVar[list[asyncio.Task] | None] = contextvars.ContextVar(
    "silica_mcp_pending_logs", default=None)


async def _log_scope(ctx: ServerRequestContext, call_next: CallNext) -> Any:
    """Middleware: while a request is handled, log records know whose they are; its log
    messages go out before its response (on 2026-07-28 they ride the response's stream)."""
    pending: list[asyncio.Task] = []
    token, queued = _request.set(ctx), _pending.set(pending)
    try:
        return await call_next(ctx)
    finally:
        _request.reset(token)
        _pending.reset(queued)
        if pending:
            await asyncio.wait(pending, timeout=LOG_FLUSH)


def log_level(ctx: ServerRequestContext | None = None) -> types.LoggingLevel | None:
    """The lowest level the client of ``ctx`` (by default, of the request being handled)
    wants log messages at, or ``None`` for none: its ``logging/setLevel`` on handshake-era
    connections, the request's ``_meta`` log level on 2026-07-28 ones."""
    ctx = ctx or _request.get()
    if ctx is None:
        return None
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        level = (ctx.meta or {}).get(LOG_LEVEL_META_KEY)
        return cast(types.LoggingLevel, level) if level in LEVELS else None
    return cast("types.LoggingLevel | None", connection(ctx).state.get("silica.log_level"))


def mcp_level(levelno: int) -> types.LoggingLevel:
    if levelno >= logging.CRITICAL:
        return "critical"
    if levelno >= logging.ERROR:
        return "error"
    if levelno >= logging.WARNING:
        return "warning"
    return "info" if levelno >= logging.INFO else "debug"


class ClientLogHandler(logging.Handler):
    """Sends a ``silica`` log record made while a request is handled to that request's
    client, when at or above the level it asked for."""

    _busy = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        ctx = _request.get()
        wanted = log_level(ctx)
        if ctx is None or wanted is None or getattr(self._busy, "on", False):
            return
        level = mcp_level(record.levelno)
        if LEVELS.index(level) < LEVELS.index(wanted):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a record from a worker thread: no session to send it on
            return
        self._busy.on = True
        try:
            related = ctx.request_id if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS else None
            task = loop.create_task(_send_log(ctx, level, record.getMessage(), record.name,
                                              related))
            pending = _pending.get()
            if pending is not None:
                pending.append(task)
        finally:
            self._busy.on = False


async def _send_log(ctx: ServerRequestContext, level: types.LoggingLevel, text: str,
                    logger: str, related: types.RequestId | None) -> None:
    with contextlib.suppress(Exception):  # the client is gone: its log lines with it
        await ctx.session.send_log_message(level, text, logger, related_request_id=related)
