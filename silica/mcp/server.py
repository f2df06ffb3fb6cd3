"""silica as an MCP server: every runnable tool, served over stdio or streamable HTTP.

    asyncio.run(serve_stdio(Toolbox()))                     # what `silica mcp serve` does
    asyncio.run(serve_http(Toolbox(), "127.0.0.1", 8765))   # `silica mcp serve --http`

``tools/list`` gives each runnable tool whose spec is valid (tool files, packs and built-ins,
exactly what ``Toolbox.specs()`` gives a model), by name, its ``input_schema`` passed on
unchanged, with its title, annotations, icon and output schema (``silica.mcp.served``).
``tools/call`` runs ``Toolbox.acall``: text blocks become text content, image blocks (already
checked and fitted to the Toolbox's ``image_limits``) become image content, ``is_error``
becomes ``isError``, and a tool with an output schema adds ``structuredContent``. An
unknown tool or bad input is an error result. A built-in tool's ``context.elicit``, ``log``,
``sample`` and ``progress`` reach the client of its call (``silica.mcp.talkback``).

A call the client cancels (``notifications/cancelled``) is stopped with every process its
tool started, and is not answered. A call whose request carries a ``progressToken`` gets
``notifications/progress``: the tool's own ``progress: ...`` lines on stderr
(``progress_line``) as they come, or, while it prints none, the seconds it has been running,
every ``ELAPSED_EVERY`` seconds. Without a token nothing is sent.

A watcher stats the tool folders about once a second (names, sizes and mtimes of ``*.py``
files; nothing is read or run while nothing changes). When they change it discovers again
and, if the tool list changed, tells every client: ``notifications/tools/list_changed`` on
handshake-era connections, a ``subscriptions/listen`` event on 2026-era ones.

Nothing here writes to stdout: on stdio that is the protocol's. Logs go to stderr. A client
that goes away (closes stdin, or dies mid-call so that stdout breaks) ends ``serve_stdio``
normally; the calls it left running are stopped, their processes with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    ServerEvent,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPError as McpRefusal
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from silica import __version__
from silica.blocks import ToolResult
from silica.errors import SilicaError
from silica.mcp import serve_log
from silica.mcp.catalog import Catalog
from silica.mcp.served import served_result, served_tool
from silica.mcp.talkback import Rounds, TalkBack
from silica.mcp.transport import RETRY_MS, MemoryEventStore, SessionScope, call_stream
from silica.security.text import safe_text
from silica.security.tokens import bearer, token_matches
from silica.tools.discovery import tool_folders
from silica.tools.model import Tool
from silica.tools.toolbox import NOTHING, Toolbox

log = logging.getLogger("silica.mcp")

T = TypeVar("T")

POLL_INTERVAL = 1.0  # seconds between two looks at the tool folders
STOP_GRACE = 10.0  # seconds a cancelled call or discovery gets to stop its processes
ELAPSED_EVERY = 2.0  # seconds between two elapsed-time notifications while a tool is silent
PROGRESS_EVERY = 0.1  # a tool printing progress faster is sent on at this pace, latest first
MESSAGE_CAP = 200  # characters of a progress line's message passed on
# What a client that went away leaves behind on stdio: a broken stdout, closed streams.
_GONE = (BrokenPipeError, ConnectionResetError, anyio.BrokenResourceError,
         anyio.ClosedResourceError)

FolderState = tuple[tuple[str, tuple[tuple[str, int, int], ...] | None], ...]


def folder_state(folders: list[Path]) -> FolderState:
    """What the watcher compares: for each folder, its ``*.py`` files by name, size and mtime
    (``None`` for a folder that is missing or unreadable). Only ``stat`` calls."""
    state: list[tuple[str, tuple[tuple[str, int, int], ...] | None]] = []
    for folder in folders:
        try:
            with os.scandir(folder) as entries:
                files = []
                for entry in entries:
                    if not entry.name.endswith(".py"):
                        continue
                    with contextlib.suppress(OSError):  # removed while we looked
                        st = entry.stat()
                        files.append((entry.name, st.st_size, st.st_mtime_ns))
        except OSError:
            state.append((str(folder), None))
            continue
        state.append((str(folder), tuple(sorted(files))))
    return tuple(state)


_NUMBER = r"\d+(?:\.\d+)?"
_PROGRESS = re.compile(rf"\s*progress:\s*(?P<done>{_NUMBER})\s*"
                       rf"(?:(?P<percent>%)|/\s*(?P<total>{_NUMBER}))?"
                       r"(?:\s+(?P<message>.*))?", re.IGNORECASE)  # greedy: linear time


@dataclass(frozen=True)
class ProgressReport:
    """One ``notifications/progress``: ``progress`` and, when known, ``total`` and a
    ``message``."""

    progress: float
    total: float | None = None
    message: str | None = None


def progress_line(line: str) -> ProgressReport | None:
    """The progress a tool reports on one stderr line, or ``None`` if the line is not one.

    ``progress: 3/10`` is 3 of 10, ``progress: 42%`` is 42 of 100, ``progress: 7`` is 7 of an
    unknown total; any of them may be followed by a space and a message (made safe to show,
    cut to ``MESSAGE_CAP`` characters). ``progress:`` is matched in any case, at the start of
    the line (after blanks). A zero total is not a report.
    """
    found = _PROGRESS.fullmatch(line)
    if found is None:
        return None
    total = 100.0 if found["percent"] else float(found["total"]) if found["total"] else None
    if total == 0:
        return None
    message = safe_text((found["message"] or "").strip())[:MESSAGE_CAP] or None
    return ProgressReport(float(found["done"]), total, message)


class ProgressReporter:
    """Sends one call's progress through ``send(progress, total, message)``.

    Feed it the tool's stderr lines (``line``) and run ``run()`` beside the call, cancelling it
    when the call ends. Until the tool prints a progress line, ``run`` sends the seconds the
    call has been running every ``elapsed_every`` seconds (no total, ``"running for N s"``);
    from the first one on, only the tool's own reports, at most one per ``PROGRESS_EVERY``
    seconds (the latest wins), and only those above the previous one (MCP wants progress to
    increase). A failing ``send`` (the client went away) ends the reporting, not the call.
    """

    def __init__(self, send: Callable[[float, float | None, str | None], Awaitable[None]],
                 elapsed_every: float = ELAPSED_EVERY) -> None:
        self._send = send
        self._elapsed_every = elapsed_every
        self._latest: ProgressReport | None = None  # the tool's last report taken
        self._wake = asyncio.Event()

    def line(self, text: str) -> None:
        """One line of the tool's stderr (called by the runner as it arrives)."""
        report = progress_line(text)
        last = self._latest
        if report is None or (last is not None and report.progress <= last.progress):
            return
        self._latest = report
        self._wake.set()

    async def run(self) -> None:
        started = next_tick = time.monotonic()
        next_tick += self._elapsed_every
        try:
            while True:
                wait = None if self._latest is not None else max(0.0, next_tick - time.monotonic())
                try:
                    await asyncio.wait_for(self._wake.wait(), wait)
                except TimeoutError:  # still silent: say how long it has been running
                    elapsed = int(time.monotonic() - started)
                    await self._send(elapsed, None, f"running for {elapsed} s")
                    next_tick = time.monotonic() + self._elapsed_every
                    continue
                self._wake.clear()
                report = self._latest
                assert report is not None
                await self._send(report.progress, report.total, report.message)
                await asyncio.sleep(PROGRESS_EVERY)
        except Exception as exc:  # the client is gone or broken: the call goes on anyway
            log.debug("progress notifications stopped: %s", exc)


