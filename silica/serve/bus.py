"""The event bus: one place a session's events go, each with an id, to every listener of it.

    bus = EventBus(home)                                # home: where images are read from
    bus.attach(sio)                                     # Socket.IO server to emit through
    await bus.publish(session_id, "text_delta", {...})  # to SSE streams and Socket.IO rooms
    async with bus.subscribe(session_id, after=key) as events:   # an SSE stream's view
        async for event, data in events: ...
    await bus.join(sio_sid, session_id, inline=False, after=key)  # a Socket.IO client's

Every event has an id (``silica.serve.eventlog``: ``MS-SEQ``, increasing), handed to
listeners as the ``event_id`` key of its data. A listener that gives ``after`` (the id of the
last event it has) first gets the session's events after it, then the live ones, with none
missed or given twice at the join; when events after it are gone it gets one ``reset``
event instead (``eventlog.reset_event``: read the history), whose ``event_id`` resumes from
there (also when it missed more than ``REPLAY_MAX``). This bus keeps each session's recent
events itself (``eventlog.Windows``); the bus
shared by several daemons (``silica.serve.redis_bus``) appends them to the session's Redis
stream and hands what it reads from there to ``deliver``, its own events included.

An event that carries images has two forms: ``data`` (refs and URLs) and ``inline`` (the same
with base64 ``image_data``, for clients that asked for ``inline_images``). Socket.IO clients
sit in room ``session:{sid}``, and in ``session:{sid}:refs`` or ``session:{sid}:inline``: an
event without an inline form goes to the first, one with both forms to the other two. Where
no inline form was given (a replay, or an event read from Redis) it is made from the image
store (``eventlog.inline_form``), off the event loop.

``publish_now`` does the same at once, without awaiting (``False``: this bus cannot, await
``publish``): a turn's pump calls it when nothing is queued before the event, so a reply's
last delta is on its way to every client before the turn's end-of-reply work runs. Each
event goes to a session's SSE streams as one ``Event``, so their transport encodes it once
for all of them (``Event.wire``).

``taps`` are functions called with ``(session_id, event, data)`` for every event handed to
this process's streams, whether or not it has any, where and in the order they get it (the
form without inline images): ``silica.serve.replay`` keeps running turns' events that way.

What callers may rely on: ``publish`` never raises for a listener that is gone or slow; a
stream that falls ``QUEUE_SIZE`` events behind is ended (its client resumes with its last
id), so a stuck client never grows the daemon's memory; ``close`` ends every stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from silica.config import Settings
from silica.errors import SilicaError
from silica.serve.eventlog import (
    IMAGE_EVENTS,
    ZERO,
    IdClock,
    Key,
    Span,
    Windows,
    format_id,
    inline_form,
    must_reset,
    parse_id,
    reset_event,
)

log = logging.getLogger("silica.serve")

NAMESPACE = "/events"
QUEUE_SIZE = 5000  # events a stream may fall behind before it is ended
REPLAY_MAX = QUEUE_SIZE // 2  # events a resuming stream is given; more missed: a reset
_END = ("", None)

Entry = tuple[Key, str, dict]  # (id, event, data without its id)


def room(session_id: str, form: str = "") -> str:
    """The Socket.IO room of a session's listeners (``form``: ``refs`` or ``inline``)."""
    return f"session:{session_id}:{form}" if form else f"session:{session_id}"


class Event(tuple):
    """``(event, data)`` as handed to every SSE stream of a session, ``key`` its id (``None``:
    a ``reset``, which no id filter drops); ``wire`` keeps what the transport made of it
    (``encoded``), so the other streams reuse the bytes."""

    wire: bytes | None = None
    key: Key | None = None

    def __new__(cls, event: str, data: Any, key: Key | None = None) -> Event:
        made = super().__new__(cls, (event, data))
        made.key = key
        return made

    def encoded(self, encode: Callable[[str, Any], bytes]) -> bytes:
        """``encode(event, data)``, made once for all the streams this event went to."""
        if self.wire is None:
            self.wire = encode(*self)
        return self.wire


