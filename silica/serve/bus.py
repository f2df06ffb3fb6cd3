"""The event bus: one place a turn's events go, fanned out to every listener of the session.

    bus = EventBus()
    bus.attach(sio)                                     # Socket.IO server to emit through
    await bus.publish(session_id, "text_delta", {...})  # to SSE streams and Socket.IO rooms
    async with bus.subscribe(session_id) as events:     # an SSE stream's view
        async for event, data in events: ...

An event that carries images has two forms: ``data`` (refs and URLs) and ``inline`` (the same
with base64 ``image_data``, for clients that asked for ``inline_images``). Socket.IO clients
sit in room ``session:{sid}``, and in ``session:{sid}:refs`` or ``session:{sid}:inline``: an
event without an inline form goes to the first, one with both forms to the other two.

This bus is in-process. A bus shared by several daemons subclasses it (``silica.serve.
redis_bus``): ``client_manager`` gives Socket.IO its cross-process manager, ``publish`` sends
the event to the other daemons too, and what arrives from them is handed to ``deliver``,
which feeds this process's SSE streams. ``make_bus(redis_url)`` picks the bus.

``publish_now`` does the same at once, without awaiting (``False``: this bus cannot, await
``publish``): a turn's pump calls it when nothing is queued before the event, so a reply's
last delta is on its way to every client before the turn's end-of-reply work runs. Each
event goes to a session's SSE streams as one ``Event``, so their transport encodes it once
for all of them (``Event.wire``).

``taps`` are functions called with ``(session_id, event, data)`` for every event handed to
this process's streams, whether or not it has any, where and in the order they get it (the
form without inline images): ``silica.serve.replay`` keeps running turns' events that way.

What callers may rely on: ``publish`` never raises for a listener that is gone or slow; a
stream that falls ``QUEUE_SIZE`` events behind is ended (its client reconnects and reads the
history), so a stuck client never grows the daemon's memory; ``close`` ends every stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from silica.errors import SilicaError

log = logging.getLogger("silica.serve")

NAMESPACE = "/events"
QUEUE_SIZE = 5000  # events a stream may fall behind before it is ended
_END = ("", None)


def room(session_id: str, form: str = "") -> str:
    """The Socket.IO room of a session's listeners (``form``: ``refs`` or ``inline``)."""
    return f"session:{session_id}:{form}" if form else f"session:{session_id}"


class Event(tuple):
    """``(event, data)`` as handed to every SSE stream of a session; ``wire`` keeps what the
    transport made of it (``encoded``), so the other streams reuse the bytes."""

    wire: bytes | None = None

    def __new__(cls, event: str, data: Any) -> Event:
        return super().__new__(cls, (event, data))

    def encoded(self, encode: Callable[[str, Any], bytes]) -> bytes:
        """``encode(event, data)``, made once for all the streams this event went to."""
        if self.wire is None:
            self.wire = encode(*self)
        return self.wire


class Subscription:
    """One SSE stream's events: iterate for ``(event, data)``; ends when the bus closes or
    the stream fell too far behind (``lagged``)."""

    def __init__(self, session_id: str, inline: bool) -> None:
        self.session_id, self.inline = session_id, inline
        self.queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(QUEUE_SIZE)
        self.lagged = False
        self.ended = False

    def put(self, event: str, data: Any) -> None:
        self.put_event(Event(event, data))

    def put_event(self, item: Event) -> None:
        if self.ended:
            return
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:  # the client stopped reading: what it missed is gone
            self.lagged = True
            while not self.queue.empty():
                self.queue.get_nowait()
            self.end()

    def end(self) -> None:
        """End the stream once the events already queued are read."""
        if self.ended:
            return
        self.ended = True
        try:
            self.queue.put_nowait(_END)
        except asyncio.QueueFull:
            self.queue.get_nowait()
            self.queue.put_nowait(_END)

    async def next(self, timeout: float | None = None) -> tuple[str, Any] | None:
        """The next event, ``None`` after ``timeout`` seconds without one; ``StopAsyncIteration``
        once ended."""
        try:
            item = await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None
        if item is _END:
            raise StopAsyncIteration
        return item

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> tuple[str, Any]:
        item = None
        while item is None:
            item = await self.next()
        return item


