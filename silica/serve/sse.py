"""``GET /sessions/{sid}/events``: a session's events as server-sent events.

Each event is ``id: <event id>\\nevent: <name>\\ndata: <json>\\n\\n`` (the JSON on one line,
with the id again as ``event_id``). The stream opens with the comment ``: ready`` once it is
subscribed (events from then on reach it), and a ``: ping`` comment every ``PING_EVERY``
seconds keeps proxies from closing it. It ends when the client goes away, when the daemon
stops, or when the client fell ``bus.QUEUE_SIZE`` events behind (it then resumes).
``?inline_images=true`` adds ``image_data`` and ``image_mime`` to ``tool_result`` and
``image`` events.

A client resumes after the last event it has: the ``Last-Event-ID`` header (what a browser's
``EventSource`` sends when it reconnects) or ``?after=ID`` (the header wins) gives the
events after it, then the live ones, none missed or given twice; when those events are no
longer kept it gets one ``reset`` event (read the history, then go on from its id).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import StreamingResponse

from silica.serve.bus import Event, EventBus
from silica.serve.errors import ApiError
from silica.serve.eventlog import Key, parse_id

PING_EVERY = 15.0
HEADERS = {"Cache-Control": "no-cache, no-store", "X-Accel-Buffering": "no",
           "Connection": "keep-alive"}


def encode(event: str, data: object) -> bytes:
    """One server-sent event (JSON escapes every line break, so ``data`` is one line), with
    its ``id:`` line when it has an ``event_id``."""
    event_id = data.get("event_id") if isinstance(data, dict) else None
    head = f"id: {event_id}\n" if isinstance(event_id, str) else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def resume_point(request: Request) -> Key | None:
    """The id a client resumes after (``Last-Event-ID``, else ``?after``); ``None``: live
    only. ``ApiError`` 400 for a value that is not an event id."""
    given = (request.headers.get("last-event-id") or request.query_params.get("after")
             or "").strip()
    if not given:  # blank: none
        return None
    key = parse_id(given)
    if key is None:
        raise ApiError(400, "invalid_event_id", "Last-Event-ID (or ?after) must be the id of "
                       'an event, as its "id:" line gives it, like 1764230000000-0')
    return key


def event_stream(bus: EventBus, session_id: str, *, inline: bool = False,
                 after: Key | None = None) -> StreamingResponse:
    return StreamingResponse(_events(bus, session_id, inline, after),
                             media_type="text/event-stream", headers=HEADERS)


async def _events(bus: EventBus, session_id: str, inline: bool,
                  after: Key | None) -> AsyncIterator[bytes]:
    async with bus.subscribe(session_id, inline=inline, after=after) as stream:
        yield b": ready\n\n"
        while True:
            try:
                item = await stream.next(PING_EVERY)
            except StopAsyncIteration:
                return
            if item is None:
                yield b": ping\n\n"
            else:  # encoded once for all the session's streams
                yield item.encoded(encode) if isinstance(item, Event) else encode(*item)
