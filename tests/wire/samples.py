"""Requests worth sending: real PNGs, and a turn holding every kind of block."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

from PIL import Image

from silica.agent.conversation import ToolCall
from silica.blocks import ImageBlock, TextBlock
from silica.providers.base import Request, RequestMessage, RequestToolResult

SCREENSHOT_TOOL = {
    "name": "screenshot",
    "description": "Take a screenshot of a web page.",
    "input_schema": {"type": "object", "properties": {"url": {"type": "string"}},
                     "required": ["url"]},
}


def png(width: int = 4, height: int = 3, color: tuple[int, int, int] = (255, 0, 0)) -> bytes:
    """A real PNG made with Pillow."""
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, format="PNG")
    return out.getvalue()


def png_block(width: int = 4, height: int = 3,
              color: tuple[int, int, int] = (255, 0, 0)) -> ImageBlock:
    return ImageBlock(media_type="image/png", data=png(width, height, color), width=width,
                      height=height)


USER_IMAGE = png_block(4, 3, (255, 0, 0))
TOOL_IMAGE = png_block(5, 2, (0, 0, 255))


def sample_request(model: str) -> Request:
    """A user text + image, an assistant tool call, and a tool result with text + image."""
    return Request(
        model=model,
        system="You are a careful test assistant.",
        tools=[SCREENSHOT_TOOL],
        max_tokens=256,
        messages=[
            RequestMessage(role="user", content=[TextBlock(text="What is on the page?"),
                                                 USER_IMAGE]),
            RequestMessage(role="assistant", content=[
                TextBlock(text="Let me look."),
                ToolCall(id="call_1", name="screenshot", arguments={"url": "http://x.test"}),
            ]),
            RequestMessage(role="user", content=[
                RequestToolResult(call_id="call_1", name="screenshot",
                                  content=[TextBlock(text="captured 5x2"), TOOL_IMAGE]),
            ]),
        ],
    )


def text_request(model: str, text: str = "Hello") -> Request:
    return Request(model=model, messages=[RequestMessage(role="user",
                                                         content=[TextBlock(text=text)])])


def b64decode(data: str) -> bytes:
    return base64.b64decode(data, validate=True)


def holds_image(body: Any) -> bool:
    """Whether a request body carries any image in any provider's form."""
    text = json.dumps(body)
    b64s = (USER_IMAGE.base64, TOOL_IMAGE.base64)
    return any(b in text for b in b64s) or '"image_url"' in text or '"type": "image"' in text
