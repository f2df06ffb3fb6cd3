"""Images in the terminal: when silica draws them inline, and what it sends to draw them."""

from __future__ import annotations

import io
import re

import pytest
from PIL import Image

from silica.blocks import ImageBlock, TextBlock, ToolResult
from silica.cli.show import show_result
from silica.cli.terminal import CHUNK, kitty_image, kitty_supported
from silica.results.kitty import extract_kitty


def encoded(img: Image.Image, fmt: str) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return buf.getvalue()


def noise(size: tuple[int, int]) -> Image.Image:
    """An image that does not compress, so its PNG needs many chunks."""
    import random

    rng = random.Random(7)
    img = Image.new("RGB", size)
    img.putdata([(rng.randrange(256), rng.randrange(256), rng.randrange(256))
                 for _ in range(size[0] * size[1])])
    return img


@pytest.mark.parametrize(
    ("environ", "isatty", "expected"),
    [
        ({"TERM": "xterm-kitty"}, True, True),
        ({"TERM": "xterm-kitty"}, False, False),
        ({"TERM": "xterm-256color", "KITTY_WINDOW_ID": "3"}, True, True),
        ({"TERM": "xterm-256color", "TERM_PROGRAM": "WezTerm"}, True, True),
        ({"TERM": "xterm-ghostty", "TERM_PROGRAM": "ghostty"}, True, True),
        ({"TERM": "xterm-256color", "TERM_PROGRAM": "iTerm.app"}, True, False),
        ({"TERM": "xterm-256color"}, True, False),
        ({}, True, False),
        ({"TERM": "tmux-256color", "KITTY_WINDOW_ID": "3", "TMUX": "/tmp/t,1,0"}, True, False),
        ({"TERM": "xterm-kitty", "SILICA_INLINE_IMAGES": "0"}, True, False),
        ({"TERM": "dumb", "SILICA_INLINE_IMAGES": "1"}, False, True),
        ({"TERM": "xterm-kitty", "SILICA_INLINE_IMAGES": "maybe"}, True, True),
    ],
)
def test_kitty_supported(environ, isatty, expected):
    assert kitty_supported(environ, isatty) is expected


def test_kitty_image_round_trips_through_the_extractor():
    img = noise((120, 90))
    png = encoded(img, "PNG")
    seq = kitty_image(png)
    commands = re.findall(r"\x1b_G([^;]*);([^\x1b]*)\x1b\\", seq)
    assert len(commands) > 2 and seq == "".join(
        f"\x1b_G{keys};{data}\x1b\\" for keys, data in commands)
    assert commands[0][0] == "a=T,f=100,q=2,m=1"
    assert [keys for keys, _ in commands[1:-1]] == ["q=2,m=1"] * (len(commands) - 2)
    assert commands[-1][0] == "q=2,m=0"
    assert all(len(data) == CHUNK for _, data in commands[:-1])
    extraction = extract_kitty("before" + seq + "after")
    assert extraction.text == "beforeafter"
    [payload] = extraction.images
    with Image.open(io.BytesIO(payload.data)) as back:
        assert back.size == img.size and back.convert("RGB").tobytes() == img.tobytes()


@pytest.mark.parametrize("fmt", ["JPEG", "BMP", "GIF", "WEBP"])
def test_other_formats_are_sent_as_png_with_the_same_pixels(fmt):
    data = encoded(noise((30, 20)).convert("P") if fmt == "GIF" else noise((30, 20)), fmt)
    extraction = extract_kitty(kitty_image(data))
    [payload] = extraction.images
    assert extraction.text == ""
    with Image.open(io.BytesIO(data)) as source, Image.open(io.BytesIO(payload.data)) as back:
        assert back.format == "PNG" and back.size == (30, 20)
        assert back.convert("RGB").tobytes() == source.convert("RGB").tobytes()


def result_with_image() -> ToolResult:
    png = encoded(Image.new("RGB", (8, 6), (1, 2, 3)), "PNG")
    return ToolResult(blocks=[TextBlock(text="a chart"),
                              ImageBlock(media_type="image/png", data=png, width=8, height=6)])


def test_show_result_draws_the_image_when_inline_is_forced(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("SILICA_INLINE_IMAGES", "1")
    result = result_with_image()
    show_result(result, [tmp_path / "saved.png"])
    printed = capsys.readouterr().out
    assert printed.index("a chart") < printed.index("\x1b_Ga=T") < printed.index("[image:")
    assert "8x6 px" in printed and str(tmp_path / "saved.png") in printed
    [payload] = extract_kitty(printed).images
    assert payload.data == result.images[0].data


def test_show_result_prints_no_escape_sequences_otherwise(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("TERM", "xterm-kitty")  # but stdout is not a terminal here
    monkeypatch.delenv("SILICA_INLINE_IMAGES", raising=False)
    show_result(result_with_image(), [tmp_path / "saved.png"])
    printed = capsys.readouterr().out
    assert "\x1b" not in printed
    assert "a chart" in printed and f"saved to {tmp_path / 'saved.png'}" in printed
    show_result(result_with_image(), [None], inline=False)
    assert "\x1b" not in capsys.readouterr().out
