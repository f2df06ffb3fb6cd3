"""One live connection per MCP server, kept for the life of the process.

    manager = connections()
    tools, note = await manager.list_tools("files", server, default_timeout)   # any loop
    result = await manager.call_tool("files", server, "read", {"path": "a"}, default_timeout)

The manager owns one event loop in a daemon thread; every server's SDK session lives there,
and callers on any event loop (or none: ``list_all_blocking``) reach it through futures. A
server is started on first use and its session is shared: calls run concurrently on it.
Servers are told apart by name and settings, so two Toolboxes with the same server share it.

What a caller may rely on:

- ``list_tools`` gives the server's tools from the connection's list (fetched at start,
  fetched again on ``notifications/tools/list_changed``), at most ``MAX_TOOLS`` of them,
  with a note saying what was left out. Pages stop being fetched once ``MAX_TOOLS`` are
  in; a stdio server's messages are read through ``silica.mcp.bounded`` (one long page is
  cut there, any message past ``MAX_MESSAGE`` refused).
- ``call_tool`` returns a ``ToolResult``; a server that cannot start, stops, or does not
  answer within its ``timeout`` gives an error result naming it (with the end of its
  stderr), never an exception. A call past ``timeout`` is cancelled (the SDK sends
  ``notifications/cancelled``); the connection stays. A server that stopped is started
  again by the next use, after a pause that doubles with each failure in a row (0.5 s up
  to 30 s) and is forgotten after a successful call.
- A server's ``elicitation/create`` request (form mode) made during a call is checked
  (``silica.mcp.elicit``; a schema that does not fit is an invalid-params error and nobody
  is asked), then put to the ``elicit`` asker that call was given, on the caller's loop,
  for at most its ``elicit_timeout`` (the call's own timeout waits meanwhile). No asker, no
  call in flight, a timeout, an answer that does not fit, a URL-mode request, or more than
  ``MAX_ASKS`` requests in one call: declined, and the reasons end the call's result as a
  note. A request is the call's whose task it comes in on (the 2026-07-28 protocol), else
  the one call in flight on that connection (or the oldest, if every call in flight has
  the same asker; if their askers differ it is declined: silica cannot tell whose it is).
- ``add_listener(callback)`` hears about every tool list that changed on a live connection.
- Every connection declares the MCP Apps extension (``silica.mcp.apps``);
  ``read_resource`` reads a resource (an app's ``ui://`` HTML) and ``call_for_app`` calls a
  tool for an app, giving the server's own ``CallToolResult``; both raise
  ``McpServerError``.
- At exit (``atexit``; SIGTERM too, see ``stop_on_sigterm``) every connection is closed: a
  stdio server's stdin is closed, then its process group (its own session) is ended.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import hashlib
import os
import signal
import threading
import time
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from silica.blocks import ToolResult
from silica.config import McpServerSettings
from silica.elicitation import Asker
from silica.mcp import apps
from silica.mcp.asking import ASKING, ELICIT_TIMEOUT, CallAsking, noted
from silica.mcp.bounded import MAX_TOOLS, TOO_LARGE, BoundedLines, RequestWatch, cut_note
from silica.mcp.client import (
    STDERR_DRAIN,
    AnswerTooLarge,
    McpServerError,
    StderrTail,
    _leaf,
    complete_by_default,
    explain,
    lost,
    stderr_tail,
    transport,
    unparsed,
)
from silica.mcp.content import result_of
from silica.mcp.elicit import ElicitationError, check_request
from silica.security.sandbox import SandboxPolicy
from silica.security.server_start import ServerStart, server_start

T = TypeVar("T")
Listener = Callable[[str, list[Any]], None]
"""``callback(server_name, tools)``: the server's new tool list (``mcp_types.Tool``)."""

_MAX_PAGES = 100  # a server whose cursor never ends must not hang a listing
_BACKOFF_FIRST, _BACKOFF_MAX = 0.5, 30.0
_CLOSE_WAIT = 8.0  # seconds for every server to stop at exit (the SDK needs up to ~4.5)

# The pids of the stdio servers a connection spawns, recorded by the SDK's spawn function.
_SPAWNED: ContextVar[list[int] | None] = ContextVar("silica_mcp_spawned", default=None)


def config_key(name: str, server: McpServerSettings) -> str:
    """A hash of a server's name and settings: what tells its connections and caches apart."""
    return hashlib.sha256(f"{name}\0{server.model_dump_json()}".encode()).hexdigest()[:16]