class ToolServer:
    """One low-level MCP ``Server`` over one ``Toolbox``, plus the folder watcher.

    ``server`` is the SDK's ``Server``; run it on a transport together with ``watch()``
    (``serve_stdio`` and ``serve_http`` do both).
    """

    def __init__(self, toolbox: Toolbox, poll_interval: float = POLL_INTERVAL) -> None:
        self.toolbox = toolbox
        self.poll_interval = poll_interval
        # Discovery is re-run by the watcher while requests come in; one at a time.
        self._discovery_lock = asyncio.Lock()
        self._events = InMemorySubscriptionBus()
        self._warnings: list[str] | None = None
        self._known: list[dict] | None = None  # the tools/list entries of the last discovery
        self._tools: dict[str, Tool] = {}  # what those entries were made of, by name
        self.talk = TalkBack()  # a built-in's questions, logs and progress go to its client
        self.talk.attach(toolbox)
        # resources, prompts, completion and logging, as plugins register them
        self.catalog = Catalog(toolbox.pm, toolbox.settings, self._events)
        self.server: Server[Any] = Server(
            "silica", version=__version__,
            instructions="The user's own script tools, run by silica.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_subscriptions_listen=ListenHandler(self._events),
            **self.catalog.handlers(),
        )
        # a 2026-07-28 call's requestState is sealed on its way out, checked on its way in
        self.server.middleware.append(RequestStateBoundary(RequestStateSecurity.ephemeral(),
                                                           default_audience="silica"))
        serve_log.install(self.server)  # logging/setLevel, and log records to clients
        self.server.add_notification_handler("notifications/initialized",
                                             types.NotificationParams, self._forward_changes)

    def initialization_options(self) -> InitializationOptions:
        return self.server.create_initialization_options(NotificationOptions(tools_changed=True))

    # -- requests -----------------------------------------------------------------------

    async def _specs(self) -> list[dict]:
        """The ``tools/list`` entries (as JSON) of the current discovery (made now if there
        is none), by name."""
        async with self._discovery_lock:
            return await self._discover()

    async def _discover(self) -> list[dict]:
        # With the lock held. No await after ``adiscover``: the specs are that discovery's.
        await to_the_end(self.toolbox.adiscover())
        warnings = self.toolbox.discover().warnings
        if warnings != self._warnings:
            for warning in warnings:
                log.warning("%s", warning)
            self._warnings = list(warnings)
        runnable = self.toolbox.discover().runnable()
        self._tools = {name: runnable[name] for name in sorted(runnable)
                       if runnable[name].ok and runnable[name].spec is not None}
        self._known = [served_tool(t).model_dump(mode="json", by_alias=True, exclude_none=True)
                       for t in self._tools.values()]
        return self._known

    async def _list_tools(self, ctx: ServerRequestContext,
                          params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool.model_validate(entry)
                                            for entry in await self._specs()])

    async def _call_tool(self, ctx: ServerRequestContext,
                         params: types.CallToolRequestParams,
                         ) -> types.CallToolResult | types.InputRequiredResult:
        await self._specs()  # so the call does not start a discovery of its own
        # Only a client that asked (a progressToken in _meta) hears of progress.
        wanted = ctx.request_id is not None and (ctx.meta or {}).get("progress_token") is not None
        reporter = ProgressReporter(ctx.session.report_progress) if wanted else None
        tool = self._tools.get(params.name)
        attached: list[types.ContentBlock] = []
        # no channel back to the client while the call runs: questions end the round
        raw = ctx.params or {}  # the answers as the client sent them, not as parsed
        rounds = Rounds(raw.get("requestState"), raw.get("inputResponses")) \
            if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS else None
        try:
            with call_stream(ctx.close_sse_stream), \
                    self.talk.calling(ctx, rounds) as attached:  # the call's task inherits both
                work = self._acall(params.name, params.arguments, reporter)
                if rounds is None:
                    result = await to_the_end(work)
                else:
                    answered = await self._round(work, rounds)
                    refusal = rounds.refusal()
                    if refusal is not None:  # it needed what the client did not declare
                        raise refusal
                    if answered is None:
                        return rounds.result()
                    result = answered
        except McpRefusal:
            raise  # a protocol error: the whole request fails, as the protocol says
        except Exception as exc:  # a plugin's bug is this call's error, not the server's end
            log.exception("calling %s failed", params.name)
            result = ToolResult.error(f"{params.name} failed: {type(exc).__name__}: {exc}")
        served = served_result(tool, result)
        if attached and not result.is_error:  # attached content is something: not "nothing"
            served.content = [c for c in served.content if not (
                isinstance(c, types.TextContent) and c.text == NOTHING)] + attached
        return served

    async def _round(self, work: Awaitable[ToolResult], rounds: Rounds) -> ToolResult | None:
        """``work``'s result, or ``None`` once it asks what the client has not answered
        (it is then stopped, and ``rounds`` holds the questions)."""
        call = asyncio.ensure_future(to_the_end(work))
        asked = asyncio.ensure_future(rounds.asked.wait())
        try:
            await asyncio.wait([call, asked], return_when=asyncio.FIRST_COMPLETED)
            if call.done():
                return call.result()
            for _ in range(10):  # questions asked at the same moment join this round
                await asyncio.sleep(0)
            call.cancel()
            await asyncio.wait([call])
            return None
        finally:
            asked.cancel()
            if not call.done():  # this handler was cancelled: the call stops, processes too
                call.cancel()
                with anyio.move_on_after(STOP_GRACE + 1, shield=True):
                    await asyncio.wait([call])

    async def _acall(self, name: str, arguments: dict[str, Any] | None,
                     reporter: ProgressReporter | None) -> ToolResult:
        """``Toolbox.acall``, with ``reporter`` (if any) reporting while it runs and silent
        once it returns: no progress follows the result."""
        if reporter is None:
            return await self.toolbox.acall(name, arguments)
        ticker = asyncio.ensure_future(reporter.run())
        try:
            return await self.toolbox.acall(name, arguments, on_stderr_line=reporter.line)
        finally:
            ticker.cancel()
            await asyncio.wait([ticker])

    async def _forward_changes(self, ctx: ServerRequestContext,
                               params: types.NotificationParams) -> None:
        """Handshake-era connections: lives as long as the connection (the SDK cancels it
        when the connection closes), sending ``tools/list_changed`` for each change."""
        send, receive = anyio.create_memory_object_stream[ServerEvent](1)

        def deliver(event: ServerEvent) -> None:
            if isinstance(event, ToolsListChanged):
                with contextlib.suppress(anyio.WouldBlock):  # one pending change is enough
                    send.send_nowait(event)

        unsubscribe = self._events.subscribe(deliver)
        try:
            async with receive:
                async for _ in receive:
                    await ctx.session.send_tool_list_changed()
        finally:
            unsubscribe()
            send.close()

    # -- watching -----------------------------------------------------------------------

    async def _folder_state(self) -> FolderState:
        box = self.toolbox

        def look() -> FolderState:
            # Folders are asked for each time: a pack installed while serving adds one.
            return folder_state([f.path for f in tool_folders(box.pm, box.cwd, box.home)])

        return await asyncio.to_thread(look)

    async def watch(self) -> None:
        """Discover, then follow the tool folders until cancelled."""
        state = await self._folder_state()  # before discovering: a change during it is seen
        try:
            await self._specs()  # now, so the first tools/list need not wait for it
        except Exception:  # a request will try again; the server keeps serving
            log.exception("discovering the tools failed")
        upstream = self._follow_mcp_servers()
        while True:
            await asyncio.sleep(self.poll_interval)
            try:
                now = await self._folder_state()
                if now != state or upstream.is_set():
                    state = now
                    upstream.clear()
                    await self._rediscover()
            except Exception:  # the watcher outlives a bad moment; calls still work
                log.exception("watching the tool folders failed")

    def _follow_mcp_servers(self) -> asyncio.Event:
        """An event set whenever a configured MCP server says its tool list changed (the
        change is then passed on to this server's own clients)."""
        changed = asyncio.Event()
        if self.toolbox.settings.mcp.servers:  # none: the MCP client side is never loaded
            from silica.mcp.connections import connections

            connections().add_listener(lambda *_: changed.set(), asyncio.get_running_loop())
        return changed

    async def _rediscover(self) -> None:
        async with self._discovery_lock:
            before = self._known
            self.toolbox.refresh()
            after = await self._discover()
        if after != before:
            log.info("the tool list changed; telling clients")
            await self._events.publish(ToolsListChanged())


