"""``GET /sessions/{sid}/events``: a session's events as server-sent events.

Each event is ``event: <name>\\ndata: <json>\\n\\n`` (the JSON on one line). The stream opens
with the comment ``: ready`` once it is subscribed (events from then on reach it), and a
``: ping`` comment every ``PING_EVERY`` seconds keeps proxies from closing it. It ends when
the client goes away, when the daemon stops, or when the client fell ``bus.QUEUE_SIZE`` events
behind (it then reconnects and reads the history). ``?inline_images=true`` adds
``image_data`` and ``image_mime`` to ``tool_result`` and ``image`` events.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from starlette.responses import StreamingResponse

from silica.serve.bus import Event, EventBus

PING_EVERY = 15.0
HEADERS = {"Cache-Control": "no-cache, no-store", "X-Accel-Buffering": "no",
           "Connection": "keep-alive"}


def encode(event: str, data: object) -> bytes:
    """One server-sent event (JSON escapes every line break, so ``data`` is one line)."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def event_stream(bus: EventBus, session_id: str, *, inline: bool = False) -> StreamingResponse:
    return StreamingResponse(_events(bus, session_id, inline), media_type="text/event-stream",
                             headers=HEADERS)


async def _events(bus: EventBus, session_id: str, inline: bool) -> AsyncIterator[bytes]:
    async with bus.subscribe(session_id, inline=inline) as stream:
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