class EventBus:
    """In-process fan-out (see the module docstring)."""

    def __init__(self) -> None:
        self.sio: Any = None
        self._streams: dict[str, set[Subscription]] = {}
        self.taps: list[Callable[[str, str, Any], None]] = []

    # -- wiring -------------------------------------------------------------------------

    def client_manager(self) -> Any:
        """The Socket.IO client manager to build the server with (``None``: its default)."""
        return None

    def attach(self, sio: Any) -> None:
        """Emit Socket.IO events through ``sio`` (a ``socketio.AsyncServer``)."""
        self.sio = sio

    async def start(self) -> None:
        """Begin (a shared bus connects here)."""

    async def close(self) -> None:
        """End every stream."""
        for streams in list(self._streams.values()):
            for stream in list(streams):
                stream.end()

    # -- events -------------------------------------------------------------------------

    def wants_inline(self, session_id: str) -> bool:
        """Whether any listener of the session asked for inline images (so the inline form
        is worth making)."""
        if any(s.inline for s in self._streams.get(session_id, ())):
            return True
        if self.sio is None:
            return False
        try:
            return any(True for _ in self.sio.manager.get_participants(
                NAMESPACE, room(session_id, "inline")))
        except (KeyError, AttributeError):
            return False

    async def publish(self, session_id: str, event: str, data: dict,
                      inline: dict | None = None) -> None:
        """Send ``event`` to every listener of the session, ``inline`` to those that asked
        for inline images (``None``: ``data`` is the only form)."""
        self.deliver(session_id, event, data, inline)
        await self.emit(session_id, event, data, inline)

    def publish_now(self, session_id: str, event: str, data: dict,
                    inline: dict | None = None) -> bool:
        """``publish`` at once, without awaiting: to the SSE streams, and to the Socket.IO
        clients' send queues when the Socket.IO manager can (``emit_now``); ``False``, with
        nothing sent, when it cannot (the caller awaits ``publish`` instead)."""
        emit_now = getattr(getattr(self.sio, "manager", None), "emit_now", None)
        if self.sio is not None and emit_now is None:
            return False
        self.deliver(session_id, event, data, inline)
        if emit_now is None:
            return True
        try:
            if inline is None:
                emit_now(event, data, NAMESPACE, room(session_id))
            else:
                emit_now(event, data, NAMESPACE, room(session_id, "refs"))
                emit_now(event, inline, NAMESPACE, room(session_id, "inline"))
        except Exception:  # a transport's failure must not reach the turn
            log.warning("could not send a %s event to Socket.IO clients", event, exc_info=True)
        return True

    async def emit(self, session_id: str, event: str, data: dict,
                   inline: dict | None = None) -> None:
        """The Socket.IO half of ``publish``."""
        if self.sio is None:
            return
        try:
            if inline is None:
                await self.sio.emit(event, data, room=room(session_id), namespace=NAMESPACE)
            else:
                await self.sio.emit(event, data, room=room(session_id, "refs"),
                                    namespace=NAMESPACE)
                await self.sio.emit(event, inline, room=room(session_id, "inline"),
                                    namespace=NAMESPACE)
        except Exception:  # a transport's failure must not reach the turn
            log.warning("could not send a %s event to Socket.IO clients", event, exc_info=True)

    def deliver(self, session_id: str, event: str, data: dict,
                inline: dict | None = None) -> None:
        """Hand an event to this process's SSE streams of the session (and its taps)."""
        self.tap(session_id, event, data)
        streams = self._streams.get(session_id)
        if not streams:
            return
        plain = Event(event, data)
        full = plain if inline is None else Event(event, inline)
        for stream in list(streams):
            stream.put_event(full if stream.inline else plain)

    def tap(self, session_id: str, event: str, data: Any) -> None:
        """Hand an event to the taps; one that fails is logged, never raised."""
        for tap in self.taps:
            try:
                tap(session_id, event, data)
            except Exception:
                log.warning("a tap failed on a %s event", event, exc_info=True)

    @contextlib.asynccontextmanager
    async def subscribe(self, session_id: str, *,
                        inline: bool = False) -> AsyncIterator[Subscription]:
        """Listen to the session's events for the ``async with`` block."""
        stream = Subscription(session_id, inline)
        self._streams.setdefault(session_id, set()).add(stream)
        try:
            yield stream
        finally:
            stream.end()
            streams = self._streams.get(session_id)
            if streams is not None:
                streams.discard(stream)
                if not streams:
                    del self._streams[session_id]

    def listeners(self, session_id: str) -> int:
        """SSE streams of the session in this process."""
        return len(self._streams.get(session_id, ()))


def make_bus(redis_url: str | None) -> EventBus:
    """The in-process bus, or with ``redis_url`` the bus shared through Redis by several
    daemons (``silica.serve.redis_bus.RedisBus``). ``SilicaError`` if the ``redis`` package
    it needs is not installed."""
    if not redis_url:
        return EventBus()
    try:
        from silica.serve.redis_bus import RedisBus
    except ImportError as exc:
        raise SilicaError(f"--redis needs the redis package, which cannot be imported "
                          f"({exc}); install it, or run one daemon without --redis") from None
    return RedisBus(redis_url)
