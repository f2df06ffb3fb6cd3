"""What ``silica mcp serve --http`` adds to the SDK's streamable HTTP transport: resumable
streams.

Each SSE stream a response opens starts with a priming event (an event id, empty data and a
``retry`` of ``RETRY_MS``), and every event on it is kept in an ``EventStore`` held in
memory, so a client whose stream broke (or that the server let go while a call runs) comes
back with ``Last-Event-ID`` and gets what it missed. The store is bounded: at most
``STREAM_EVENTS`` events per stream and ``STREAMS`` streams per session; the oldest go
first, and a client asking to resume from an event that is gone gets nothing replayed.

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
from typing import Any

from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.shared.message import CloseSSEStreamCallback
from mcp.types import JSONRPCMessage

RETRY_MS = 1000  # how long a client waits before it comes back for a closed stream
STREAM_EVENTS = 1000  # events kept per stream
STREAMS = 1000  # streams kept

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


Streams = OrderedDict[StreamId, tuple[list[int], deque[tuple[int, Message]]]]


class MemoryEventStore(EventStore):
    """The events of each session's last ``streams`` streams, ``per_stream`` each, in memory
    (a session's go when it ends). An event id is ``<stream>/<n>``: a stream's own events are
    replayed in order, nobody else's."""

    def __init__(self, per_stream: int = STREAM_EVENTS, streams: int = STREAMS) -> None:
        self.per_stream, self.streams = per_stream, streams
        self._sessions: weakref.WeakKeyDictionary[Session, Streams] = \
            weakref.WeakKeyDictionary()

    def _streams(self) -> Streams:
        """The streams of the session being served: stream -> (how many events it has had,
        the last ``per_stream`` of them, numbered)."""
        return self._sessions.setdefault(_session.get() or _NO_SESSION, OrderedDict())

    async def store_event(self, stream_id: StreamId, message: Message) -> EventId:
        streams = self._streams()
        if stream_id not in streams:
            streams[stream_id] = ([0], deque(maxlen=self.per_stream))
            while len(streams) > self.streams:
                streams.popitem(last=False)
        streams.move_to_end(stream_id)
        count, kept = streams[stream_id]
        count[0] += 1
        kept.append((count[0], message))
        return f"{stream_id}/{count[0]}"

    async def replay_events_after(self, last_event_id: EventId,
                                  send_callback: EventCallback) -> StreamId | None:
        streams = self._streams()
        stream_id, _, number = last_event_id.rpartition("/")
        if stream_id not in streams or not number.isdigit():
            return None
        _, kept = streams[stream_id]
        after = int(number)
        if kept and kept[0][0] > after + 1:
            return None  # what came after it is gone: a replay would leave a hole
        for seen, message in list(kept):
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
