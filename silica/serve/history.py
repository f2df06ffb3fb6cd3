"""Sessions and their histories as the daemon's JSON: images as refs with URLs, never base64.

A content item is one of::

    {"type": "text", "text"}
    {"type": "image_ref", "image_id", "alt_text", "mime", "width", "height", "url"}
    {"type": "tool_call", "id", "name", "input"}
    {"type": "tool_result", "call_id", "name", "is_error", "content": [text/image_ref items]}

Blocks meant for the model only (``silica.blocks.for_user`` false) are left out. A turn's
status is ``running`` (its turn runs now), ``complete`` (its last message is the model's
answer, with no tool call left) or ``interrupted`` (anything else: silica stopped, the
provider failed, the turn limit was reached).
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Any

from silica.agent.conversation import Conversation, ToolResultBlock
from silica.agent.sessions import SessionInfo, title
from silica.blocks import ImageRefBlock, TextBlock, ToolCall, for_user
from silica.config import Settings, load_settings
from silica.images.store import StoreError, open_image_store

log = logging.getLogger("silica.serve")

USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def image_url(session_id: str, image_id: str) -> str:
    return f"/sessions/{session_id}/images/{image_id}"


def image_ref(block: ImageRefBlock, session_id: str) -> dict:
    ref = block.ref
    return {"type": "image_ref", "image_id": ref.id, "alt_text": block.alt,
            "mime": ref.media_type, "width": ref.width, "height": ref.height,
            "url": image_url(session_id, ref.id)}


def content_item(block: Any, session_id: str) -> dict | None:
    """One block as a content item (``None``: for the model only, or unknown)."""
    if not for_user(block):
        return None
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ImageRefBlock):
        return image_ref(block, session_id)
    if isinstance(block, ToolCall):
        return {"type": "tool_call", "id": block.id, "name": block.name,
                "input": block.arguments}
    if isinstance(block, ToolResultBlock):
        inner = [content_item(b, session_id) for b in block.content]
        return {"type": "tool_result", "call_id": block.call_id, "name": block.name,
                "is_error": block.is_error, "content": [i for i in inner if i is not None]}
    return None


def turn_statuses(conversation: Conversation, running: int | None) -> list[dict]:
    """``[{"turn", "status"}]`` for each turn, with ``usage`` (its replies' tokens added up,
    as ``turn_end`` gives them) and ``stop_reason`` (its last reply's) when the session
    recorded them; ``running``: the number of the turn that runs now (``None``: none)."""
    last: dict[int, Any] = {}
    usage: dict[int, dict[str, int]] = {}
    stopped: dict[int, str] = {}
    for message in conversation.messages:
        last[message.turn] = message
        if message.usage is not None:
            total = usage.setdefault(message.turn, dict.fromkeys(USAGE_KEYS, 0))
            for key in USAGE_KEYS:
                total[key] += message.usage.get(key, 0)
        if message.stop_reason:
            stopped[message.turn] = message.stop_reason
    out = []
    for turn, message in sorted(last.items()):
        if running is not None and turn == running:
            status = "running"
        elif message.role == "assistant" and not any(isinstance(b, ToolCall)
                                                      for b in message.content):
            status = "complete"
        else:
            status = "interrupted"
        item: dict[str, Any] = {"turn": turn, "status": status}
        if turn in usage and status != "running":
            item["usage"] = usage[turn]
            item["stop_reason"] = stopped.get(turn, "")
        out.append(item)
    return out


def history(conversation: Conversation, *, running: bool,
            running_turn: int | None = None) -> dict:
    """``GET /sessions/{sid}/history``. ``running``: a turn of the session runs now;
    ``running_turn``: its number when known (else the last turn is taken to be it)."""
    sid = conversation.id
    messages = []
    for message in conversation.messages:
        items = [content_item(b, sid) for b in message.content]
        messages.append({"role": message.role, "turn": message.turn,
                         "content": [i for i in items if i is not None]})
    if running and running_turn is None:
        running_turn = conversation.turn
    return {"session_id": sid, "title": title(conversation),
            "provider": conversation.provider, "model": conversation.model,
            "created": _when(conversation.created), "updated": _when(conversation.updated),
            "running": running, "messages": messages,
            "turns": turn_statuses(conversation, running_turn if running else None)}


def summary(info: SessionInfo, *, images: int, running: bool) -> dict:
    """One item of ``GET /sessions``."""
    item = {"id": info.id, "title": info.title, "created": _when(info.created),
            "updated": _when(info.updated), "messages": info.messages, "images": images,
            "running": running, "provider": info.provider, "model": info.model}
    if info.problem:
        item["problem"] = info.problem
    return item


def count_images(home: Path, session_id: str, settings: Settings | None = None) -> int:
    """Images the session's store holds (``ImageStore.count``: the folder's files, or the
    object store's objects); ``settings`` default to those of ``home``. Makes a request to
    an object store: call it off the event loop."""
    try:
        store = open_image_store(home, session_id, settings or load_settings(home))
    except StoreError:  # not a session name: it holds none
        return 0
    try:
        return store.count()
    except StoreError as exc:  # the object store cannot say now: none counted
        log.warning("cannot count the images of session %s: %s", session_id, exc)
        return 0


def _when(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None
