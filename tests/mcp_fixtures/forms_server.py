"""A small MCP server (stdio, official SDK) with one tool per form of content a result may
take: an image, an embedded image blob, links to image resources (one there, one missing, one
text), wrong types and corrupt bytes, structured content with and without its JSON as text,
and content annotated for the user only or the assistant only.

Run as ``python forms_server.py`` (stdio). The resources ``forms://chart.png`` (a PNG blob)
and ``forms://notes.txt`` (text) are what the links point to.
"""

from __future__ import annotations

import base64
import io
import json

from mcp.server.mcpserver import MCPServer
from mcp_types import (
    Annotations,
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from PIL import Image

server = MCPServer("forms")

CHART = {"values": [3, 1, 4], "unit": "kg"}


def _image(fmt: str, size=(64, 48), color=(30, 160, 90)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format=fmt)
    return buf.getvalue()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _result(*content, structured=None) -> CallToolResult:
    return CallToolResult(content=list(content), structured_content=structured)


@server.resource("forms://chart.png", mime_type="image/png")
def chart_png() -> bytes:
    return _image("PNG", (40, 30), (10, 20, 200))


@server.resource("forms://notes.txt", mime_type="text/plain")
def notes_txt() -> str:
    return "the notes say hi"


@server.tool()
def image() -> CallToolResult:
    """A PNG as image content."""
    return _result(ImageContent(type="image", data=_b64(_image("PNG")), mime_type="image/png"))


@server.tool()
def embedded_image() -> CallToolResult:
    """A PNG as an embedded resource's blob."""
    return _result(EmbeddedResource(type="resource", resource=BlobResourceContents(
        uri="forms://embedded.png", mime_type="image/png", blob=_b64(_image("PNG", (32, 32))))))


@server.tool()
def linked_image() -> CallToolResult:
    """A link to forms://chart.png, and one to a resource that is not there."""
    return _result(
        ResourceLink(type="resource_link", name="chart", uri="forms://chart.png",
                     mime_type="image/png"),
        ResourceLink(type="resource_link", name="gone", uri="forms://missing.png",
                     mime_type="image/png"))


@server.tool()
def jpeg_as_png() -> CallToolResult:
    """A JPEG that claims to be a PNG."""
    return _result(ImageContent(type="image", data=_b64(_image("JPEG")), mime_type="image/png"))


@server.tool()
def corrupt() -> CallToolResult:
    """The first 60 bytes of a PNG, as image content and as an embedded blob."""
    cut = _b64(_image("PNG")[:60])
    return _result(ImageContent(type="image", data=cut, mime_type="image/png"),
                   EmbeddedResource(type="resource", resource=BlobResourceContents(
                       uri="forms://cut.png", mime_type="image/png", blob=cut)))


@server.tool()
def structured_twice() -> CallToolResult:
    """Structured content and the same JSON as text, as servers often send."""
    return _result(TextContent(type="text", text=json.dumps(CHART, indent=2)),
                   structured=CHART)


@server.tool()
def structured_and_image() -> CallToolResult:
    """Words, an image, and structured content that says more."""
    return _result(TextContent(type="text", text="the chart"),
                   ImageContent(type="image", data=_b64(_image("PNG")), mime_type="image/png"),
                   structured=CHART)


@server.tool()
def interleaved() -> CallToolResult:
    """Words, an image, more words: in this order."""
    return _result(TextContent(type="text", text="before the chart"),
                   ImageContent(type="image", data=_b64(_image("PNG")), mime_type="image/png"),
                   TextContent(type="text", text="after the chart"))


@server.tool()
def mixed() -> CallToolResult:
    """Every kind of content, kinds alternating: the order a host must keep."""
    return _result(
        TextContent(type="text", text="one: words"),
        ImageContent(type="image", data=_b64(_image("PNG", (16, 8))), mime_type="image/png"),
        EmbeddedResource(type="resource", resource=TextResourceContents(
            uri="forms://inline.txt", mime_type="text/plain", text="three: embedded text")),
        EmbeddedResource(type="resource", resource=BlobResourceContents(
            uri="forms://inline.png", mime_type="image/png",
            blob=_b64(_image("PNG", (8, 16))))),
        ResourceLink(type="resource_link", name="notes", uri="forms://notes.txt",
                     mime_type="text/plain"),
        AudioContent(type="audio", data=_b64(b"RIFF" + bytes(60)), mime_type="audio/wav"),
        ResourceLink(type="resource_link", name="chart", uri="forms://chart.png",
                     mime_type="image/png"),
        TextContent(type="text", text="eight: last words"))


@server.tool()
def audiences() -> CallToolResult:
    """Text for both, text and an image for the user only, text for the assistant only."""
    user = Annotations(audience=["user"])
    return _result(
        TextContent(type="text", text="for both"),
        TextContent(type="text", text="for the user only", annotations=user),
        ImageContent(type="image", data=_b64(_image("PNG", (20, 10))), mime_type="image/png",
                     annotations=user),
        TextContent(type="text", text="for the assistant only",
                    annotations=Annotations(audience=["assistant"])))


@server.tool()
def audio() -> CallToolResult:
    """A little audio."""
    return _result(AudioContent(type="audio", data=_b64(b"RIFF" + bytes(60)),
                                mime_type="audio/wav"))


if __name__ == "__main__":
    server.run()
