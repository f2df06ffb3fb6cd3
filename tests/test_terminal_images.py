"""Tools that draw images with terminal graphics: what reaches the model through a call."""

from __future__ import annotations

import base64
import io
import json

from conftest import script_tool, simple_spec
from PIL import Image

from silica.blocks import ImageBlock
from silica.tools.toolbox import Toolbox


def png(size=(30, 20), color=(0, 128, 255)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def kitty_chunks(data: bytes, chunk: int = 64) -> str:
    """A chunked kitty transfer, as a tool would write it to stdout."""
    b64 = base64.b64encode(data).decode()
    parts = [b64[i:i + chunk] for i in range(0, len(b64), chunk)]
    out = []
    for i, part in enumerate(parts):
        keys = "a=T,f=100," if i == 0 else ""
        more = 1 if i < len(parts) - 1 else 0
        out.append(f"\x1b_G{keys}m={more};{part}\x1b\\")
    return "".join(out)


def emitting_tool(folder, name: str, stdout: str):
    body = f"import sys\nsys.stdout.write({stdout!r})\n"
    return script_tool(folder, f"{name}.py", simple_spec(name), body=body)


def test_kitty_image_from_a_tool_becomes_an_image_block(user_tools):
    emitting_tool(user_tools, "draw", "Here is the plot:\n" + kitty_chunks(png()) + "\nDone.\n")
    result = Toolbox().call("draw", {})
    assert not result.is_error
    assert result.text == "Here is the plot:\n\nDone.\n"
    [image] = result.images
    assert (image.media_type, image.width, image.height) == ("image/png", 30, 20)
    assert "\x1b" not in result.text


def test_iterm2_image_from_a_tool_becomes_an_image_block(user_tools):
    b64 = base64.b64encode(png((12, 7))).decode()
    emitting_tool(user_tools, "draw2", f"see\x1b]1337;File=inline=1:{b64}\x07end")
    result = Toolbox().call("draw2", {})
    [image] = result.images
    assert (image.width, image.height) == (12, 7)
    assert result.text == "seeend"


def test_kitty_and_json_images_in_one_result_keep_their_order(user_tools):
    first, second = png((10, 10), (255, 0, 0)), png((20, 10), (0, 255, 0))
    out = kitty_chunks(first) + "\n" + json.dumps({"base64": base64.b64encode(second).decode()})
    emitting_tool(user_tools, "both", out)
    result = Toolbox().call("both", {})
    assert [(i.width, i.height) for i in result.images] == [(10, 10), (20, 10)]


def test_a_broken_kitty_image_is_a_notice_never_an_image(user_tools):
    truncated = png()[:40]
    emitting_tool(user_tools, "broken", "before " + kitty_chunks(truncated) + " after")
    result = Toolbox().call("broken", {})
    assert result.images == []
    assert "[image dropped:" in result.text
    assert "before" in result.text and "after" in result.text


def test_a_huge_screenshot_is_fitted_before_it_reaches_the_model(user_tools):
    big = png((4000, 2500), (200, 200, 200))
    emitting_tool(user_tools, "shot", kitty_chunks(big, 4096))
    [image] = Toolbox().call("shot", {}).images
    assert isinstance(image, ImageBlock)
    assert max(image.width, image.height) <= 1568
    assert image.width * image.height <= 1_200_000
    with Image.open(io.BytesIO(image.data)) as decoded:
        assert decoded.size == (image.width, image.height)