class Subscription:
    """One stream's events: iterate for ``(event, data)``; ends when the bus closes or the
    stream fell too far behind (``lagged``). ``last`` is the id of the newest event it was
    given: an event not after it is one it has, and is dropped."""

    def __init__(self, session_id: str, inline: bool) -> None:
        self.session_id, self.inline = session_id, inline
        self.queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(QUEUE_SIZE)
        self.lagged = False
        self.ended = False
        self.last: Key | None = None
        self.held: list[Event] | None = []  # live events that came while it caught up

    def put(self, event: str, data: Any) -> None:
        self.put_event(Event(event, data))

    def put_event(self, item: Event) -> None:
        if self.ended:
            return
        if self.held is not None:
            self.held.append(item)
            if len(self.held) > QUEUE_SIZE:
                self.held = None
                self._lag()
            return
        key = item.key
        if key is not None:
            if self.last is not None and key <= self.last:
                return  # given already (by the replay)
            self.last = key
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:  # the client stopped reading: what it missed is gone
            self._lag()

    def release(self, replay: list[Event], floor: Key | None) -> None:
        """End the catch-up: ``replay`` (the events after the client's id), then what came
        meanwhile and is newer, then live events as they come. ``floor``: the id the
        client has every event up to."""
        held, self.held = self.held or [], None
        if floor is not None and (self.last is None or floor > self.last):
            self.last = floor
        for item in [*replay, *held]:
            self.put_event(item)

    def _lag(self) -> None:
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

    def ready(self) -> list[Event]:
        """The events queued now, taken without waiting (stops at the end)."""
        out = []
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if item is _END:
                self.queue.put_nowait(_END)
                break
            out.append(item if isinstance(item, Event) else Event(*item))
        return out

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
    """In-process fan-out with ids and a window per session (see the module docstring)."""

    shared = False  # True: events come back through a reader, for watched sessions only

    def __init__(self, home: Path | None = None, settings: Settings | None = None) -> None:
        self.home, self.settings = home, settings
        self.sio: Any = None
        self._streams: dict[str, set[Subscription]] = {}
        self.taps: list[Callable[[str, str, Any], None]] = []
        self.ids = IdClock()
        self.windows = Windows()

    # -- wiring -------------------------------------------------------------------------

    def attach(self, sio: Any) -> None:
        """Emit Socket.IO events through ``sio`` (a ``socketio.AsyncServer`` whose manager
        has ``emit_now``: ``silica.serve.sio.LocalManager``)."""
        self.sio = sio

    async def start(self) -> None:
        """Begin (a shared bus connects here)."""

    async def close(self) -> None:
        """End every stream."""
        for streams in list(self._streams.values()):
            for stream in list(streams):
                stream.end()

    # -- publishing -----------------------------------------------------------------------

    def wants_inline(self, session_id: str) -> bool:
        """Whether the publisher should make the inline form of the session's image events
        (a listener here asked for inline images)."""
        return self.inline_here(session_id)

    def inline_here(self, session_id: str) -> bool:
        """Whether a listener of the session in this process asked for inline images."""
        if any(s.inline for s in self._streams.get(session_id, ())):
            return True
        return bool(self._members(room(session_id, "inline")))

    async def publish(self, session_id: str, event: str, data: dict,
                      inline: dict | None = None) -> None:
        """Send ``event`` to every listener of the session, ``inline`` to those that asked
        for inline images (``None``: ``data`` is the only form)."""
        self._record(session_id, event, data, inline)

    def publish_now(self, session_id: str, event: str, data: dict,
                    inline: dict | None = None) -> bool:
        """``publish`` at once, without awaiting; ``False``, with nothing sent, when this bus
        cannot (the caller awaits ``publish`` instead)."""
        self._record(session_id, event, data, inline)
        return True

    def _record(self, session_id: str, event: str, data: dict, inline: dict | None) -> None:
        """Give the event its id, keep it in the session's window and deliver it."""
        event_id = self.ids.next()
        self.windows.add(session_id, self.ids.last, event, data)
        self.deliver(session_id, event_id, event, data, inline)

    # -- delivering -----------------------------------------------------------------------

    def deliver(self, session_id: str, event_id: str, event: str, data: dict,
                inline: dict | None = None) -> None:
        """Hand an event to this process's listeners of the session (and its taps)."""
        plain = {**data, "event_id": event_id}
        full = None if inline is None else {**inline, "event_id": event_id}
        self.tap(session_id, event, plain)
        key = parse_id(event_id)
        streams = self._streams.get(session_id)
        if streams:
            item = Event(event, plain, key)
            both = item if full is None else Event(event, full, key)
            for stream in list(streams):
                stream.put_event(both if stream.inline else item)
        if full is None:
            self.emit_now(event, plain, room(session_id))
        else:
            self.emit_now(event, plain, room(session_id, "refs"))
            self.emit_now(event, full, room(session_id, "inline"))

    def emit_now(self, event: str, data: dict, room_name: str) -> None:
        """To the Socket.IO clients of a room (or one client: its sid), queued at once."""
        emit_now = getattr(getattr(self.sio, "manager", None), "emit_now", None)
        if emit_now is None:
            return
        try:
            emit_now(event, data, NAMESPACE, room_name)
        except Exception:  # a transport's failure must not reach the turn
            log.warning("could not send a %s event to Socket.IO clients", event, exc_info=True)

    def tap(self, session_id: str, event: str, data: Any) -> None:
        """Hand an event to the taps; one that fails is logged, never raised."""
        for tap in self.taps:
            try:
                tap(session_id, event, data)
            except Exception:
                log.warning("a tap failed on a %s event", event, exc_info=True)

    # -- listening ------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def subscribe(self, session_id: str, *, inline: bool = False,
                        after: Key | str | None = None) -> AsyncIterator[Subscription]:
        """Listen to the session's events for the ``async with`` block: those after the id
        ``after`` (``(ms, seq)`` or its text) first (or a ``reset``), then the live ones.
        ``ValueError`` for a text that is not an event id."""
        if isinstance(after, str):
            key = parse_id(after)
            if key is None:
                raise ValueError(f"not an event id: {after[:50]!r}")
            after = key
        stream = Subscription(session_id, inline)
        self._streams.setdefault(session_id, set()).add(stream)
        try:
            await self._catch_up(stream, after)
            yield stream
        finally:
            stream.end()
            streams = self._streams.get(session_id)
            if streams is not None:
                streams.discard(stream)
                if not streams:
                    del self._streams[session_id]

    async def join(self, sio_sid: str, session_id: str, *, inline: bool = False,
                   after: Key | None = None) -> None:
        """Put a Socket.IO client in the session's rooms, first sending it the events after
        ``after`` (as ``subscribe``), with none missed or repeated at the join."""
        async with self.subscribe(session_id, inline=inline, after=after) as stream:
            # nothing awaited from here on: no event can fall between the replay and the room
            for event, data in stream.ready():
                self.emit_now(event, data, sio_sid)
            manager = self.sio.manager
            if not manager.is_connected(sio_sid, NAMESPACE):
                return  # gone while it caught up
            manager.basic_enter_room(sio_sid, NAMESPACE, room(session_id))
            manager.basic_enter_room(sio_sid, NAMESPACE,
                                     room(session_id, "inline" if inline else "refs"))

    async def _catch_up(self, stream: Subscription, after: Key | None) -> None:
        sid = stream.session_id
        entries, floor, reset = await self.replay(sid, after)
        if len(entries) > REPLAY_MAX:  # more than its queue should take at once: read the history
            entries, floor, reset = [], entries[-1][0], True
        items: list[Event] = []
        if reset:
            items.append(Event("reset", {**reset_event(sid),
                                         "event_id": format_id(floor or ZERO)}))
        for key, event, data in entries:
            plain = {**data, "event_id": format_id(key)}
            form = plain
            if stream.inline and event in IMAGE_EVENTS:
                made: dict | None = await asyncio.to_thread(inline_form, self.home,
                                                            self.settings, sid, event, plain)
                form = made or plain
            items.append(Event(event, form, key))
        stream.release(items, floor)
        self.watching(sid, stream.last)

    async def replay(self, session_id: str, after: Key | None, *,
                     limit: int | None = REPLAY_MAX) -> tuple[list[Entry], Key | None, bool]:
        """``(entries, floor, reset)``: the session's events after ``after`` (none when it
        is ``None``: live only), the id a listener has everything up to once given them,
        and whether events after ``after`` are gone (then no entries: a ``reset``).
        ``limit``: more than that many entries may be left out (the caller resets)."""
        window = self.windows.get(session_id)
        span = window.span() if window is not None else Span(None, None)
        if after is None:
            return [], span.last, False
        if must_reset(after, span):
            return [], span.last, True
        assert window is not None  # a span with events
        return window.after(after), after, False

    def published(self, session_id: str) -> Key | None:
        """The id of the last event of the session this process published (``None``: not
        known)."""
        window = self.windows.get(session_id)
        return window.span().last if window is not None else None

    async def recent(self, session_id: str) -> list[Entry]:
        """The session's events kept now, oldest first."""
        window = self.windows.get(session_id)
        return list(window.entries) if window is not None else []

    def watching(self, session_id: str, last: Key | None) -> None:
        """A listener of the session here has every event up to ``last`` (a shared bus
        starts reading the session's stream from there)."""

    def watched(self, session_id: str) -> bool:
        """Whether the session has a listener here (an SSE stream or a Socket.IO client)."""
        return bool(self._streams.get(session_id)) or bool(self._members(room(session_id)))

    def _members(self, room_name: str) -> Any:
        if self.sio is None:
            return None
        try:
            return self.sio.manager.rooms.get(NAMESPACE, {}).get(room_name)
        except AttributeError:
            return None

    def listeners(self, session_id: str) -> int:
        """SSE streams of the session in this process."""
        return len(self._streams.get(session_id, ()))


