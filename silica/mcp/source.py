"""MCP servers as a tool source: each server's tools as built-in tools, named ``<server>__<tool>``.

    for tool in mcp_tools(settings):    # lists every server in settings.mcp.servers, at once
        register(tool)

A tool is offered under ``tool_name(server, tool)`` with origin ``mcp:<server>`` and the
server's description and input schema; calling it connects to the server again and calls
the tool there. A server that cannot be listed gives one row, ``<server>__*``, with the
reason (``BuiltinTool.error``), and the other servers' tools are listed as usual.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import re
from typing import Any

from silica.blocks import ToolResult
from silica.config import McpServerSettings, Settings
from silica.mcp.client import McpServerError, call_tool, list_tools
from silica.tools.builtin import BuiltinTool, ToolContext

_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_NAME = 64


def tool_name(server: str, tool: str) -> str:
    """``<server>__<tool>`` with every character outside ``[a-zA-Z0-9_-]`` made ``_``; a
    name longer than 64 characters keeps its first 55 and ends ``_`` plus 8 hex digits of
    the sha256 of the unsanitised name, so long names stay distinct."""
    full = f"{server}__{tool}"
    name = _UNSAFE.sub("_", full)
    if len(name) > _MAX_NAME:
        name = f"{name[:_MAX_NAME - 9]}_{hashlib.sha256(full.encode()).hexdigest()[:8]}"
    return name


def mcp_tools(settings: Settings) -> list[BuiltinTool]:
    """The tools of every configured server, servers listed in parallel (blocks until done)."""
    servers = settings.mcp.servers
    if not servers:
        return []
    timeout = settings.mcp.timeout
    listings = _run(_list_all(servers, timeout))
    tools: list[BuiltinTool] = []
    for (name, server), listing in zip(servers.items(), listings, strict=True):
        if isinstance(listing, McpServerError):
            tools.append(_unavailable(name, str(listing)))
        else:
            tools.extend(_tool(name, server, t, timeout) for t in listing)
    return tools


async def _list_all(servers: dict[str, McpServerSettings],
                    timeout: float) -> list[list[Any] | McpServerError]:
    async def one(name: str, server: McpServerSettings) -> list[Any] | McpServerError:
        try:
            return await list_tools(name, server, timeout)
        except McpServerError as exc:
            return exc

    return await asyncio.gather(*(one(n, s) for n, s in servers.items()))


def _run(coro):
    """Run ``coro`` to the end from synchronous code, inside a running event loop or not."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a loop of its own, in a thread
        return pool.submit(asyncio.run, coro).result()


def _tool(server_name: str, server: McpServerSettings, tool: Any, timeout: float) -> BuiltinTool:
    remote = tool.name

    async def run(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        try:
            return await call_tool(server_name, server, remote, arguments, timeout)
        except McpServerError as exc:
            return ToolResult.error(str(exc))

    description = tool.description or tool.title or \
        f"The tool {remote!r} of the MCP server {server_name!r}."
    return BuiltinTool(tool_name(server_name, remote), description, dict(tool.input_schema),
                       run, origin=f"mcp:{server_name}")


def _unavailable(server_name: str, reason: str) -> BuiltinTool:
    async def run(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult.error(reason)

    return BuiltinTool(tool_name(server_name, "") + "*", f"the tools of MCP server {server_name!r}",
                       {"type": "object"}, run, origin=f"mcp:{server_name}", error=reason)
