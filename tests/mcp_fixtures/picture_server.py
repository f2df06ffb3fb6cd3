"""A small MCP server (stdio, official SDK) whose tools return every kind of content.

Run as ``python picture_server.py`` (stdio), or ``python picture_server.py --http PORT``
(streamable HTTP on 127.0.0.1:PORT, path ``/mcp``). Each tool returns one kind of result a
real server may send, good or bad: text, a PNG, a JPEG labelled PNG, truncated PNG bytes,
invalid base64, audio, a resource link, an embedded resource, an error, a crash mid-call.
"""

from __future__ import annotations

import base64
import io
import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp_types import (
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from PIL import Image

server = MCPServer("pictures")


def _image(fmt: str, size=(120, 80), color=(30, 160, 90)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format=fmt)
    return buf.getvalue()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _result(*content, is_error: bool = False) -> CallToolResult:
    return CallToolResult(content=list(content), is_error=is_error)


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return f"echo: {text}"


@server.tool()
def png() -> CallToolResult:
    """A green PNG, 120x80."""
    return _result(TextContent(type="text", text="here is a PNG"),
                   ImageContent(type="image", data=_b64(_image("PNG")), mime_type="image/png"))


@server.tool()
def jpeg_as_png() -> CallToolResult:
    """A JPEG that claims to be a PNG."""
    data = _image("JPEG", (90, 60), (200, 40, 40))
    return _result(ImageContent(type="image", data=_b64(data), mime_type="image/png"))


@server.tool()
def broken_png() -> CallToolResult:
    """The first 60 bytes of a PNG, labelled image/png."""
    return _result(ImageContent(type="image", data=_b64(_image("PNG")[:60]),
                                mime_type="image/png"))


@server.tool()
def bad_base64() -> CallToolResult:
    """An image whose data is not base64."""
    return _result(ImageContent(type="image", data="this is *not* base64!", mime_type="image/png"))


@server.tool()
def audio() -> CallToolResult:
    """One kilobyte of audio."""
    return _result(AudioContent(type="audio", data=_b64(b"RIFF" + bytes(1020)),
                                mime_type="audio/wav"))


@server.tool()
def resource_link() -> CallToolResult:
    """A link to a resource, and an embedded text resource."""
    return _result(
        ResourceLink(type="resource_link", name="report", uri="file:///srv/report.pdf",
                     mime_type="application/pdf"),
        EmbeddedResource(type="resource", resource=TextResourceContents(
            uri="file:///srv/notes.txt", mime_type="text/plain", text="the notes say hi")))


@server.tool()
def fail() -> CallToolResult:
    """A result flagged as an error."""
    return _result(TextContent(type="text", text="no such city: Atlantis"), is_error=True)


@server.tool()
def crash() -> str:
    """The server process dies in the middle of the call."""
    print("crashing on purpose", file=sys.stderr, flush=True)
    os._exit(3)


@server.tool()
def sleep(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "awake"


if __name__ == "__main__":
    if "--http" in sys.argv:
        server.run("streamable-http", port=int(sys.argv[sys.argv.index("--http") + 1]))
    else:
        server.run()
