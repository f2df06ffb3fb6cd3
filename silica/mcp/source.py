"""MCP servers as a tool source: each server's tools as built-in tools, named ``<server>__<tool>``.

    for tool in mcp_tools(settings):    # lists every enabled server in settings.mcp.servers
        register(tool)

A tool is offered under ``tool_name(server, tool)`` with origin ``mcp:<server>`` and the
server's description and input schema; calling it goes through the server's one live
connection (``silica.mcp.connections``), started if needed. A server that cannot be listed
gives one row, ``<server>__*``, with the reason (``BuiltinTool.error``), and the other
servers' tools are listed as usual.

Every list fetched live is kept on disk, under ``$SILICA_HOME/cache/mcp/``, one file per
server keyed by a hash of its name, settings and the folder it starts in. Inside
``cached_listing()`` (what ``silica tools list`` uses without ``--refresh``), a server with
such a file is not started: its tools come from the file with origin ``mcp:<server>
(cached)``. Everywhere else (the agent, ``mcp serve``, ``tools run``, a library ``Toolbox``)
the list is the live connection's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from silica.blocks import ToolResult
from silica.config import McpServerSettings, Settings
from silica.fsutil import write_atomic
from silica.mcp.apps import tool_ui
from silica.mcp.client import McpServerError
from silica.mcp.connections import config_key, connections
from silica.paths import cache_dir, silica_home
from silica.security.sandbox import SandboxPolicy
from silica.security.server_start import server_start
from silica.tools.builtin import BuiltinTool, ToolContext

_CACHED_LISTING: ContextVar[bool] = ContextVar("silica_mcp_cached_listing", default=False)
_CACHE_VERSION = 1


@contextlib.contextmanager
def cached_listing() -> Iterator[None]:
    """Within: discovery is only to show the tools, and may take a server's last list from
    the disk cache instead of starting it (calls still use the live connection)."""
    token = _CACHED_LISTING.set(True)
    try:
        yield
    finally:
        _CACHED_LISTING.reset(token)


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
    """The tools of every enabled server, servers listed in parallel (blocks until done)."""
    servers = settings.mcp.enabled()
    if not servers:
        return []
    timeout, asking = settings.mcp.timeout, settings.mcp.elicitation_timeout
    cached: dict[str, list[dict]] = {}
    if _CACHED_LISTING.get():
        cached = {n: t for n, s in servers.items() if (t := _load(n, s)) is not None}
    manager = connections()
    manager.save = _save
    manager.sandbox = SandboxPolicy.from_settings(settings, silica_home())
    live = {n: s for n, s in servers.items() if n not in cached}
    listings = dict(zip(live, manager.list_all_blocking(live, timeout), strict=True)) \
        if live else {}
    tools: list[BuiltinTool] = []
    for name, server in servers.items():
        if name in cached:
            rows = [SimpleNamespace(**row) for row in cached[name]]
            tools.extend(_tool(name, server, t, timeout, " (cached)", asking) for t in rows)
            continue
        listing = listings[name]
        if isinstance(listing, McpServerError):
            tools.append(_unavailable(name, str(listing)))
            continue
        found, note = listing
        tools.extend(_tool(name, server, t, timeout, "", asking) for t in found)
        if note:
            tools.append(_unavailable(name, note))
    return tools


def _tool(server_name: str, server: McpServerSettings, tool: Any, timeout: float,
          cached: str = "", elicit_timeout: float = 300.0) -> BuiltinTool:
    remote = tool.name

    async def run(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return await connections().call_tool(server_name, server, remote, arguments, timeout,
                                             elicit=context.elicit,
                                             elicit_timeout=elicit_timeout)

    description = tool.description or tool.title or \
        f"The tool {remote!r} of the MCP server {server_name!r}."
    ui = tool_ui(tool)
    return BuiltinTool(tool_name(server_name, remote), description, dict(tool.input_schema),
                       run, origin=f"mcp:{server_name}{cached}", visibility=ui.visibility,
                       app_uri=ui.resource_uri)


def _unavailable(server_name: str, reason: str) -> BuiltinTool:
    async def run(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult.error(reason)

    return BuiltinTool(tool_name(server_name, "") + "*", f"the tools of MCP server {server_name!r}",
                       {"type": "object"}, run, origin=f"mcp:{server_name}", error=reason)


# -- the disk cache of lists ------------------------------------------------------------


def _cache_file(name: str, server: McpServerSettings) -> Path:
    """One file per server and folder it starts in: a list made in a trusted project is
    not shown for the same server kept out of an untrusted one."""
    where = ""
    if server.command:
        with contextlib.suppress(OSError):
            where = str(server_start(name, server.command, server.cwd).cwd)
    key = config_key(name, server.model_copy(update={"cwd": where or server.cwd}))
    return cache_dir() / "mcp" / f"{key}.json"


def _load(name: str, server: McpServerSettings) -> list[dict] | None:
    """The server's last list from disk, or ``None`` (none, or unreadable: list it live)."""
    try:
        data = json.loads(_cache_file(name, server).read_text(encoding="utf-8"))
        if data.get("version") != _CACHE_VERSION or data.get("server") != name:
            return None
        return [{"name": str(t["name"]), "title": t.get("title"),
                 "description": t.get("description"), "input_schema": dict(t["input_schema"]),
                 "meta": t.get("meta") if isinstance(t.get("meta"), dict) else None}
                for t in data["tools"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None


def _ui_meta(tool: Any) -> dict | None:
    """The part of a tool's ``_meta`` silica keeps in the cache: its ``ui``."""
    meta = getattr(tool, "meta", None)
    if not isinstance(meta, dict) or "ui" not in meta and "ui/resourceUri" not in meta:
        return None
    return {k: meta[k] for k in ("ui", "ui/resourceUri") if k in meta}


def _save(name: str, server: McpServerSettings, tools: list[Any]) -> None:
    """Keep a live list on disk (written whole, then renamed: a reader never sees half)."""
    rows = [{"name": t.name, "title": t.title, "description": t.description,
             "input_schema": t.input_schema, "meta": _ui_meta(t)} for t in tools]
    path = _cache_file(name, server)
    try:
        data = json.dumps({"version": _CACHE_VERSION, "server": name, "tools": rows})
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data, prefix=".mcp-")
    except (OSError, TypeError, ValueError, RecursionError):  # then there is no cache
        pass
