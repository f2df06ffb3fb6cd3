"""A corpus of good, odd and broken images, built at test time with Pillow and raw bytes.

Nothing here is stored on disk: every builder returns fresh ``bytes`` (cached, since some
take a moment), so the repository holds no binary files. Builders are deterministic.
"""

from __future__ import annotations

import io
import random
import struct
import zlib
from collections.abc import Callable
from functools import cache

from PIL import Image, ImageDraw


def encode(img: Image.Image, fmt: str, **options: object) -> bytes:
    """``img`` saved in Pillow format ``fmt``."""
    buffer = io.BytesIO()
    img.save(buffer, fmt, **options)
    return buffer.getvalue()


def noise(size: tuple[int, int], mode: str = "RGB", seed: int = 0) -> Image.Image:
    """Random pixels: an image no codec can compress."""
    channels = len(mode)
    raw = random.Random(seed).randbytes(size[0] * size[1] * channels)
    return Image.frombytes(mode, size, raw)


def gradient(size: tuple[int, int]) -> Image.Image:
    """A smooth RGB picture (compresses well, looks like a photo to JPEG)."""
    width, height = size
    red = Image.linear_gradient("L").resize(size)
    green = red.transpose(Image.Transpose.ROTATE_90).resize(size)
    blue = Image.new("L", (width, height), 96)
    return Image.merge("RGB", (red, green, blue))


# -- valid images the providers accept as they are ----------------------------------------


@cache
def small_png() -> bytes:
    return encode(gradient((64, 48)), "PNG")


@cache
def small_jpeg() -> bytes:
    return encode(gradient((64, 48)), "JPEG", quality=90)


@cache
def small_webp() -> bytes:
    return encode(gradient((64, 48)), "WEBP")


@cache
def screenshot_png(size: tuple[int, int] = (1920, 1080)) -> bytes:
    """A desktop-screenshot-like PNG: flat colours, boxes and lines of text."""
    img = Image.new("RGB", size, "#f4f4f4")
    draw = ImageDraw.Draw(img)
    draw.rectangle((0, 0, size[0], 40), fill="#2d2d30")
    draw.rectangle((0, 40, 260, size[1]), fill="#e1e4e8")
    for row in range(60, size[1] - 20, 22):
        draw.text(
            (280, row),
            f"line {row}: the quick brown fox jumps over the lazy dog " * 3,
            fill="#202020",
        )
    draw.rectangle((900, 300, 1400, 600), fill="#3366cc", outline="#000000", width=3)
    return encode(img, "PNG")


@cache
def wide_png(width: int = 3000, height: int = 1000) -> bytes:
    return encode(gradient((width, height)), "PNG")


@cache
def photo_jpeg(size: tuple[int, int] = (4000, 3000)) -> bytes:
    return encode(gradient(size), "JPEG", quality=90)


