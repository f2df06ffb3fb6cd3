"""MCP Apps in the page: the app of a tool result, calls an app makes, and the sandbox page.

    apps = AppHost(options)
    await apps.app(sid, call_id)                    # {"server", "tool", "app", "input", ...}
    await apps.call(sid, call_id, name, arguments)  # the CallToolResult of the app's call
    apps.sandbox(request)                           # the sandbox proxy page, with its CSP

An app is the ``ui://`` resource a tool's ``_meta.ui.resourceUri`` names
(``silica.mcp.apps``), read over the server's live connection each time it is shown. The
page shows it in a frame of the sandbox page, served on the daemon's *other* loopback name
(a page on ``127.0.0.1`` gets its sandbox from ``localhost``, and the reverse): another
origin, to which the browser sends no token cookie (cookies are per host name, not per
port). The sandbox page answers without a token, holds nothing, and may be framed only by
a page on the other name (``frame-ancestors``); its Content-Security-Policy, which the app's
own frame inherits, is built from the app's ``_meta.ui.csp`` (``silica.serve.app_csp``).

An app may call the tools of its own server whose visibility includes ``"app"``; any other
tool (model-only, unknown, another server's) is refused with a 403 before anything is sent.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

from silica.agent.conversation import ToolResultBlock
from silica.agent.sessions import SessionError, load_session
from silica.blocks import ToolCall
from silica.serve.app_csp import app_csp
from silica.serve.errors import ApiError, no_session
from silica.serve.options import ServeOptions

SANDBOX_PAGE = Path(__file__).parent / "static" / "sandbox.html"
MAX_CSP_QUERY = 8 * 1024  # characters of the sandbox page's ?csp= (at most 4 x 32 origins)
_OTHER_NAME = {"127.0.0.1": "localhost", "::1": "localhost", "localhost": "127.0.0.1"}


def sandbox_origin(host_header: str, scheme: str = "http") -> str | None:
    """The origin of the sandbox for a page opened with ``Host: host_header``: the same
    port on the other loopback name; ``None`` when the page is not on a loopback name."""
    parts = urlsplit(f"//{host_header}")
    try:
        port = parts.port
    except ValueError:
        return None
    other = _OTHER_NAME.get((parts.hostname or "").lower())
    if other is None or port is None:
        return None
    return f"{scheme}://{other}:{port}"


def daemon_origins(host_header: str, scheme: str = "http") -> list[str]:
    """Every origin the daemon answers on at this port: what no app may be allowed."""
    parts = urlsplit(f"//{host_header}")
    try:
        port = parts.port
    except ValueError:
        return []
    names = ("127.0.0.1", "localhost", "[::1]")
    return [f"{s}://{n}:{port}" for n in names for s in (scheme, "ws" if scheme == "http"
                                                           else "wss")]


class AppHost:
    """The routes' work for MCP Apps (see the module docstring)."""

    def __init__(self, options: ServeOptions) -> None:
        self.options = options
        self.settings = options.settings
        self._page = SANDBOX_PAGE.read_bytes()

    async def app(self, sid: str, call_id: str) -> dict[str, Any]:
        """The app of a call's result: the server and tool, the checked resource, the
        call's input and result; ``ApiError`` 404 when the call or its app is not there."""
        call, result = await self._call_of(sid, call_id)
        server_name, server, tool = await self._tool_of(call.name)
        from silica.mcp.apps import MAX_APP_BYTES, app_resource, result_for_app, tool_ui
        from silica.mcp.client import AnswerTooLarge, McpServerError
        from silica.mcp.connections import connections

        uri = tool_ui(tool).resource_uri
        if not uri:
            raise ApiError(404, "no_app", f"the tool {call.name} has no MCP App")
        try:
            read = await connections().read_resource(server_name, server, uri,
                                                     self.settings.mcp.timeout)
        except AnswerTooLarge:
            raise ApiError(413, "app_too_large", f"{uri[:200]} is over {MAX_APP_BYTES:,} "
                           "bytes; silica shows the tool's text result instead") from None
        except McpServerError as exc:
            raise ApiError(502, "app_unreadable", str(exc)) from None
        resource = await asyncio.to_thread(app_resource, uri, read)
        return {"server": server_name, "call_id": call_id,
                "tool": _tool_json(tool), "app": resource.as_json(),
                "input": call.arguments,
                "result": None if result is None else result_for_app(result.content,
                                                                     result.is_error)}

    async def call(self, sid: str, call_id: str, name: Any, arguments: Any) -> dict[str, Any]:
        """A ``tools/call`` from the app of ``call_id``: on the same server, only a tool
        visible to apps; the server's ``CallToolResult`` as JSON."""
        if not isinstance(name, str) or not name:
            raise ApiError(400, "invalid_field", '"name" must be the name of a tool')
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise ApiError(400, "invalid_field", '"arguments" must be a JSON object')
        call, _ = await self._call_of(sid, call_id)
        server_name, server, _tool = await self._tool_of(call.name)
        from silica.mcp.apps import tool_ui
        from silica.mcp.client import McpServerError
        from silica.mcp.connections import connections

        tools, _note = await connections().list_tools(server_name, server,
                                                      self.settings.mcp.timeout)
        wanted = next((t for t in tools if t.name == name), None)
        if wanted is None:
            raise ApiError(403, "tool_not_for_app", f"the MCP server {server_name!r} has no "
                           f"tool {name[:100]!r}; an app may call only its own server's tools")
        if not tool_ui(wanted).for_app:
            raise ApiError(403, "tool_not_for_app", f"{name[:100]!r} is not visible to apps "
                           "(its visibility leaves \"app\" out): an app may not call it")
        try:
            result = await connections().call_for_app(server_name, server, name, arguments,
                                                      self.settings.mcp.timeout)
        except McpServerError as exc:
            raise ApiError(502, "tool_failed", str(exc)) from None
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)

    def sandbox(self, request: Request) -> Response:
        """The sandbox page for the page at ``?host=`` (the other loopback name, same port),
        with the CSP of ``?csp=`` (the app's declared domains, JSON)."""
        host = request.headers.get("host", "")
        page = request.query_params.get("host", "")
        scheme = request.url.scheme
        parsed = urlsplit(page)
        if (parsed.scheme != scheme or page != f"{scheme}://{parsed.netloc}"
                or sandbox_origin(parsed.netloc, scheme) != f"{scheme}://{host.lower()}"):
            raise ApiError(400, "invalid_sandbox", "the sandbox page is for a page on the "
                           "daemon's other loopback name (127.0.0.1 or localhost), same port, "
                           "given as ?host=")
        raw = request.query_params.get("csp", "")
        declared: dict[str, list[str]] = {}
        if raw:
            if len(raw) > MAX_CSP_QUERY:
                raise ApiError(400, "invalid_csp", f"?csp= is over {MAX_CSP_QUERY} characters")
            try:
                given = json.loads(raw)
            except ValueError:
                raise ApiError(400, "invalid_csp", "?csp= must be the app's _meta.ui.csp "
                               "as JSON") from None
            from silica.mcp.apps import csp_of

            declared = csp_of(given)
        refused = daemon_origins(host, scheme)
        policy = app_csp(declared, frame_ancestor=page, refused=refused)
        body = self._page.replace(b"__SILICA_APP__", json.dumps(
            {"host": page}).replace("<", "\\u003c").encode())
        return Response(body, media_type="text/html; charset=utf-8", headers={
            "Content-Security-Policy": policy, "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"})

    async def _call_of(self, sid: str, call_id: str) -> tuple[ToolCall, ToolResultBlock | None]:
        """The call ``call_id`` of the saved session and its result (``None``: not yet)."""
        try:
            conversation = await asyncio.to_thread(load_session, sid, self.options.home)
        except SessionError:
            raise no_session(sid) from None
        call: ToolCall | None = None
        result: ToolResultBlock | None = None
        for message in conversation.messages:
            for block in message.content:
                if isinstance(block, ToolCall) and block.id == call_id:
                    call = block
                elif isinstance(block, ToolResultBlock) and block.call_id == call_id:
                    result = block
        if call is None:
            raise ApiError(404, "no_call", f"session {sid} has no tool call "
                           f"{call_id[:100]!r}; its history lists the calls")
        return call, result

    async def _tool_of(self, name: str) -> tuple[str, Any, Any]:
        """The MCP server (name, settings) and listed tool behind silica's tool ``name``."""
        from silica.mcp.client import McpServerError
        from silica.mcp.connections import connections
        from silica.mcp.source import tool_name

        for server_name, server in self.settings.mcp.enabled().items():
            if not name.startswith(tool_name(server_name, "")):
                continue
            try:
                tools, _ = await connections().list_tools(server_name, server,
                                                          self.settings.mcp.timeout)
            except McpServerError as exc:
                raise ApiError(502, "app_unreadable", str(exc)) from None
            for tool in tools:
                if tool_name(server_name, tool.name) == name:
                    return server_name, server, tool
        raise ApiError(404, "no_app", f"the tool {name[:100]} is not a tool of an MCP server "
                       "silica is configured with, so it has no MCP App")


def _tool_json(tool: Any) -> dict[str, Any]:
    dump = getattr(tool, "model_dump", None)
    if callable(dump):
        return dump(by_alias=True, mode="json", exclude_none=True)
    return {"name": tool.name}