@dataclass
class _Live:
    """One started session: its SDK client and what shuts it down."""

    client: Any
    owner: asyncio.Task
    stop: asyncio.Event
    tail: StderrTail | None
    noise: list[str]
    pids: list[int]
    closing: asyncio.Task | None = None
    watch: asyncio.Task | None = None
    stderr: str = ""

    def alive(self) -> bool:
        return not self.owner.done() and all(_running(pid) for pid in self.pids)


@dataclass
class _Connection:
    """A server's connection; every method runs on the manager's loop."""

    manager: McpConnections
    name: str
    server: McpServerSettings
    timeout: float
    startup_timeout: float
    live: _Live | None = None
    tools: list[Any] = field(default_factory=list)
    note: str = ""
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _failures: int = 0
    _retry_at: float = 0.0
    _last_error: str = ""
    _tasks: set[asyncio.Task] = field(default_factory=set)
    _calls: list[CallAsking] = field(default_factory=list)  # in flight, oldest first

    async def listing(self) -> tuple[list[Any], str]:
        await self.ready()
        return self.tools, self.note

    async def ready(self) -> _Live:
        """The live session, started (within ``startup_timeout``) if there is none."""
        live = self.live
        if live is not None and live.alive():
            return live
        async with self._lock:
            if self.live is not None and self.live.alive():
                return self.live
            if self.live is not None:  # it stopped while idle: start it again, quietly
                await self._close(self.live)
            wait = self._retry_at - time.monotonic()
            if wait > self.startup_timeout:
                raise McpServerError(f"{self._last_error} (silica starts it again in "
                                     f"{wait:.0f} s)")
            if wait > 0:
                await asyncio.sleep(wait)
            return await self._start()

    async def _start(self) -> _Live:
        start = self._where()
        tail = StderrTail() if self.server.command else None
        noise: list[str] = []
        stop, ready = asyncio.Event(), asyncio.get_running_loop().create_future()
        pids: list[int] = []
        token = _SPAWNED.set(pids)
        try:  # the owner task copies the context now: its spawn records into ``pids``
            owner = asyncio.create_task(self._own(ready, stop, tail, noise, start))
        finally:
            _SPAWNED.reset(token)
        live = _Live(None, owner, stop, tail, noise, pids)
        started = False
        try:
            async with asyncio.timeout(self.startup_timeout):
                live.client = await ready
                started = True
                self.tools, self.note = await self._list(live.client)
        except BaseException as exc:
            said = await self._close(live)
            if isinstance(exc, asyncio.CancelledError):
                raise
            message = explain(exc, self.name, self.server, self.startup_timeout,
                              "listing its tools", started, said, noise, start)
            self._failed(message)
            raise McpServerError(message) from None
        self.live = live
        live.watch = asyncio.create_task(self._watch(live))
        self.manager.save(self.name, self.server, self.tools)
        return live

    def _where(self) -> ServerStart | None:
        """Where a stdio server starts (``silica.security.server_start``); ``None`` for HTTP."""
        if not self.server.command:
            return None
        try:
            return server_start(self.name, self.server.command, self.server.cwd)
        except OSError as exc:
            message = (f"cannot start the MCP server {self.name!r}: cannot make its folder: "
                       f"{exc}; check that the silica home is writable, or give it a \"cwd\"")
            self._failed(message)
            raise McpServerError(message) from None

    async def _watch(self, live: _Live) -> None:
        """On a 2026-07-28 connection, list changes come on a ``subscriptions/listen``
        stream (handshake-era servers send ``notifications/tools/list_changed`` instead)."""
        try:
            async with live.client.listen(tools_list_changed=True) as changes:
                async for _ in changes:
                    await self._refresh()
        except Exception:  # not supported, or the connection ended: nothing to watch
            return

    async def _own(self, ready: asyncio.Future, stop: asyncio.Event, tail: StderrTail | None,
                   noise: list[str], start: ServerStart | None) -> None:
        """Holds the SDK client open until ``stop``: the SDK's task groups must be entered
        and left by one task."""
        from mcp import Client  # the SDK is imported only when a server is used

        async def on_message(message: Any) -> None:
            if isinstance(message, Exception):
                if len(noise) < 3:
                    noise.append(unparsed(message))
            elif getattr(message, "method", None) == "notifications/tools/list_changed":
                self._spawn(self._refresh())  # not here: the reader must go on reading

        try:
            streams = complete_by_default(transport(
                self.name, self.server, tail.writer if tail else None, start,
                self.manager.sandbox))
            async with Client(streams, message_handler=on_message, cache=None,
                              elicitation_callback=self._elicited,
                              extensions=apps.extensions()) as client:
                if not ready.done():
                    ready.set_result(client)
                await stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except BaseException as exc:  # the caller waiting on ``ready`` explains it
            if not ready.done():
                ready.set_exception(exc)
        finally:
            if tail is not None:
                tail.close()

    async def _list(self, client: Any) -> tuple[list[Any], str]:
        tools, cursor = [], None
        for _ in range(_MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            if note := cut_note(self.name, page.meta):  # one page too long: not read whole
                return tools[:MAX_TOOLS], note
            cursor = page.next_cursor
            if not cursor or len(tools) >= MAX_TOOLS:  # a cursor past the cut: there is more
                break
        if len(tools) > MAX_TOOLS or (cursor and len(tools) >= MAX_TOOLS):
            more = "more than " if cursor else ""
            return tools[:MAX_TOOLS], (f"the MCP server {self.name!r} offers {more}"
                                       f"{len(tools)} tools; silica offers only its first "
                                       f"{MAX_TOOLS}")
        return tools, ""

    async def _refresh(self) -> None:
        live = self.live
        if live is None:
            return
        try:
            async with asyncio.timeout(self.timeout):
                tools, note = await self._list(live.client)
        except Exception:  # the old list stays; a call will find out what is wrong
            return
        if self.live is live:
            self.tools, self.note = tools, note
            self.manager.save(self.name, self.server, tools)
            self.manager.changed(self.name, tools)

    async def _elicited(self, context: Any, params: Any) -> Any:
        """The SDK's elicitation callback: check the request, put it to the call's asker."""
        from mcp import types

        asking = ASKING.get() or self._caller()
        if getattr(params, "mode", "form") != "form":  # a URL to open: not offered by silica
            if asking is not None:
                asking.decline("silica does not open a server's URL for input")
            return types.ElicitResult(action="decline")
        try:
            request = check_request(self.name, params.message, params.requested_schema)
        except ElicitationError as exc:
            if asking is not None:  # the server is told why; the call's result says so too
                asking.decline(f"refused a form silica cannot show ({exc})")
            return types.ErrorData(code=types.INVALID_PARAMS,
                                   message=f"silica cannot ask for this: {exc}")
        if asking is None:
            return types.ElicitResult(action="decline")
        answer = await asking.ask(request)
        return types.ElicitResult(action=answer.action,
                                  content=answer.content if answer.action == "accept" else None)

    def _caller(self) -> CallAsking | None:
        """The call a request that came without its call's context belongs to (see the
        module's docstring), or ``None``."""
        calls = self._calls
        if not calls or any(c.asker is not calls[0].asker for c in calls):
            return None
        return calls[0]

    async def call(self, tool: str, arguments: dict, asking: CallAsking | None = None) -> Any:
        live = await self.ready()
        what = f"the call of {tool!r}"
        asking = asking or CallAsking(None, None)
        token = ASKING.set(asking)
        self._calls.append(asking)
        try:
            async with asyncio.timeout(self.timeout) as deadline:
                asking.deadline = deadline
                result = await live.client.call_tool(tool, arguments)
        except Exception as exc:
            if isinstance(exc, TimeoutError):  # cancelled: the session itself is fine
                message = explain(exc, self.name, self.server, self.timeout, what, True, "",
                                  live.noise) + "; the call was cancelled"
            elif lost(exc) or not live.alive():
                said = await self._close(live)
                message = explain(exc, self.name, self.server, self.timeout, what, True, said,
                                  live.noise)
                self._failed(message)
            else:
                message = explain(exc, self.name, self.server, self.timeout, what, True, "",
                                  live.noise)
            raise McpServerError(message) from None
        finally:
            self._calls.remove(asking)
            ASKING.reset(token)
        self._failures, self._retry_at = 0, 0.0
        return result

    async def read_resource(self, uri: str) -> Any:
        live = await self.ready()
        async with asyncio.timeout(self.timeout):
            return await live.client.read_resource(uri)

    async def close(self) -> None:
        if self.live is not None:
            await self._close(self.live)

    async def _close(self, live: _Live) -> str:
        """Stop ``live`` (once, however many callers ask); the end of its stderr."""
        if self.live is live:
            self.live = None
        if live.closing is None:
            live.closing = asyncio.create_task(self._shut(live))
        return await asyncio.shield(live.closing)

    async def _shut(self, live: _Live) -> str:
        if live.watch is not None:
            live.watch.cancel()
        live.stop.set()
        if live.client is None:  # still starting up: nothing to wait for
            live.owner.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(live.owner), _CLOSE_WAIT)
        except BaseException:  # the SDK's own shutdown is bounded; this is a last resort
            live.owner.cancel()
            _kill_groups(live.pids)
        if live.tail is not None:
            live.stderr = stderr_tail(await asyncio.to_thread(live.tail.text, STDERR_DRAIN))
        return live.stderr

    def _failed(self, message: str) -> None:
        self._failures += 1
        pause = min(_BACKOFF_FIRST * 2 ** (self._failures - 1), _BACKOFF_MAX)
        self._retry_at, self._last_error = time.monotonic() + pause, message

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)  # a task nobody holds may be collected while it runs
        task.add_done_callback(self._tasks.discard)