@cache
def palette_png_transparent(size: tuple[int, int] = (60, 40)) -> bytes:
    """A palette PNG whose index 0 is transparent (left half) and index 1 red (right half)."""
    img = Image.new("P", size, 0)
    img.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    img.paste(1, (size[0] // 2, 0, size[0], size[1]))
    return encode(img, "PNG", transparency=0)


@cache
def animated_gif(size: tuple[int, int] = (50, 40), frames: int = 3) -> bytes:
    colours = ["red", "green", "blue", "yellow", "purple"]
    images = [Image.new("RGB", size, colours[i % len(colours)]) for i in range(frames)]
    return encode(images[0], "GIF", save_all=True, append_images=images[1:], duration=100, loop=0)


@cache
def animated_png(size: tuple[int, int] = (50, 40)) -> bytes:
    images = [Image.new("RGB", size, c) for c in ("red", "green")]
    return encode(images[0], "PNG", save_all=True, append_images=images[1:], duration=100)


# -- valid images that need converting ----------------------------------------------------


@cache
def bmp() -> bytes:
    return encode(gradient((80, 60)), "BMP")


@cache
def tiff() -> bytes:
    return encode(gradient((80, 60)), "TIFF")


@cache
def ico() -> bytes:
    img = Image.new("RGBA", (64, 64), (255, 0, 0, 128))
    return encode(img, "ICO", sizes=[(16, 16), (32, 32), (64, 64)])


@cache
def ppm() -> bytes:
    return encode(gradient((30, 20)), "PPM")


@cache
def cmyk_jpeg() -> bytes:
    """A CMYK JPEG (Adobe marker), pure magenta: C=0 M=255 Y=0 K=0."""
    return encode(Image.new("CMYK", (64, 48), (0, 255, 0, 0)), "JPEG", quality=95)


SIXTEEN_BIT_SAMPLES = (65535, 32768, 25600, 0)


@cache
def png16() -> bytes:
    """A 16-bit greyscale PNG whose first row holds ``SIXTEEN_BIT_SAMPLES``."""
    img = Image.new("I;16", (8, 4), 1000)
    for x, value in enumerate(SIXTEEN_BIT_SAMPLES):
        img.putpixel((x, 0), value)
    return encode(img, "PNG")


@cache
def rotated_jpeg(size: tuple[int, int] = (3000, 1000)) -> bytes:
    """A wide JPEG whose EXIF says "rotate 90° to view" (orientation 6): upright it is tall."""
    img = gradient(size)
    exif = Image.Exif()
    exif[0x0112] = 6
    return encode(img, "JPEG", quality=85, exif=exif.tobytes())


@cache
def noise_png(size: tuple[int, int] = (1500, 1200), mode: str = "RGB") -> bytes:
    """Incompressible: a 1500x1200 RGB one is ~5.4 MB, ~7.2 MB as base64."""
    return encode(noise(size, mode), "PNG", compress_level=1)


# -- broken or refused --------------------------------------------------------------------


def empty() -> bytes:
    return b""


def junk(size: int = 4096, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(size)


@cache
def truncated_png() -> bytes:
    data = encode(noise((200, 150)), "PNG")
    return data[: len(data) // 2]


@cache
def truncated_jpeg() -> bytes:
    data = encode(noise((200, 150)), "JPEG", quality=90)
    return data[: len(data) // 2]


def svg() -> bytes:
    return (
        b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
        b'<rect width="10" height="10" fill="red"/></svg>'
    )


def pdf() -> bytes:
    return b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"


def heic_header() -> bytes:
    """The start of an HEIC file: enough to be recognised, not decodable."""
    return struct.pack(">I", 24) + b"ftypheic" + b"\x00\x00\x00\x00mif1heic" + bytes(64)


def avif_header() -> bytes:
    return struct.pack(">I", 24) + b"ftypavif" + b"\x00\x00\x00\x00avifmif1" + bytes(64)


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_chunks_ok(data: bytes) -> bool:
    """Whether each chunk of PNG ``data`` up to IEND is whole with a right CRC, as libpng checks."""
    position = 8
    while position + 12 <= len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        body = data[position + 4 : position + 8 + length]
        crc = data[position + 8 + length : position + 12 + length]
        if len(crc) < 4 or struct.unpack(">I", crc)[0] != zlib.crc32(body):
            return False
        if body[:4] == b"IEND":
            return True
        position += 12 + length
    return False


def with_bad_idat_crc(data: bytes) -> bytes:
    """PNG ``data`` with the first IDAT chunk's CRC flipped (Pillow decodes it, libpng won't)."""
    position = 8
    while True:
        (length,) = struct.unpack(">I", data[position : position + 4])
        if data[position + 4 : position + 8] == b"IDAT":
            crc_at = position + 8 + length
            return data[:crc_at] + bytes([data[crc_at] ^ 0xFF]) + data[crc_at + 1 :]
        position += 12 + length


@cache
def bomb_png(width: int = 30000, height: int = 30000) -> bytes:
    """A complete, valid 1-bit PNG of ``width`` x ``height`` black pixels.

    30000x30000 is 900 megapixels (3.6 GB as RGBA) from about 110 KB of file.
    """
    row = b"\x00" + bytes((width + 7) // 8)  # filter byte + packed bits
    compressor = zlib.compressobj(9)
    chunks: list[bytes] = []
    rows_per_block = max(1, (1 << 20) // len(row))
    block = row * rows_per_block
    done = 0
    while done < height:
        count = min(rows_per_block, height - done)
        chunks.append(compressor.compress(block if count == rows_per_block else row * count))
        done += count
    chunks.append(compressor.flush())
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", b"".join(chunks))
        + _png_chunk(b"IEND", b"")
    )


# -- the whole corpus, for tests that check invariants on every item ------------------------

CORPUS: dict[str, Callable[[], bytes]] = {
    "small_png": small_png,
    "small_jpeg": small_jpeg,
    "small_webp": small_webp,
    "screenshot_png": screenshot_png,
    "wide_png_9000": lambda: wide_png(9000, 400),
    "photo_jpeg": photo_jpeg,
    "palette_png_transparent": palette_png_transparent,
    "palette_png_transparent_big": lambda: palette_png_transparent((3000, 200)),
    "animated_gif": animated_gif,
    "animated_gif_big": lambda: animated_gif((2000, 100)),
    "animated_png": animated_png,
    "bmp": bmp,
    "tiff": tiff,
    "ico": ico,
    "ppm": ppm,
    "cmyk_jpeg": cmyk_jpeg,
    "png16": png16,
    "rotated_jpeg": rotated_jpeg,
    "noise_png": noise_png,
    "empty": empty,
    "junk": junk,
    "truncated_png": truncated_png,
    "truncated_jpeg": truncated_jpeg,
    "svg": svg,
    "pdf": pdf,
    "heic_header": heic_header,
    "avif_header": avif_header,
    "bomb_png": bomb_png,
    "png_bad_idat_crc": lambda: with_bad_idat_crc(small_png()),
}
"""Every corpus item by name (each one built on first use)."""

SMALL_SEEDS: tuple[Callable[[], bytes], ...] = (
    small_png,
    small_jpeg,
    small_webp,
    bmp,
    tiff,
    ico,
    ppm,
    cmyk_jpeg,
    png16,
    palette_png_transparent,
    animated_gif,
    animated_png,
)
"""Small valid files of every kind, for fuzzing by mutation."""
