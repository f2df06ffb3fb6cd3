"""Images encoded for the terminal (``silica.display.encode``): the text each protocol gets
decodes back, with silica's own extractors, to the image fitted to the terminal, and holds
nothing but the protocol's own framing."""

from __future__ import annotations

import io
import random
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image, PngImagePlugin

from silica.display.encode import PROTOCOLS, TMUX_MAX, Cells, Fitted, encode, fit, tmux_wrap
from silica.errors import SilicaError
from silica.results.iterm2 import extract_iterm2
from silica.results.kitty import extract_kitty
from silica.results.sixel import extract_sixel

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TERMINAL = Cells(80, 24)  # 10x20 px cells: 800x440 px of room for an image
CLOSE = 8  # levels per channel a pixel may be off (resampling; sixel: its palette)
SECRET = "do-not-print-me-0451"


def png(img: Image.Image, **params) -> bytes:
    out = io.BytesIO()
    img.save(out, "PNG", **params)
    return out.getvalue()


def chart(width: int, height: int, seed: int = 1) -> Image.Image:
    """A chart-like picture: a light background, a grid, bars of a few flat colours."""
    rng = random.Random(seed)
    img = Image.new("RGB", (width, height), (245, 246, 250))
    px = img.load()
    colours = [(66, 133, 244), (52, 168, 83), (251, 188, 5), (234, 67, 53), (30, 30, 40)]
    bars = max(1, width // 40)
    for i in range(bars):
        top = rng.randrange(height)
        for x in range(i * width // bars, (i + 1) * width // bars - max(1, width // 200)):
            for y in range(top, height):
                px[x, y] = colours[i % len(colours)]
    return img


def photo(width: int, height: int) -> Image.Image:
    """Smooth gradients in every channel: many colours, as a photo has."""
    x = np.linspace(0, 255, width)[None, :]
    y = np.linspace(0, 255, height)[:, None]
    rgb = np.stack([np.broadcast_to(x, (height, width)), np.broadcast_to(y, (height, width)),
                    (x + y) / 2 * np.ones((height, 1))], axis=2)
    return Image.fromarray(rgb.astype(np.uint8), "RGB")


def fitted_image(img: Image.Image, size: tuple[int, int]) -> Image.Image:
    return img.convert("RGB").resize(size, Image.Resampling.BOX)


def share_close(a: Image.Image, b: Image.Image, close: int = CLOSE) -> float:
    assert a.size == b.size
    diff = np.abs(np.asarray(a.convert("RGB"), np.int16) - np.asarray(b.convert("RGB"),
                                                                      np.int16))
    return float((diff.max(axis=2) <= close).mean())


def decoded(payload_data: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(payload_data))
    img.load()
    return img


# -- fitting ------------------------------------------------------------------------------


def test_a_huge_image_is_scaled_to_the_terminal():
    assert fit(1920, 10000, TERMINAL) == Fitted(84, 440, 9, 22)
    assert fit(10000, 1920, TERMINAL) == Fitted(800, 154, 80, 8)


def test_a_small_image_keeps_its_size():
    assert fit(1, 1, TERMINAL) == Fitted(1, 1, 1, 1)
    assert fit(640, 400, TERMINAL) == Fitted(640, 400, 64, 20)


def test_max_rows_bounds_the_height():
    assert fit(640, 400, TERMINAL, max_rows=5) == Fitted(160, 100, 16, 5)
    assert fit(640, 400, Cells(80, 1)).rows == 1  # a one-line terminal still gets a row


cells_strategy = st.builds(Cells, st.integers(1, 500), st.integers(1, 200), st.integers(1, 64),
                           st.integers(1, 64))


@settings(max_examples=500, deadline=None)
@given(st.integers(1, 8000), st.integers(1, 8000), cells_strategy,
       st.none() | st.integers(1, 300))
def test_fit_stays_in_the_terminal_never_upscales_and_keeps_the_aspect(width, height, cells,
                                                                     max_rows):
    got = fit(width, height, cells, max_rows=max_rows)
    rows_room = max(1, cells.rows - 2) if max_rows is None else max_rows
    assert 1 <= got.width_px <= width and 1 <= got.height_px <= height
    assert 1 <= got.columns <= cells.columns and 1 <= got.rows <= rows_room
    assert got.columns == -(-got.width_px // cells.cell_width)
    assert got.rows == -(-got.height_px // cells.cell_height)
    if (got.width_px, got.height_px) != (width, height):  # scaled: one side takes its room
        assert (got.width_px == cells.columns * cells.cell_width
                or got.height_px == rows_room * cells.cell_height)
    # the aspect holds within the rounding of the side that did not bind (half a pixel;
    # up to one where a side would round to nothing)
    scale = min(1, cells.columns * cells.cell_width / width,
                rows_room * cells.cell_height / height)
    assert abs(got.width_px - width * scale) <= 1
    assert abs(got.height_px - height * scale) <= 1


# -- each protocol, decoded back -----------------------------------------------------------


def unwrap_tmux(text: str) -> str:
    """``text`` with every tmux passthrough replaced by what it carries."""
    out, pos = [], 0
    while (start := text.find("\x1bPtmux;", pos)) >= 0:
        out.append(text[pos:start])
        i = start + len("\x1bPtmux;")
        inner = []
        while True:
            esc = text.index("\x1b", i)
            inner.append(text[i:esc])
            if text[esc + 1] == "\x1b":  # a doubled ESC: one ESC of the sequence
                inner.append("\x1b")
                i = esc + 2
            else:
                assert text[esc + 1] == "\\", "a passthrough ends with ST"
                i = esc + 2
                break
        out.append("".join(inner))
        pos = i
    out.append(text[pos:])
    return "".join(out)


def test_kitty_round_trip():
    source = photo(1600, 1000)  # many colours: a PNG of several 4096-character chunks
    text = encode(png(source), "kitty", TERMINAL)
    want = fit(1600, 1000, TERMINAL)
    commands = re.findall(r"\x1b_G([^;]*);([A-Za-z0-9+/=]*)\x1b\\", text)
    assert commands[0][0] == f"a=T,f=100,q=2,c={want.columns},r={want.rows},m=1"
    assert all(len(data) == 4096 for _, data in commands[:-1])
    extraction = extract_kitty(text)
    assert extraction.text == "\n"  # the image, then the cursor at the next line's start
    back = decoded(extraction.images[0].data)
    assert back.size == (want.width_px, want.height_px) == (704, 440)
    assert share_close(back, fitted_image(source, back.size)) >= 0.99


def test_iterm2_round_trip():
    source = photo(1200, 300)
    text = encode(png(source), "iterm2", TERMINAL)
    want = fit(1200, 300, TERMINAL)
    assert text.startswith("\x1b]1337;File=inline=1;size=")
    assert f";width={want.columns};height={want.rows};preserveAspectRatio=1:" in text
    assert text.endswith("\x07\n")
    extraction = extract_iterm2(text)
    assert extraction.text == "\n"
    back = decoded(extraction.images[0].data)
    assert back.format == "PNG" and back.size == (want.width_px, want.height_px) == (800, 200)
    assert share_close(back, fitted_image(source, back.size)) >= 0.99


@pytest.mark.parametrize("source", [chart(1600, 1000), photo(900, 700)], ids=["chart", "photo"])
def test_sixel_round_trip(source):
    text = encode(png(source), "sixel", TERMINAL)
    want = fit(*source.size, TERMINAL)
    assert re.fullmatch(r"\x1bP[0-9;]*q[\x21-\x7e]*\x1b\\\n", text)
    extraction = extract_sixel(text)
    assert extraction.text == "[sixel image]\n"
    back = decoded(extraction.images[0].data)
    assert back.size == (want.width_px, want.height_px)
    # 256 colours at most: a chart's few colours come back, a photo's are near
    assert share_close(back, fitted_image(source, back.size), close=12) >= 0.97


def parse_blocks(text: str, columns: int) -> Image.Image:
    """The RGBA pixels (two a cell) that half-block ``text`` shows; transparent where the
    terminal's background shows."""
    rows = []
    for line in text.split("\n")[:-1]:
        upper, lower = [], []
        fg = bg = None
        for sgr, glyph in re.findall(r"\x1b\[([0-9;]*)m|(.)", line):
            if glyph:
                if glyph == "\u2580":
                    upper.append(fg), lower.append(bg)
                elif glyph == "\u2584":
                    upper.append(bg), lower.append(fg)
                else:
                    assert glyph == " "
                    upper.append(bg), lower.append(bg)
                continue
            values = [int(v) for v in sgr.split(";")]
            if values == [0]:
                fg = bg = None
            elif values == [39]:
                fg = None
            elif values == [49]:
                bg = None
            elif values[:2] == [38, 2]:
                fg = tuple(values[2:])
            else:
                assert values[:2] == [48, 2]
                bg = tuple(values[2:])
        assert line.endswith("\x1b[0m") and len(upper) == columns
        rows += [upper, lower]
    img = Image.new("RGBA", (columns, len(rows)))
    img.putdata([(0, 0, 0, 0) if p is None else (*p, 255) for row in rows for p in row])
    return img


def test_blocks_round_trip():
    source = chart(640, 400)
    text = encode(png(source), "blocks", TERMINAL)
    want = fit(640, 400, TERMINAL)
    assert text.count("\n") == want.rows == 20
    back = parse_blocks(text, want.columns)
    assert back.size == (64, 40)
    assert share_close(back, fitted_image(source, back.size)) >= 0.99


def test_blocks_leave_transparent_pixels_to_the_terminal():
    img = Image.new("RGBA", (4, 4), (0, 0, 0, 0))
    img.paste((200, 10, 10, 255), (0, 0, 2, 4))  # the left half red, the right clear
    img.paste((10, 200, 10, 255), (2, 1, 3, 2))  # a green pixel under a clear one
    text = encode(png(img), "blocks", Cells(80, 24, 1, 2))
    back = parse_blocks(text, 4)
    assert np.array_equal(np.asarray(back), np.asarray(img))
    assert "\u2584" in text and " " in text


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_one_pixel_image_is_drawn(protocol):
    text = encode(png(Image.new("RGB", (1, 1), (9, 99, 199))), protocol, TERMINAL)
    if protocol == "blocks":
        assert text == "\x1b[38;2;9;99;199m\x1b[48;2;9;99;199m\u2580\x1b[0m\n"
        return
    extract = {"kitty": extract_kitty, "iterm2": extract_iterm2, "sixel": extract_sixel}
    [payload] = extract[protocol](text).images
    back = decoded(payload.data).convert("RGB")
    assert back.size == (1, 1)
    off = max(abs(a - b) for a, b in zip(back.getpixel((0, 0)), (9, 99, 199), strict=True))
    assert off <= (CLOSE if protocol == "sixel" else 0)  # libsixel's palette: 5-6 bits


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_tall_screenshot_is_drawn_within_the_terminal(protocol):
    text = encode(png(chart(1920, 10000)), protocol, TERMINAL)
    want = fit(1920, 10000, TERMINAL)
    if protocol == "blocks":
        assert parse_blocks(text, want.columns).size == (want.columns, 2 * want.rows)
        return
    extract = {"kitty": extract_kitty, "iterm2": extract_iterm2, "sixel": extract_sixel}
    [payload] = extract[protocol](text).images
    assert decoded(payload.data).size == (want.width_px, want.height_px) == (84, 440)


def test_exif_orientation_is_applied():
    source = photo(60, 20)
    exif = Image.Exif()
    exif[0x0112] = 6  # stored turned: shown rotated a quarter turn clockwise
    data = io.BytesIO()
    source.save(data, "JPEG", exif=exif, quality=95)
    [payload] = extract_kitty(encode(data.getvalue(), "kitty", TERMINAL)).images
    assert decoded(payload.data).size == (20, 60)


@pytest.mark.parametrize("data", [b"", b"not an image at all", png(chart(50, 50))[:120],
                                  b"\x89PNG\r\n\x1a\n" + b"\0" * 40],
                         ids=["empty", "text", "truncated", "bad-png"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_undecodable_image_raises_one_clear_error(data, protocol):
    with pytest.raises(SilicaError, match="the image cannot be drawn") as caught:
        encode(data, protocol, TERMINAL)
    assert "Traceback" not in str(caught.value)


def test_a_bomb_is_refused_before_it_is_decoded():
    bomb = png(Image.new("1", (12000, 12000)))  # 144 MP declared, a few kB of file
    with pytest.raises(SilicaError, match="megapixel"):
        encode(bomb, "kitty", TERMINAL)


# -- tmux ---------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_tmux_passthrough_unwraps_to_the_sequences_themselves(protocol):
    data = png(chart(300, 200))
    plain, wrapped = encode(data, protocol, TERMINAL), encode(data, protocol, TERMINAL,
                                                              tmux=True)
    if protocol == "blocks":  # tmux draws colours and characters itself
        assert wrapped == plain
        return
    assert wrapped.startswith("\x1bPtmux;\x1b\x1b") and wrapped.endswith("\x1b\\\n")
    unwrapped = unwrap_tmux(wrapped)
    if protocol == "iterm2":  # in parts through tmux, one file when direct
        assert unwrapped.startswith("\x1b]1337;MultipartFile=inline=1;")
        assert (extract_iterm2(unwrapped).images[0].data
                == extract_iterm2(plain).images[0].data)
    else:
        assert unwrapped == plain
    assert tmux_wrap("\x1b_Ga=T;AAAA\x1b\\") == "\x1bPtmux;\x1b\x1b_Ga=T;AAAA\x1b\x1b\\\x1b\\"


def test_a_sixel_too_big_for_tmux_is_made_smaller_until_it_passes():
    rng = np.random.default_rng(3)
    noise = Image.fromarray(rng.integers(0, 256, (440, 800, 3), np.uint8), "RGB")
    plain = encode(png(noise), "sixel", TERMINAL)
    assert len(plain) > TMUX_MAX  # too big for one passthrough
    wrapped = encode(png(noise), "sixel", TERMINAL, tmux=True)
    assert len(wrapped) <= TMUX_MAX + 1 and wrapped.count("\x1bPtmux;") == 1
    [payload] = extract_sixel(unwrap_tmux(wrapped)).images
    width, height = decoded(payload.data).size
    assert width < 800 and height < 440 and abs(width / height - 800 / 440) < 0.05


# -- nothing from outside -----------------------------------------------------------------

GRAMMAR = {
    "kitty": r"(?:\x1b_G[A-Za-z0-9=,]*;[A-Za-z0-9+/=]*\x1b\\)+\n",
    "iterm2": r"\x1b\]1337;File=[a-zA-Z0-9=;]*:[A-Za-z0-9+/=]*\x07\n",
    "sixel": r"\x1bP[0-9;]*q[0-9;#!\"$\-?-~]*\x1b\\\n",
    "blocks": r"(?:(?:\x1b\[[0-9;]*m|[\u2580\u2584 ])*\x1b\[0m\n)+",
}
GRAMMAR_TMUX = {
    "kitty": r"(?:\x1bPtmux;\x1b\x1b_G[A-Za-z0-9=,]*;[A-Za-z0-9+/=]*\x1b\x1b\\\x1b\\)+\n",
    "iterm2": r"(?:\x1bPtmux;\x1b\x1b\]1337;[a-zA-Z0-9=;+/]*\x07\x1b\\)+\n",
    "sixel": r"\x1bPtmux;\x1b\x1bP[0-9;]*q[0-9;#!\"$\-?-~]*\x1b\x1b\\\x1b\\\n",
    "blocks": GRAMMAR["blocks"],
}

small_images = st.tuples(st.integers(1, 40), st.integers(1, 40),
                         st.sampled_from(["RGB", "RGBA", "L", "LA", "P"]), st.integers(0, 2**32))


def hostile(width: int, height: int, mode: str, seed: int, fmt: str) -> bytes:
    """Random pixels, with text and metadata that must never reach the terminal."""
    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 256, (height, width, 4), np.uint8), "RGBA")
    img = img.convert(mode) if mode != "P" else img.convert("RGB").quantize(16)
    out = io.BytesIO()
    if fmt == "PNG":
        info = PngImagePlugin.PngInfo()
        info.add_text("Comment", f"\x1b]0;{SECRET}\x07\x9b{SECRET}")
        info.add_itxt("Description", SECRET + "\u009c")
        img.save(out, "PNG", pnginfo=info, icc_profile=SECRET.encode() * 4)
    elif fmt == "GIF":
        img.save(out, "GIF", comment=SECRET.encode())
    else:
        if img.mode not in ("RGB", "L"):
            img = img.convert("RGB")
        exif = Image.Exif()
        exif[0x010E] = SECRET  # ImageDescription
        img.save(out, fmt, exif=exif)
    return out.getvalue() + b"\x1b[2J" + SECRET.encode()  # trailing bytes after the image


@FAST
@given(small_images, st.sampled_from(["PNG", "GIF", "JPEG", "WEBP"]), cells_strategy,
       st.sampled_from(PROTOCOLS), st.booleans())
def test_the_output_is_the_protocols_framing_and_nothing_from_the_image(
        image, fmt, cells, protocol, tmux):
    data = hostile(*image, fmt)
    text = encode(data, protocol, cells, tmux=tmux)
    assert re.fullmatch((GRAMMAR_TMUX if tmux else GRAMMAR)[protocol], text), text[:200]
    assert SECRET not in text
    payloads = {"kitty": extract_kitty, "iterm2": extract_iterm2,
                "sixel": extract_sixel}.get(protocol)
    if payloads is not None:  # the image sent holds pixels only
        [payload] = payloads(unwrap_tmux(text)).images
        assert SECRET.encode() not in payload.data
        with Image.open(io.BytesIO(payload.data)) as back:
            assert not (set(back.info) - {"transparency", "dpi", "gamma"}), back.info
            want = fit(image[0], image[1], cells)
            assert back.size == (want.width_px, want.height_px)


def test_a_sixel_image_with_transparency_is_flattened_onto_white():
    img = Image.new("RGBA", (12, 12), (0, 0, 0, 0))
    img.paste((20, 20, 120, 255), (0, 0, 6, 12))  # the left half blue, the right clear
    [payload] = extract_sixel(encode(png(img), "sixel", TERMINAL)).images
    back = decoded(payload.data).convert("RGB")
    assert back.size == (12, 12)
    assert all(abs(a - b) <= CLOSE for a, b in zip(back.getpixel((9, 5)), (255, 255, 255),
                                                    strict=True))
    assert all(abs(a - b) <= CLOSE for a, b in zip(back.getpixel((2, 5)), (20, 20, 120),
                                                    strict=True))


def test_a_large_turned_jpeg_is_decoded_small_and_drawn_upright_at_the_fitted_size():
    source = photo(4000, 3000)
    exif = Image.Exif()
    exif[0x0112] = 6  # shown turned a quarter clockwise: 3000x4000 upright
    data = io.BytesIO()
    source.save(data, "JPEG", exif=exif, quality=95)
    want = fit(3000, 4000, TERMINAL)
    [payload] = extract_kitty(encode(data.getvalue(), "kitty", TERMINAL)).images
    back = decoded(payload.data)
    assert back.size == (want.width_px, want.height_px) == (330, 440)
    upright = fitted_image(source.transpose(Image.Transpose.ROTATE_270), back.size)
    assert share_close(back, upright) >= 0.99


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("\x1b\\Pqtmux;_G]1337\x07ab=,")))
def test_tmux_wrap_unwraps_to_exactly_what_it_wrapped(sequence):
    wrapped = tmux_wrap(sequence)
    assert wrapped.startswith("\x1bPtmux;") and wrapped.endswith("\x1b\\")
    assert unwrap_tmux(wrapped) == sequence


# VmHWM of a child process, not of the pytest worker (whose peak would carry over).
MEMORY = """
import sys
from silica.display.encode import Cells, encode
encode(open(sys.argv[1], "rb").read(), sys.argv[2], Cells(80, 24))
print(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])
"""


@pytest.mark.parametrize("protocol", ["kitty", "sixel"])
def test_a_tall_screenshot_is_drawn_within_its_decoding_budget(tmp_path, protocol):
    import subprocess
    import sys

    path = tmp_path / "tall.png"
    rng = np.random.default_rng(5)  # 1920x10000 of coarse noise: 19.2 MP to decode
    Image.fromarray(rng.integers(0, 256, (1250, 240, 3), np.uint8)).resize(
        (1920, 10000), Image.Resampling.NEAREST).save(path, compress_level=1)
    done = subprocess.run([sys.executable, "-c", MEMORY, str(path), protocol],
                          capture_output=True, text=True, timeout=300, check=True)
    peak_mb = int(done.stdout) / 1024
    assert peak_mb < 200  # the decoded frame (~77 MB as RGBX) and the file, not copies