@dataclass
class _Hop:
    """One call from a caller's loop to the manager's: the coroutine, the caller's waiter,
    and the task running it on the manager's loop once started."""

    coro: Coroutine[Any, Any, Any]
    waiter: asyncio.Future
    caller: asyncio.AbstractEventLoop
    task: asyncio.Task | None = None
    cancelled: bool = False

    def cancel(self) -> None:
        """On the manager's loop: the caller gave up; stop the call (or never start it)."""
        self.cancelled = True
        if self.task is not None:
            self.task.cancel()

    def settle(self) -> None:
        """On the caller's loop: the task's outcome, given to the waiter."""
        task = self.task
        if self.waiter.done() or task is None:
            return
        if task.cancelled():
            self.waiter.cancel()
        elif (exc := task.exception()) is not None:
            self.waiter.set_exception(exc)
        else:
            self.waiter.set_result(task.result())


class McpConnections:
    """The process's MCP connections (see the module's docstring); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connections: dict[str, _Connection] = {}
        self._listeners: list[Listener] = []
        self._inbox: list[_Hop] = []  # calls from other loops, for the manager's loop
        self._outbox: dict[asyncio.AbstractEventLoop, list[_Hop]] = {}  # answers, per loop
        self.save: Callable[[str, McpServerSettings, list[Any]], None] = lambda *_: None
        """Called with each list fetched live (``silica.mcp.source`` keeps it on disk)."""
        self.sandbox: SandboxPolicy | None = None
        """How stdio servers are confined (set from the settings by ``silica.mcp.source``)."""

    # -- use ----------------------------------------------------------------------------

    async def list_tools(self, name: str, server: McpServerSettings,
                         default_timeout: float) -> tuple[list[Any], str]:
        """The server's tools and a note (empty, or what was left out); raises
        ``McpServerError`` when it cannot be started or listed."""
        conn = self._connection(name, server, default_timeout)
        return await self._hop(conn.listing())

    def list_all_blocking(self, servers: dict[str, McpServerSettings], default_timeout: float
                          ) -> list[tuple[list[Any], str] | McpServerError]:
        """``list_tools`` for every server, in parallel, from synchronous code."""

        async def one(name: str, server: McpServerSettings):
            try:
                return await self._connection(name, server, default_timeout).listing()
            except McpServerError as exc:
                return exc

        async def every():
            return await asyncio.gather(*(one(n, s) for n, s in servers.items()))

        return self._submit(every()).result()

    async def call_tool(self, name: str, server: McpServerSettings, tool: str,
                        arguments: dict, default_timeout: float, *, elicit: Asker | None = None,
                        elicit_timeout: float = ELICIT_TIMEOUT) -> ToolResult:
        """Call ``tool`` on the server's live connection; always a ``ToolResult``. The
        server's requests for values during the call are put to ``elicit`` (on this
        caller's loop), each for at most ``elicit_timeout`` seconds."""
        conn = self._connection(name, server, default_timeout)
        asking = CallAsking(elicit, asyncio.get_running_loop(), elicit_timeout)

        async def read_resource(uri: str) -> Any:
            return await self._hop(conn.read_resource(uri))

        try:
            result = await self._hop(conn.call(tool, arguments, asking))
        except McpServerError as exc:
            return noted(ToolResult.error(str(exc)), asking.note(name))
        return noted(await result_of(name, result, read_resource), asking.note(name))

    async def read_resource(self, name: str, server: McpServerSettings, uri: str,
                            default_timeout: float) -> Any:
        """``resources/read`` of ``uri`` on the server's live connection (the SDK's
        ``ReadResourceResult``); ``McpServerError`` saying why when it cannot be read,
        ``AnswerTooLarge`` when a stdio server's answer to the read of an app (``ui://``)
        was cut off for its length (``silica.mcp.bounded``)."""
        from mcp.shared.exceptions import MCPError

        conn = self._connection(name, server, default_timeout)
        try:
            return await self._hop(conn.read_resource(uri))
        except McpServerError:
            raise
        except Exception as exc:
            message = explain(exc, name, server, conn.timeout, f"the read of {uri[:200]}",
                              True, "", [])
            leaf = _leaf(exc)
            if isinstance(leaf, MCPError) and leaf.data == TOO_LARGE:
                raise AnswerTooLarge(message) from None
            raise McpServerError(message) from None

    async def call_for_app(self, name: str, server: McpServerSettings, tool: str,
                           arguments: dict, default_timeout: float) -> Any:
        """Call ``tool`` for an MCP App: the SDK's ``CallToolResult`` as the server sent it
        (an app reads its ``structuredContent``); ``McpServerError`` when it fails."""
        conn = self._connection(name, server, default_timeout)
        return await self._hop(conn.call(tool, arguments))

    # -- list changes ---------------------------------------------------------------------

    def add_listener(self, callback: Listener,
                     loop: asyncio.AbstractEventLoop | None = None) -> Callable[[], None]:
        """Call ``callback(server_name, tools)`` whenever a live server's tool list changes;
        on ``loop`` (through ``call_soon_threadsafe``) when given, else on the manager's
        thread (keep it quick). Returns a function that removes the listener."""
        def heard(name: str, tools: list[Any]) -> None:
            if loop is None:
                callback(name, tools)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(callback, name, tools)

        with self._lock:
            self._listeners.append(heard)

        def remove() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._listeners.remove(heard)

        return remove

    def changed(self, name: str, tools: list[Any]) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            with contextlib.suppress(Exception):  # one listener's bug must not stop the others
                listener(name, tools)

    # -- the loop -------------------------------------------------------------------------

    def _connection(self, name: str, server: McpServerSettings,
                    default_timeout: float) -> _Connection:
        timeout = server.timeout or default_timeout
        startup = server.startup_timeout or default_timeout
        key = f"{config_key(name, server)}/{timeout}/{startup}"
        with self._lock:
            conn = self._connections.get(key)
            if conn is None:
                conn = self._connections[key] = _Connection(self, name, server, timeout,
                                                            startup)
            return conn

    def _manager_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                _record_spawns()
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, daemon=True,
                                 name="silica-mcp").start()
                atexit.register(self.close)
                stop_on_sigterm()
            return self._loop

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the manager's loop, for a caller with no loop (or at exit)."""
        return asyncio.run_coroutine_threadsafe(coro, self._manager_loop())

    async def _hop(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the manager's loop from the caller's. Calls made together go
        over in one batch and their answers come back in one: each loop is woken once per
        batch, not once per call. Cancelling the caller cancels the call."""
        loop = self._manager_loop()
        caller = asyncio.get_running_loop()
        if caller is loop:  # a listener's or the manager's own work: no hop
            return await coro
        hop = _Hop(coro, caller.create_future(), caller)
        with self._lock:
            self._inbox.append(hop)
            wake = len(self._inbox) == 1  # else a wake-up is on its way already
        if wake:
            loop.call_soon_threadsafe(self._take)
        try:
            return await hop.waiter
        except asyncio.CancelledError:
            with contextlib.suppress(RuntimeError):  # the manager's loop is closed: it ran
                loop.call_soon_threadsafe(hop.cancel)
            raise

    def _take(self) -> None:
        """On the manager's loop: start every call waiting in the inbox."""
        with self._lock:
            hops, self._inbox = self._inbox, []
        for hop in hops:
            if hop.cancelled:
                hop.coro.close()
                continue
            hop.task = asyncio.get_running_loop().create_task(hop.coro)
            hop.task.add_done_callback(partial(self._answer, hop))

    def _answer(self, hop: _Hop, task: asyncio.Task) -> None:
        """On the manager's loop: send a finished call's outcome to its caller's loop."""
        if not task.cancelled():
            task.exception()  # retrieved here: a caller that left does not make it a warning
        with self._lock:
            for gone in [loop for loop in self._outbox if loop.is_closed()]:
                del self._outbox[gone]  # closed before its answers were handed over
            if hop.caller.is_closed():
                return
            box = self._outbox.setdefault(hop.caller, [])
            box.append(hop)
            wake = len(box) == 1
        if wake:
            try:
                hop.caller.call_soon_threadsafe(self._deliver, hop.caller)
            except RuntimeError:  # the caller's loop is closed: nobody waits for these
                with self._lock:
                    self._outbox.pop(hop.caller, None)

    def _deliver(self, caller: asyncio.AbstractEventLoop) -> None:
        """On a caller's loop: hand every outcome that came back to its waiter."""
        with self._lock:
            hops = self._outbox.pop(caller, [])
        for hop in hops:
            hop.settle()

    def pids(self) -> list[int]:
        """The stdio servers running now (each leads its own process group)."""
        with self._lock:
            conns = list(self._connections.values())
        return [p for c in conns if c.live for p in c.live.pids if _running(p)]

    def close(self, wait: float = _CLOSE_WAIT) -> None:
        """Close every connection (within ``wait`` seconds, then kill what is left)."""
        with self._lock:
            loop, conns = self._loop, list(self._connections.values())
        if loop is None or loop.is_closed():
            return
        left = self.pids()

        async def every() -> None:
            await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

        with contextlib.suppress(BaseException):
            asyncio.run_coroutine_threadsafe(every(), loop).result(wait)
        _kill_groups(left)
        with self._lock:
            self._connections.clear()


_MANAGER: McpConnections | None = None
_MANAGER_LOCK = threading.Lock()


def connections() -> McpConnections:
    """The process's one ``McpConnections``."""
    global _MANAGER
    with _MANAGER_LOCK:
        if _MANAGER is None:
            _MANAGER = McpConnections()
        return _MANAGER


def stop_all(wait: float = 3.0) -> None:
    """Close every connection now, each server given ``wait`` seconds: for a process about
    to end without its exit handlers (on a signal, or leaving someone else's thread
    behind)."""
    if _MANAGER is not None:
        _MANAGER.close(wait=wait)


def stop_on_sigterm() -> None:
    """Make SIGTERM close the MCP servers this process started, then end the process as
    SIGTERM would: ``atexit`` does not run on a signal, and a server must not outlive silica.

    Called by whoever is about to start servers (a ``Toolbox`` whose settings name some,
    and the first connection), never on import or when plugins load. Installed only from
    the main thread and only while SIGTERM is at its default, so an embedding host's own
    handler is left alone.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):  # a host with its own rules about signals
        pass


def _on_sigterm(signum: int, frame: object) -> None:
    stop_all()  # atexit will not run on the signal
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _record_spawns() -> None:
    """Wrap the SDK's spawn of a stdio server so each connection learns its server's pid
    (the SDK starts it in a new session: the pid is also its process group), and so the
    server's stdout is read through ``BoundedLines`` (no message is held whole past its
    bounds), with its stdin watched by ``RequestWatch`` (an app's HTML has a bound of its
    own)."""
    from mcp.client import stdio

    spawn = getattr(stdio, "_create_platform_compatible_process", None)
    if spawn is None or getattr(spawn, "silica_records", False):
        return  # another SDK: its own shutdown still ends the server, only the last resort is lost

    async def recording(*args: Any, **kwargs: Any) -> Any:
        process = await spawn(*args, **kwargs)
        if getattr(process, "_stdout", None) is not None:  # anyio's asyncio process
            process._stdout = lines = BoundedLines(process._stdout)
            if getattr(process, "_stdin", None) is not None:
                process._stdin = RequestWatch(process._stdin, lines)
        pids = _SPAWNED.get()
        if pids is not None:
            pids.append(process.pid)
        return process

    recording.silica_records = True  # type: ignore[attr-defined]
    stdio._create_platform_compatible_process = recording


def _running(pid: int) -> bool:
    """Whether ``pid`` is still this process's child and not a zombie (never a stranger
    that reused the pid). Asked before every call: one ``waitid`` that reaps nothing
    (``WNOWAIT``), not a file read."""
    waitid = getattr(os, "waitid", None)
    if waitid is not None:
        try:
            return waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:  # not a child of this process, or already reaped
            return False
        except OSError:  # waitid refused here: ask procfs below
            pass
    if not os.path.isdir("/proc/self"):  # no procfs: ask the kernel, less precisely
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and int(fields[1]) == os.getpid()


def _kill_groups(pids: list[int]) -> None:
    for pid in pids:
        if _running(pid):
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
