"""The sixel decoder reads its tokens at array speed and still means what each one says.

``#``, ``!`` and ``"`` tokens are read all at once, with array arithmetic for the common
ones and one by one for the rest. A reference decoder, byte by byte and pixel by pixel,
checks the images random token streams draw; the PNG an extraction keeps (with a palette
when it can) decodes to the very pixels of the decoded image.
"""

from __future__ import annotations

import colorsys
import io

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from silica.results.sixel import SixelError, decode_sixel, extract_sixel

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BUDGET = 4096
VT340 = [(0, 0, 0), (20, 20, 80), (80, 13, 13), (20, 80, 20), (80, 20, 80), (20, 80, 80),
         (80, 80, 20), (53, 53, 53), (26, 26, 26), (33, 33, 60), (60, 26, 26), (33, 60, 33),
         (60, 33, 60), (33, 60, 60), (60, 60, 33), (80, 80, 80)]


def percent(v: int) -> int:
    return (min(v, 100) * 255 + 50) // 100


def numbers(raw: bytes) -> list[int]:
    return [999_999_999 if len(p) > 9 else int(p or b"0") for p in raw.split(b";")][:5]


def reference(body: bytes, p2: int):
    """Decode ``body`` a byte at a time: the image's mode, size and pixels, or "refused"."""
    palette = [tuple(percent(v) for v in VT340[n % 16]) for n in range(1024)]
    painted: dict[tuple[int, int], int] = {}
    x = band = colour = width = height = work = 0
    raster = None
    count, i = 1, 0
    while i < len(body):
        c = body[i]
        i += 1
        if c in b'!#"':
            j = i
            while j < len(body) and body[j] in b"0123456789;":
                j += 1
            values, i = numbers(body[i:j]), j
            if c == ord("!"):
                count = min(max(values[0], 1), BUDGET)
                if i < len(body) and 63 <= body[i] <= 126:
                    continue  # it repeats the character that follows
            elif c == ord("#"):
                colour = values[0] % 1024
                if len(values) == 5 and values[1] == 2:
                    palette[colour] = tuple(percent(v) for v in values[2:])
                elif len(values) == 5 and values[1] == 1:  # DEC hue: 0 is blue
                    h, lum, sat = values[2:]
                    rgb = colorsys.hls_to_rgb((h + 240) % 360 / 360, min(lum, 100) / 100,
                                              min(sat, 100) / 100)
                    palette[colour] = tuple(round(v * 255) for v in rgb)
            elif raster is None and len(values) >= 4:
                raster = (values[2], values[3])
                width, height = max(width, raster[0]), max(height, raster[1])
        elif c in b"$-":
            x = 0
            band += c == ord("-")
        elif 63 <= c <= 126:
            bits = c - 63
            if bits:
                work += count
                height = max(height, 6 * band + bits.bit_length())
                for dx in range(count):
                    for k in range(6):
                        if bits >> k & 1:
                            painted[x + dx, 6 * band + k] = colour
            x += count
            width = max(width, x)
        count = 1
        if width * height > BUDGET or work > 2 * BUDGET:
            return "refused"
    if not width or not height:
        return "refused"
    if p2 == 1:
        pixels = np.zeros((height, width, 4), np.uint8)
        for (px, py), reg in painted.items():
            pixels[py, px] = (*palette[reg], 255)
        return "RGBA", (width, height), pixels.tobytes()
    pixels = np.zeros((height, width, 3), np.uint8)
    pixels[:, :] = palette[0]
    for (px, py), reg in painted.items():
        pixels[py, px] = palette[reg]
    return "RGB", (width, height), pixels.tobytes()


def decoded(body: bytes, p2: int):
    try:
        image = decode_sixel(body, p2=p2, max_pixels=BUDGET)
    except SixelError:
        return "refused"
    return image.mode, image.size, np.asarray(image).tobytes()


number = st.integers(0, 3000).map(str) | st.text("0123456789", min_size=10, max_size=12) \
    | st.just("")
tokens = st.one_of(
    st.tuples(st.sampled_from("#!"), number).map("".join),  # the common ones
    st.tuples(st.sampled_from("#!\""), st.lists(number, min_size=2, max_size=7).map(";".join))
    .map("".join),  # with parameters
    st.builds(lambda r, a, b, c: f"#{r};2;{a};{b};{c}", *[st.integers(0, 2100)] * 4),
    st.builds(lambda w, h: f'"1;1;{w};{h}', st.integers(0, 70), st.integers(0, 70)),
    st.integers(0, 40).map(lambda n: f"!{n}"),
    st.text("?@ACO_`o~", min_size=1, max_size=12),  # sixel data
    st.sampled_from(["$", "-", ";", "7", "\x00", "z"]),
)
streams = st.lists(tokens, max_size=60).map("".join)


@PROPERTY
@given(streams, st.sampled_from([0, 1]))
def test_every_token_means_what_a_byte_by_byte_reading_says(stream, p2):
    body = stream.encode()
    assert decoded(body, p2) == reference(body, p2)


def colourful(registers: int, p2: int) -> str:
    """An image 12 high painted in ``registers`` colours (defined, every one used), a column
    each in turn, bar a first column left unpainted and part of the second band."""
    defs = "".join(f"#{n};2;{n % 101};{n * 7 % 101};{n * 13 % 101}" for n in range(registers))
    band = "?" + "".join(f"#{n % registers}~" for n in range(max(40, registers)))
    return f"\x1bP0;{p2}q{defs}{band}-{band.replace('~', 'N')}\x1b\\"


@PROPERTY
@given(st.sampled_from([1, 3, 255, 256, 400]), st.sampled_from([0, 1]), streams)
def test_the_png_kept_decodes_to_the_pixels_decoded(registers, p2, extra):
    sequence = colourful(registers, p2)
    sequence = sequence[:-2] + "-" + extra + "\x1b\\"
    body = sequence.encode()[sequence.index("q") + 1 : -2]
    try:
        image = decode_sixel(body, p2=p2)
    except SixelError:
        return
    found = extract_sixel(sequence)
    assert len(found.images) == 1
    png = Image.open(io.BytesIO(found.images[0].data))
    assert png.size == image.size
    assert np.array_equal(np.asarray(png.convert(image.mode)), np.asarray(image))


def test_an_image_of_few_colours_is_kept_as_a_palette_png_of_the_same_pixels():
    for p2, mode in ((0, "RGB"), (1, "RGBA")):
        sequence = colourful(200, p2)
        found = extract_sixel(sequence)
        png = Image.open(io.BytesIO(found.images[0].data))
        assert png.mode == "P"  # a byte a pixel to compress, not three or four
        image = decode_sixel(sequence.encode()[sequence.index("q") + 1 : -2], p2=p2)
        assert image.mode == mode
        assert np.array_equal(np.asarray(png.convert(mode)), np.asarray(image))
    many = extract_sixel(colourful(400, 0))  # more than a palette holds: RGB as decoded
    assert Image.open(io.BytesIO(many.images[0].data)).mode == "RGB"
