"""What ``silica mcp serve --http`` adds to the SDK's streamable HTTP transport: resumable
streams.

Each SSE stream a response opens starts with a priming event (an event id, empty data and a
``retry`` of ``RETRY_MS``), and every event on it is kept in an ``EventStore`` held in
memory, so a client whose stream broke (or that the server let go while a call runs) comes
back with ``Last-Event-ID`` and gets what it missed. The store is bounded: at most
``STREAM_EVENTS`` events per stream and ``STREAMS`` streams; the oldest go first, and a
client asking to resume from an event that is gone gets nothing replayed.

A call's handler may let its client go before it answers (``close_call_stream``); the
client polls back and gets the answer from the store.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar

from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.shared.message import CloseSSEStreamCallback
from mcp.types import JSONRPCMessage

RETRY_MS = 1000  # how long a client waits before it comes back for a closed stream
STREAM_EVENTS = 1000  # events kept per stream
STREAMS = 1000  # streams kept

StreamId = str
EventId = str
Message = JSONRPCMessage | None  # None: a stream's priming event


class MemoryEventStore(EventStore):
    """The events of the last ``streams`` streams, ``per_stream`` each, in memory. An event
    id is ``<stream>/<n>``: a stream's own events are replayed in order, nobody else's."""

    def __init__(self, per_stream: int = STREAM_EVENTS, streams: int = STREAMS) -> None:
        self.per_stream, self.streams = per_stream, streams
        # stream -> (how many events it has had, the last ``per_stream`` of them numbered)
        self._events: OrderedDict[StreamId, tuple[list[int], deque[tuple[int, Message]]]] = \
            OrderedDict()

    async def store_event(self, stream_id: StreamId, message: Message) -> EventId:
        if stream_id not in self._events:
            self._events[stream_id] = ([0], deque(maxlen=self.per_stream))
            while len(self._events) > self.streams:
                self._events.popitem(last=False)
        self._events.move_to_end(stream_id)
        count, kept = self._events[stream_id]
        count[0] += 1
        kept.append((count[0], message))
        return f"{stream_id}/{count[0]}"

    async def replay_events_after(self, last_event_id: EventId,
                                  send_callback: EventCallback) -> StreamId | None:
        stream_id, _, number = last_event_id.rpartition("/")
        if stream_id not in self._events or not number.isdigit():
            return None
        _, kept = self._events[stream_id]
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
