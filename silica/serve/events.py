"""A turn's ``AgentEvents`` as bus events, in order.

    pump = Pump(bus, session_id)                   # one per session
    agent.listen(agent_events(pump, bus, session_id, turn_id))

``text_delta`` ``{turn_id, text}``, ``tool_call`` ``{turn_id, call_id, name, input}``,
``tool_result`` ``{turn_id, call_id, name, is_error, text, images: [{image_id, mime, width,
height, url}]}``, then one ``image`` ``{turn_id, call_id, image_id, mime, width, height, alt,
source, url}`` per image of the result, and ``tool_note`` ``{turn_id, call_id, name, text}``.
Only what is for the person (``silica.blocks.for_user``) and kept in the store is shown.
When a listener asked for inline images (``bus.wants_inline``), ``tool_result`` and ``image``
also get an inline form with ``image_data`` (base64) and ``image_mime``.

A ``Pump`` publishes a session's events one after another in the order they were put, so
the agent's callbacks (which cannot wait) never block on a slow listener, and every listener
sees the events in the order they happened. An event put when nothing is queued before it
is published at once (``EventBus.publish_now``), so it is on its way to every client before
the agent goes on (with a reply's last delta: before the end of the reply is handled).
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
from pathlib import Path

from silica.agent.loop import AgentEvents
from silica.blocks import ImageBlock, ImageRefBlock, TextBlock, ToolCall, ToolResult, for_user
from silica.serve.bus import EventBus
from silica.serve.history import image_url

log = logging.getLogger("silica.serve")

MAX_EVENT_TEXT = 50_000  # characters of a tool's text in a tool_result event (all in history)


class Pump:
    """A session's events, published one after another in the order they were put."""

    def __init__(self, bus: EventBus, session_id: str) -> None:
        self.bus, self.session_id = bus, session_id
        self.queue: collections.deque[tuple[str, dict, dict | None]] = collections.deque()
        self.idle = asyncio.Event()
        self.idle.set()
        self.task: asyncio.Task | None = None

    def put(self, event: str, data: dict, inline: dict | None = None) -> None:
        if not self.queue and (self.task is None or self.task.done()):
            try:
                if self.bus.publish_now(self.session_id, event, data, inline):
                    return  # nothing before it: on its way to every client now
            except Exception:  # a listener's failure must not reach the turn
                log.warning("could not publish a %s event", event, exc_info=True)
                return
        self.queue.append((event, data, inline))
        self.idle.clear()
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while self.queue:
            event, data, inline = self.queue.popleft()
            try:
                await self.bus.publish(self.session_id, event, data, inline)
            except Exception:  # a listener's failure must not stop the others
                log.warning("could not publish a %s event", event, exc_info=True)
        self.idle.set()

    async def drain(self) -> None:
        """Wait until every event put so far is published."""
        await self.idle.wait()


def agent_events(pump: Pump, bus: EventBus, session_id: str, turn_id: str) -> AgentEvents:
    """The callbacks that make one turn's events (see the module docstring)."""
    sid, tid = session_id, turn_id

    def on_text(piece: str) -> None:
        if piece:
            pump.put("text_delta", {"turn_id": tid, "text": piece})

    def on_tool_call(call: ToolCall) -> None:
        pump.put("tool_call", {"turn_id": tid, "call_id": call.id, "name": call.name,
                               "input": call.arguments})

    def on_tool_result(call: ToolCall, result: ToolResult, paths: list[Path | None]) -> None:
        inline = bus.wants_inline(sid)
        shown = [(image, path) for image, path in zip(result.images, paths, strict=False)
                 if path is not None and for_user(image)]
        images = [image_item(image, sid, image_id=path.stem) for image, path in shown]
        data = {"turn_id": tid, "call_id": call.id, "name": call.name,
                "is_error": result.is_error, "text": shown_text(result), "images": images}
        full = None
        if inline:
            full = {**data, "images": [
                {**item, "image_data": image.base64, "image_mime": image.media_type}
                for item, (image, _) in zip(images, shown, strict=True)]}
        pump.put("tool_result", data, full)
        for item, (image, _) in zip(images, shown, strict=True):
            one = {"turn_id": tid, "call_id": call.id, "image_id": item["image_id"],
                   "mime": item["mime"], "width": item["width"], "height": item["height"],
                   "alt": call.name, "source": image.source, "url": item["url"]}
            pump.put("image", one, {**one, "image_data": image.base64,
                                    "image_mime": image.media_type} if inline else None)

    def on_tool_note(call: ToolCall, note: str) -> None:
        pump.put("tool_note", {"turn_id": tid, "call_id": call.id, "name": call.name,
                               "text": note})

    return AgentEvents(on_text=on_text, on_tool_call=on_tool_call,
                       on_tool_result=on_tool_result, on_tool_note=on_tool_note)


def image_item(image: ImageBlock | ImageRefBlock, session_id: str, *,
                image_id: str | None = None, name: str | None = None) -> dict:
    """``{image_id, mime, width, height, url}`` (and ``name``) of an image or a ref."""
    if isinstance(image, ImageRefBlock):
        ref = image.ref
        item = {"image_id": ref.id, "mime": ref.media_type, "width": ref.width,
                "height": ref.height}
    else:
        item = {"image_id": image_id or hashlib.sha256(image.data).hexdigest(),
                "mime": image.media_type, "width": image.width, "height": image.height}
    item["url"] = image_url(session_id, str(item["image_id"]))
    if name is not None:
        item["name"] = name
    return item


def shown_text(result: ToolResult) -> str:
    text = "\n".join(b.text for b in result.blocks
                     if isinstance(b, TextBlock) and for_user(b))
    if len(text) > MAX_EVENT_TEXT:
        more = len(text) - MAX_EVENT_TEXT
        text = (text[:MAX_EVENT_TEXT] + f"\n[… {more:,} more characters: the model got the "
                "head and tail, and the session keeps the whole output]")
    return text
