"""Talking to one MCP server: list its tools, call one, turn the answer into silica blocks.

Every operation connects, does its one request and disconnects (a stdio server is started
for it and stopped after), all within ``timeout`` seconds. A server that cannot be started
or reached, that stops, that answers garbage or not at all raises ``McpServerError`` whose
message says what happened (with the end of the server's stderr, when it wrote any).

A stdio server's stderr goes to a pipe drained as it arrives; only its last ``STDERR_KEEP``
bytes are kept (in memory, never on disk), however much the server writes.

What a call's result becomes is ``silica.mcp.content``'s business.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Awaitable, Callable
from typing import IO, Any, TypeVar

from silica.blocks import ToolResult
from silica.config import McpServerSettings
from silica.errors import SilicaError
from silica.mcp.content import result_of

T = TypeVar("T")

_STDERR_TAIL = 600  # characters of stderr quoted in a message
STDERR_KEEP = 64 * 1024  # bytes of a server's stderr kept while it runs
_STDERR_READ = 64 * 1024
_STDERR_DRAIN = 1.0  # seconds to wait for the last of stderr once the server is stopped


class McpServerError(SilicaError):
    """An MCP server could not be used for one operation; the message says why."""


async def list_tools(name: str, server: McpServerSettings, timeout: float) -> list[Any]:
    """The server's tools (``mcp_types.Tool``: name, description, input_schema), every page."""

    async def pages(client) -> list[Any]:
        tools, cursor = [], None
        for _ in range(100):  # a server whose cursor never ends must not hang discovery
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    return await _with_server(name, server, timeout, pages, "listing its tools")


async def call_tool(name: str, server: McpServerSettings, tool: str, arguments: dict,
                    timeout: float) -> ToolResult:
    """Call ``tool`` on the server; its answer as a ``ToolResult`` (``isError`` kept)."""

    async def call(client):
        return await client.call_tool(tool, arguments)

    result = await _with_server(name, server, timeout, call, f"the call of {tool!r}")
    return await result_of(name, result)


# -- connecting -------------------------------------------------------------------------


async def _with_server(name: str, server: McpServerSettings, timeout: float,
                       operation: Callable[[Any], Awaitable[T]], what: str) -> T:
    from mcp import Client  # the SDK is imported only when a server is used

    noise: list[str] = []  # lines the server printed to stdout that are not MCP

    async def on_message(message) -> None:
        if isinstance(message, Exception) and len(noise) < 3:
            noise.append(_unparsed(message))

    started = done = False
    answer: Any = None
    tail: StderrTail | None = None
    try:
        tail = StderrTail() if server.command else None
        async with asyncio.timeout(timeout):
            async with Client(_transport(server, tail.writer if tail else None),
                              message_handler=on_message, cache=None) as client:
                started = True
                answer, done = await operation(client), True
    except Exception as exc:
        if not done:  # once the answer is in, a failure while disconnecting is no matter
            said = await asyncio.to_thread(tail.text, _STDERR_DRAIN) if tail else ""
            raise McpServerError(_explain(exc, name, server, timeout, what, started,
                                          _tail(said), noise)) from None
    finally:
        if tail is not None:
            tail.close()
    return answer


class StderrTail:
    """A pipe to give a server as its stderr, drained by a thread that keeps only the last
    ``keep`` bytes: memory stays bounded whatever the server writes, and it never blocks on
    a full pipe."""

    def __init__(self, keep: int = STDERR_KEEP) -> None:
        read_fd, write_fd = os.pipe()  # neither end is inherited but by the server's stderr
        self.writer: IO[str] = os.fdopen(write_fd, "w", encoding="utf-8", errors="replace")
        self._keep = keep
        self._kept = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, args=(read_fd,), daemon=True,
                                        name="mcp-stderr")
        self._thread.start()

    def _drain(self, fd: int) -> None:
        try:
            while chunk := os.read(fd, _STDERR_READ):
                with self._lock:
                    self._kept += chunk
                    if len(self._kept) > 2 * self._keep:  # trim now and then, not per chunk
                        del self._kept[:-self._keep]
        except OSError:
            pass
        finally:
            os.close(fd)

    def close(self) -> None:
        """Close silica's end of the pipe: the drain ends once the server's end is closed."""
        with contextlib.suppress(OSError):
            self.writer.close()

    def text(self, wait: float = 0.0) -> str:
        """The last bytes written so far as text; first closes silica's end and waits up to
        ``wait`` seconds for the server's last words (a server that left a child holding the
        pipe is not waited for longer)."""
        self.close()
        self._thread.join(wait)
        with self._lock:
            return bytes(self._kept[-self._keep:]).decode("utf-8", "replace")


def _transport(server: McpServerSettings, stderr: IO[str] | None):
    if server.url:
        from mcp.client.streamable_http import streamable_http_client

        return streamable_http_client(server.url)
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=server.command or "", args=server.args,
                                   env=server.env or None)
    return stdio_client(params, errlog=stderr) if stderr else stdio_client(params)


def _explain(exc: Exception, name: str, server: McpServerSettings, timeout: float, what: str,
             started: bool, stderr: str, noise: list[str]) -> str:
    """One message for the model and the person: what failed, and what the server said."""
    from mcp.shared.exceptions import MCPError
    from pydantic import ValidationError

    leaf = _leaf(exc)
    where = f"MCP server {name!r}"
    if isinstance(leaf, TimeoutError):  # before OSError, of which it is a kind
        step = what if started else "starting up"
        message = f"the {where} did not answer within {timeout:g} s ({step})"
    elif isinstance(leaf, FileNotFoundError) and server.command:
        message = (f"cannot start the {where}: no command {server.command!r} "
                   "(is it installed and on PATH?)")
    elif isinstance(leaf, OSError) and server.command and not started:
        message = f"cannot start the {where}: {leaf.strerror or leaf}"
    elif isinstance(leaf, MCPError) and "closed" in str(leaf).lower():
        message = (f"the {where} stopped during {what}" if started else
                   f"the {where} stopped before it was ready")
    elif isinstance(leaf, MCPError):
        message = f"the {where} refused {what}: {leaf}"
    elif isinstance(leaf, ValidationError):
        message = f"the {where} sent an answer that is not valid MCP during {what}"
    elif server.url and not started:
        message = f"cannot reach the {where} at {server.url}: {type(leaf).__name__}: {leaf}"
    else:
        message = f"the {where} failed during {what}: {type(leaf).__name__}: {leaf}"
    if noise:
        message += f"; it printed text that is not MCP on stdout: {noise[0]!r}"
    if stderr:
        message += f"; its stderr ends:\n{stderr}"
    return message


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside the SDK's task groups' exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = next((e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)),
                   exc.exceptions[0])
    return exc


def _unparsed(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        with contextlib.suppress(Exception):
            given = errors()[0].get("input")
            if isinstance(given, str):
                return given[:120]
    return str(exc)[:120]


def _tail(text: str) -> str:
    """The end of a server's stderr for a message: blank lines dropped, the last
    ``_STDERR_TAIL`` characters."""
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    tail = "\n".join(lines)
    return tail if len(tail) <= _STDERR_TAIL else "..." + tail[-_STDERR_TAIL:]