async def turn_start(bus: EventBus, session_id: str) -> tuple[Key, str] | None:
    """The id and turn id of the session's running turn's ``message`` event, from the events
    kept (``None``: the last turn kept has ended, or none is kept)."""
    ended: set[str] = set()
    for key, event, data in reversed(await bus.recent(session_id)):
        turn_id = data.get("turn_id")
        if event == "turn_end" and isinstance(turn_id, str):
            ended.add(turn_id)
        elif event == "message" and isinstance(turn_id, str):
            return None if turn_id in ended else (key, turn_id)
    return None


def make_bus(redis_url: str | None, home: Path | None = None,
             settings: Settings | None = None) -> EventBus:
    """The in-process bus, or with ``redis_url`` the bus shared through Redis by several
    daemons and workers (``silica.serve.redis_bus.RedisBus``); ``home`` and ``settings``:
    where the images of inline forms are read (its image store). ``SilicaError`` if the
    ``redis`` package it needs is not installed, or Redis cannot be reached."""
    if not redis_url:
        return EventBus(home, settings)
    try:
        from silica.serve.redis_bus import RedisBus
    except ImportError as exc:
        raise SilicaError(f"--redis needs the redis package, which cannot be imported "
                          f"({exc}); install it, or run one daemon without --redis") from None
    return RedisBus(redis_url, home, settings)
