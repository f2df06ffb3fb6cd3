"""An MCP ``CallToolResult`` as silica blocks.

Every image a result holds, in whatever form, becomes an ``ImageBlock`` with the bytes and
the media type the server declared: an image content, an embedded resource whose blob is an
image, and a resource link to an image (read with ``read_resource``). The Toolbox then
sniffs, checks and fits it like any tool's image, so the bytes win over the declared type,
and an image that cannot be used becomes an ``[image dropped: ...]`` notice, never base64.
Audio, binary resources that are not images and links that are not read become short text
notices. Each block keeps the content's ``annotations.audience`` (see ``silica.blocks``).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable
from typing import Any

from silica.blocks import Audience, Block, ImageBlock, TextBlock, ToolResult, for_model
from silica.words import counted

ReadResource = Callable[[str], Awaitable[Any]]
"""Reads a resource by URI on the session that gave the result (``resources/read``): the
SDK's ``ReadResourceResult``; may raise (the server refused, the session is gone)."""

MAX_LINK_READS = 4
"""Resource links read per result; links past these are notices (a result of a thousand
links must not make a thousand requests)."""

_REASON_CHARS = 200  # of a failed read's reason, quoted in its notice


async def result_of(server: str, result: Any,
                    read_resource: ReadResource | None = None) -> ToolResult:
    """A ``CallToolResult`` as silica blocks, in order; ``isError`` becomes ``is_error``.

    - text is text; an embedded text resource is ``[resource: URI]`` and its text;
    - an image, an embedded image blob (or a blob with no type whose bytes are an image) is
      an ``ImageBlock`` of the decoded bytes and the declared type, checked later by the
      Toolbox; data that is not base64 is an ``[image dropped: ...]`` notice;
    - a resource link with an image type, or no type, is read with ``read_resource`` (the
      first ``MAX_LINK_READS`` of a result) and becomes what it holds: images, text, or a
      notice naming the URI and why it could not be read. Other links, and every link when
      ``read_resource`` is ``None``, are ``[resource link: URI]``;
    - audio, other binary resources and unknown content types are notices saying what they
      were;
    - structured content follows as JSON text unless a text block the model gets already
      holds the same JSON (servers often send both).

    Each block has its content's audience: ``("user",)`` or ``("assistant",)`` when the
    annotations name only one, else ``None``. Never raises for what the server sent.
    """
    blocks: list[Block] = []
    links = _Links(server, read_resource)
    for item in result.content or []:
        audience = _audience(item)
        if getattr(item, "type", None) == "resource_link":
            made = await links.read(item)
        else:
            made = [_block(server, item)]
        blocks.extend(b.model_copy(update={"audience": audience}) if audience else b
                      for b in made)
    structured = result.structured_content
    if structured is not None and not _already_said(structured, blocks):
        blocks.append(TextBlock(text=json.dumps(structured, ensure_ascii=False)))
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
    if kind == "resource":
        return _contents(server, item.resource)
    return TextBlock(text=f"[{kind or 'unknown'} content from {server}, not shown]")


def _contents(server: str, res: Any, link_type: str | None = None) -> Block:
    """One resource's contents (embedded, or read for a link) as a block; ``link_type`` is
    the type the link declared, used when the contents declare none."""
    text = getattr(res, "text", None)
    if isinstance(text, str):
        return TextBlock(text=f"[resource: {res.uri}]\n{text}")
    blob = getattr(res, "blob", "") or ""
    mime = getattr(res, "mime_type", None) or link_type
    if mime is None or mime.lower().startswith("image/"):
        data = _decode(blob)
        if data is None and mime is not None:
            return TextBlock(text=f"[image dropped: MCP server {server!r} sent invalid base64 "
                                  f"for {res.uri}]")
        if data is not None and (mime is not None or _looks_like_image(data)):
            # The declared type is only a hint: the Toolbox sniffs the bytes.
            return ImageBlock(media_type=mime or "", data=data)
    return TextBlock(text=f"[resource: {res.uri}, {mime or 'unknown type'}, {_size(blob)}, "
                          "not shown]")


class _Links:
    """Reads resource links for one result, at most ``MAX_LINK_READS`` of them."""

    def __init__(self, server: str, read_resource: ReadResource | None) -> None:
        self.server = server
        self.read_resource = read_resource
        self.reads = 0

    async def read(self, link: Any) -> list[Block]:
        uri = str(link.uri)
        mime = link.mime_type
        if self.read_resource is None or (mime and not mime.lower().startswith("image/")):
            return [TextBlock(text=f"[resource link: {uri}]")]
        if self.reads >= MAX_LINK_READS:
            return [TextBlock(text=f"[resource link: {uri}, not read: only the first "
                                   f"{MAX_LINK_READS} links of a result are read]")]
        self.reads += 1
        try:
            answer = await self.read_resource(uri)
            contents = list(answer.contents)
        except Exception as exc:  # a refused or failed read is this link's notice, not the call's
            return [TextBlock(text=f"[resource link: {uri}, could not be read: "
                                   f"{_reason(exc)}]")]
        if not contents:
            return [TextBlock(text=f"[resource link: {uri}, the server sent no contents]")]
        return [_contents(self.server, res, mime) for res in contents]


def _audience(item: Any) -> Audience | None:
    """``("user",)`` or ``("assistant",)`` when the annotations name only that one."""
    annotations = getattr(item, "annotations", None)
    roles = set(getattr(annotations, "audience", None) or ())
    if roles == {"user"}:
        return ("user",)
    if roles == {"assistant"}:
        return ("assistant",)
    return None


def _already_said(structured: Any, blocks: list[Block]) -> bool:
    """Whether the text blocks the model gets already hold ``structured``: one of them is its
    JSON (any formatting), or, for the SDKs' ``{"result": value}`` wrapping of a tool's plain
    return value, the value itself (a string as it is, a list as one block per item)."""
    texts = [b.text for b in blocks if isinstance(b, TextBlock) and for_model(b)]
    candidates = [structured]
    if isinstance(structured, dict) and list(structured) == ["result"]:
        candidates.append(structured["result"])
    for value in candidates:
        if any(_holds(text, value) for text in texts):
            return True
        if isinstance(value, list) and value and len(value) == len(texts) and all(
                _holds(text, item) for text, item in zip(texts, value, strict=True)):
            return True
    return False


def _holds(text: str, value: Any) -> bool:
    """Whether ``text`` is ``value``: the string itself, or JSON that parses to it."""
    if isinstance(value, str) and text == value:
        return True
    if isinstance(value, dict | list) and text.lstrip()[:1] not in "{[":
        return False  # cheap: only text that can be the JSON is parsed
    try:
        return bool(json.loads(text) == value)
    except ValueError:
        return False


def _looks_like_image(data: bytes) -> bool:
    from silica.images.sniff import sniff_media_type

    return (sniff_media_type(data) or "").startswith("image/")


def _reason(exc: BaseException) -> str:
    said = str(exc).strip() or type(exc).__name__
    return said if len(said) <= _REASON_CHARS else said[:_REASON_CHARS - 3] + "..."


def _decode(data: str) -> bytes | None:
    try:
        return base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError, TypeError, AttributeError):
        return None


def _size(data: str) -> str:
    raw = _decode(data)
    return counted(len(raw), "byte") if raw is not None else "invalid base64"
