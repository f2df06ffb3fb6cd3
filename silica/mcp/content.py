"""An MCP ``CallToolResult`` as silica blocks.

Images in results become ``ImageBlock``s with the bytes and media type as the server sent
them: the Toolbox sniffs, checks and fits them like any tool's image. Audio, resource links
and binary resources become short text notices.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable
from typing import Any

from silica.blocks import Block, ImageBlock, TextBlock, ToolResult

ReadResource = Callable[[str], Awaitable[Any]]
"""Reads a resource by URI on the session that gave the result (``resources/read``)."""


async def result_of(server: str, result: Any,
                    read_resource: ReadResource | None = None) -> ToolResult:
    """A ``CallToolResult`` as silica blocks, in order; ``isError`` becomes ``is_error``.

    Text is text; images are ``ImageBlock``s of the decoded bytes and the declared type
    (checked later, by the Toolbox); audio, resource links and binary resources are notices;
    an embedded text resource is passed as text. A result with only structured content
    gives that content as JSON text.
    """
    blocks: list[Block] = []
    for item in result.content or []:
        blocks.append(_block(server, item))
    if not blocks and result.structured_content is not None:
        blocks.append(TextBlock(text=json.dumps(result.structured_content, ensure_ascii=False)))
    return ToolResult(blocks=blocks, is_error=bool(result.is_error))


def _block(server: str, item: Any) -> Block:
    kind = getattr(item, "type", None)
    if kind == "text":
        return TextBlock(text=item.text)
    if kind == "image":
        data = _decode(item.data)
        if data is None:
            return TextBlock(text=f"[image dropped: MCP server {server!r} sent invalid base64]")
        return ImageBlock(media_type=item.mime_type or "", data=data)
    if kind == "audio":
        size = _size(item.data)
        return TextBlock(text=f"[audio from {server}: {item.mime_type}, {size}, not shown]")
    if kind == "resource_link":
        return TextBlock(text=f"[resource link: {item.uri}]")
    if kind == "resource":
        res = item.resource
        text = getattr(res, "text", None)
        if isinstance(text, str):
            return TextBlock(text=f"[resource: {res.uri}]\n{text}")
        blob = getattr(res, "blob", "") or ""
        mime = res.mime_type or "unknown type"
        if mime.startswith("image/") and (data := _decode(blob)) is not None:
            return ImageBlock(media_type=mime, data=data)
        return TextBlock(text=f"[resource: {res.uri}, {mime}, {_size(blob)}, not shown]")
    return TextBlock(text=f"[{kind or 'unknown'} content from {server}, not shown]")


def _decode(data: str) -> bytes | None:
    try:
        return base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError, TypeError, AttributeError):
        return None


def _size(data: str) -> str:
    raw = _decode(data)
    return f"{len(raw)} bytes" if raw is not None else "invalid base64"
