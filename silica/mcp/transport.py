"""What ``silica mcp serve --http`` adds to the SDK's streamable HTTP transport: resumable
streams.

Each SSE stream a response opens starts with a priming event (an event id, empty data and a
``retry`` of ``RETRY_MS``), and every event on it is kept in an ``EventStore`` held in
memory, so a client whose stream broke (or that the server let go while a call runs) comes
back with ``Last-Event-ID`` and gets what it missed. The store is bounded: at most
``STREAM_EVENTS`` events per stream, ``STREAMS`` streams and ``SESSION_BYTES`` of JSON per
session; the oldest go first, and a client asking to resume from an event that is gone
gets nothing replayed.

The SDK names a stream by its request's JSON-RPC id and shares one store among sessions,
where two clients' ids collide. ``SessionScope`` (ASGI middleware) marks each request with
its session, so that each session's streams are kept apart and go with it.

A call's handler may let its client go before it answers (``close_call_stream``); the
client polls back and gets the answer from the store.
"""

from __future__ import annotations

import contextlib
import weakref
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.shared.message import CloseSSEStreamCallback
from mcp.types import JSONRPCMessage

RETRY_MS = 1000  # how long a client waits before it comes back for a closed stream
STREAM_EVENTS = 1000  # events kept per stream
STREAMS = 1000  # streams kept per session
SESSION_BYTES = 16 * 1024 * 1024  # JSON kept per session, at most

StreamId = str
EventId = str
Message = JSONRPCMessage | None  # None: a stream's priming event


class Session:
    """One MCP session, as the requests and tasks of that session know it (by identity)."""


_NO_SESSION = Session()  # requests that reach the store outside ``SessionScope``
_session: ContextVar[Session | None] = ContextVar("silica_mcp_session", default=None)


class SessionScope:
    """ASGI middleware: every request runs with its session (``Mcp-Session-Id``) in a context
    variable, and so do the tasks it starts; a request without one (the session's first)
    gets a new one, known by the id its response gives."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.sessions: weakref.WeakValueDictionary[str, Session] = \
            weakref.WeakValueDictionary()  # an entry lives as long as its session's tasks

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        named = dict(scope.get("headers", ())).get(b"mcp-session-id")
        session = self.sessions.get(named.decode("latin-1")) if named else None
        if session is None:
            session = Session()

        async def sending(message: dict) -> None:
            if message["type"] == "http.response.start":
                given = dict(message.get("headers", ())).get(b"mcp-session-id")
                if given:
                    self.sessions[given.decode("latin-1")] = session
            await send(message)

        token = _session.set(session)
        try:
            await self.app(scope, receive, sending)
        finally:
            _session.reset(token)


@dataclass
class _Stream:
    count: int = 0  # events it has had
    events: deque[tuple[int, Message, int]] = field(default_factory=deque)  # n, event, size


@dataclass
class _Kept:
    """One session's streams, least recently written first, and their events' size."""

    streams: OrderedDict[StreamId, _Stream] = field(default_factory=OrderedDict)
    size: int = 0


class MemoryEventStore(EventStore):
    """The events of each session's last ``streams`` streams, ``per_stream`` each and
    ``budget`` bytes of JSON in all, in memory (a session's go when it ends). An event id is
    ``<stream>/<n>``: a stream's own events are replayed in order, nobody else's."""

    def __init__(self, per_stream: int = STREAM_EVENTS, streams: int = STREAMS,
                 budget: int = SESSION_BYTES) -> None:
        self.per_stream, self.streams, self.budget = per_stream, streams, budget
        self._sessions: weakref.WeakKeyDictionary[Session, _Kept] = \
            weakref.WeakKeyDictionary()

    def _kept(self) -> _Kept:
        """What is kept of the session being served."""
        return self._sessions.setdefault(_session.get() or _NO_SESSION, _Kept())

    async def store_event(self, stream_id: StreamId, message: Message) -> EventId:
        kept = self._kept()
        stream = kept.streams.setdefault(stream_id, _Stream())
        kept.streams.move_to_end(stream_id)
        stream.count += 1
        size = 0 if message is None else len(
            message.model_dump_json(by_alias=True, exclude_unset=True))
        stream.events.append((stream.count, message, size))
        kept.size += size
        while len(stream.events) > self.per_stream:
            kept.size -= stream.events.popleft()[2]
        while len(kept.streams) > self.streams or kept.size > self.budget:
            oldest_id, oldest = next(iter(kept.streams.items()))
            if oldest is stream:  # this stream alone is over: its own oldest events go
                if not stream.events:
                    break
                kept.size -= stream.events.popleft()[2]
                continue
            del kept.streams[oldest_id]
            kept.size -= sum(event[2] for event in oldest.events)
        return f"{stream_id}/{stream.count}"

    async def replay_events_after(self, last_event_id: EventId,
                                  send_callback: EventCallback) -> StreamId | None:
        stream_id, _, number = last_event_id.rpartition("/")
        stream = self._kept().streams.get(stream_id)
        if stream is None or not number.isdigit() or int(number) > stream.count:
            return None
        after = int(number)
        first = stream.events[0][0] if stream.events else stream.count + 1
        if first > after + 1:
            return None  # what came after it is gone: a replay would leave a hole
        for seen, message, _ in list(stream.events):
            if seen > after and message is not None:
                await send_callback(EventMessage(message, f"{stream_id}/{seen}"))
        return stream_id


_closer: ContextVar[CloseSSEStreamCallback | None] = ContextVar("silica_call_stream",
                                                                default=None)


@contextlib.contextmanager
def call_stream(close: CloseSSEStreamCallback | None) -> Iterator[None]:
    """While a request is handled: ``close`` lets its client go (``None``: it cannot be)."""
    token = _closer.set(close)
    try:
        yield
    finally:
        _closer.reset(token)


async def close_call_stream() -> bool:
    """Let the client of the call being handled go: its SSE stream closes and it comes back
    for the answer (``Last-Event-ID``). False, and nothing done, where that cannot be (stdio,
    a client too old to resume, a JSON response)."""
    close: Callable[[], Awaitable[None]] | None = _closer.get()
    if close is None:
        return False
    await close()
    return True