async def to_the_end(work: Awaitable[T], grace: float = STOP_GRACE) -> T:
    """Await ``work`` in a task of its own. If the caller is cancelled (the client went away,
    the server stops), ``work`` is cancelled once and given up to ``grace`` seconds to stop
    what it started before the cancellation goes on: anyio's cancellation strikes again at
    every await, which would cut a tool's cleanup short and leave its processes running."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        with anyio.move_on_after(grace, shield=True):
            await asyncio.wait([task])
        if task.done() and not task.cancelled():
            task.exception()  # seen: no "exception was never retrieved" at exit
        raise


def serve_shell(toolbox: Toolbox, enabled: bool) -> None:
    """Whether ``toolbox`` (not yet discovered) offers the ``shell`` tool, whatever
    ``[shell] enabled`` says. Offered, a command runs if it matches ``[shell] allow``; with
    no pattern there, every command runs (the host asks its user before each call), else
    the others are refused, not run, with a result saying why."""
    from silica.tools.shell import host_asks

    settings = toolbox.settings
    toolbox.settings = settings.model_copy(
        update={"shell": settings.shell.model_copy(update={"enabled": enabled})})
    toolbox.approve = host_asks if enabled and not settings.shell.allow else None


async def serve_stdio(toolbox: Toolbox) -> None:
    """Serve ``toolbox`` on this process's stdin and stdout until the client closes stdin or
    goes away (its end of stdout breaks); either way this returns normally."""
    from mcp.server.stdio import stdio_server

    tools = ToolServer(toolbox)
    try:
        async with stdio_server() as (read, write), anyio.create_task_group() as tasks:
            tasks.start_soon(tools.watch)
            await tools.server.run(read, write, tools.initialization_options())
            tasks.cancel_scope.cancel()
    except* _GONE:  # the client is gone: nobody is left to tell
        log.debug("the client went away")


async def serve_http(toolbox: Toolbox, host: str, port: int, token: str | None = None) -> None:
    """Serve ``toolbox`` over streamable HTTP at ``http://host:port/mcp`` until interrupted.

    Port 0 takes a free port; the address served is logged (stderr) either way. With a
    ``token``, every request needs ``Authorization: Bearer TOKEN`` (else 401). On a loopback
    host, requests naming another host or origin are refused (DNS rebinding). SSE streams
    can be resumed with ``Last-Event-ID`` (``silica.mcp.transport``).
    ``SilicaError`` if the address cannot be listened on.
    """
    import uvicorn

    tools = ToolServer(toolbox)
    # An ASGI app; its SSE streams are resumable (silica.mcp.transport).
    app: Any = tools.server.streamable_http_app(host=host, event_store=MemoryEventStore(),
                                                retry_interval=RETRY_MS)
    app = SessionScope(app)  # each session's streams apart in the event store
    if token:
        app = BearerGuard(app, token)
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.create_server((host, port), family=family)
    except OSError as exc:
        raise SilicaError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; "
                          "pick another --port (0 takes a free one)") from exc
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    log.info("serving MCP at http://%s:%d/mcp", shown, bound)
    if host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("%s is reachable from other machines: anyone who can connect%s can run "
                    "your tools", host,
                    " with the token" if token else "")
    config = uvicorn.Config(app, log_config=None, log_level="warning", access_log=False)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(tools.watch)
        try:
            await uvicorn.Server(config).serve(sockets=[sock])
        finally:
            sock.close()
            tasks.cancel_scope.cancel()


class BearerGuard:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer TOKEN`` get a 401."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                       for k, v in scope.get("headers", ())}
            if not token_matches(self.token, bearer(headers)):
                from starlette.responses import JSONResponse

                refusal = JSONResponse(
                    {"error": "unauthorized", "message": (
                        "this server needs its token: send Authorization: Bearer <token> "
                        "(silica mcp serve --http printed it at start)")},
                    status_code=401, headers={"WWW-Authenticate": 'Bearer realm="silica"'})
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)
