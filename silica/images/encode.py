"""The smallest encoding a provider takes for an image that is ready to send.

``smallest(img, formats)`` takes an image already at the size and in the mode it will be sent
at (L, LA, RGB or RGBA, 8 bits a sample; an alpha band only if some pixel is not opaque) and
returns its smallest encoding among the forms that suit it, or ``None`` if none fits
``max_bytes``. ``forms`` says which forms those are; ``encode`` makes one. The forms:

- ``palette``: a palette PNG (1, 2, 4 or 8 bits a pixel, transparency as palette alpha), only
  when a colour image has at most 256 colours, so that no pixel changes. It then stands alone:
  its rows are a third (a quarter with alpha) of the truecolour ones, and encoding both
  would double the time for a file that was never the smaller in our measures.
- ``png``: a truecolour (or grey) PNG. Its rows are left unfiltered when a sample of the
  image compresses better that way (flat screenshots: runs and repeated glyphs stay whole for
  zlib), else Pillow's adaptive filters are used (photos, gradients).
- ``quantized``: a 256-colour palette PNG that may change pixels; only when ``lossy``, and
  only for an opaque colour image (quantizing alpha would leave opaque pixels not quite).
- ``jpeg``: only for an opaque image, and only when ``lossy`` or the source was a JPEG.

When none of those fits ``max_bytes``, an opaque image is tried as JPEG at falling qualities
(``JPEG_QUALITIES``), best first: a JPEG at full size is better than a smaller picture.

Every form is lossless unless its ``lossy`` property says otherwise (quantized, jpeg). Memory:
besides the image, a palette is made band by band and a PNG's rows are compressed band by
band; an encoding stops once it passes ``cap`` bytes.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Collection
from dataclasses import dataclass
from typing import cast

from PIL import Image

from silica.images.limits import JPEG, PNG

JPEG_QUALITIES = (85, 70, 55, 40)
"""Qualities a JPEG is tried at, in order: the first competes on size, the rest only when
nothing else fits."""

PALETTE_COLOURS = 256
"""Most colours an image may have to be sent as a lossless palette PNG."""

UNFILTERED_LEVEL = 3
"""zlib level of a PNG with unfiltered rows. On a 1429x804 screenshot level 3 gave 158 kB in
13 ms, level 6 145 kB in 30 ms, level 9 138 kB in 100 ms; fitting one has 80 ms in all."""

ADAPTIVE_LEVEL = 4
"""zlib level of a PNG with Pillow's adaptive filters: on a grainy 1.15 MP photo level 4 gave
1.26 MB in 0.3 s, level 6 1.28 MB in 0.7 s, level 1 1.49 MB in 0.16 s."""

PALETTE_LEVEL = 6
"""zlib level of a palette PNG: on a flat 1280x720 UI, level 9 took four times as long
(21 ms against 5) to save 10% of 6 kB."""

SAMPLE_ROWS = 16
"""Rows of each of the three sample bands that decide a PNG's row filters."""

_BAND_BYTES = 4 << 20  # raw bytes handled at once by the band-by-band steps
_COLOUR_TYPE = {"L": 0, "LA": 4, "RGB": 2, "RGBA": 6}
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class Form:
    """One way to encode an image: ``kind`` is png, palette, quantized or jpeg."""

    kind: str
    quality: int | None = None

    @property
    def media_type(self) -> str:
        return JPEG if self.kind == "jpeg" else PNG

    @property
    def lossy(self) -> bool:
        """Whether this form may change pixels (a palette form keeps every one)."""
        return self.kind in ("quantized", "jpeg")

    def __str__(self) -> str:
        names = {"png": "PNG", "palette": "palette PNG", "quantized": "256-colour PNG"}
        return names.get(self.kind) or f"JPEG q{self.quality}"


@dataclass(frozen=True)
class Encoded:
    """An image encoded in ``form``."""

    form: Form
    data: bytes

    @property
    def media_type(self) -> str:
        return self.form.media_type


def forms(
    img: Image.Image, formats: Collection[str], *, lossy: bool = False, jpeg_source: bool = False
) -> tuple[list[Form], list[Form]]:
    """``(first, fallback)`` for ``img``: the forms that compete on size, then the JPEG
    qualities to try in order if none of them fits.

    ``formats``: the media types the provider takes (only PNG and JPEG are made).
    ``jpeg_source``: the image came as a JPEG, so it goes out as one (PNG would be several
    times the size). ``lossy``: forms that change pixels may compete too. Empty lists when
    ``formats`` has neither PNG nor JPEG, or only JPEG and ``img`` has alpha.
    """
    opaque = img.mode in ("L", "RGB")
    jpegs = [Form("jpeg", q) for q in JPEG_QUALITIES] if JPEG in formats and opaque else []
    if PNG not in formats or (jpeg_source and jpegs):
        return jpegs[:1], jpegs[1:]
    if few_colours(img):
        first = [Form("palette")]
    elif lossy and img.mode == "RGB":  # not with alpha: see the module docstring
        first = [Form("png"), Form("quantized")]
    else:
        first = [Form("png")]
    if lossy and jpegs:
        return [*first, jpegs[0]], jpegs[1:]
    return first, jpegs


def encode(img: Image.Image, form: Form, cap: int | None = None) -> bytes | None:
    """``img`` encoded in ``form``; ``None`` if that passes ``cap`` bytes (it stops there).

    ``palette`` needs an image of at most ``PALETTE_COLOURS`` colours (``forms`` offers it
    only then); ``jpeg`` an opaque one."""
    buffer = _Capped(cap)
    try:
        if form.kind == "png":
            if _unfiltered_wins(img):
                return _unfiltered_png(img, cap)
            img.save(buffer, "PNG", compress_level=ADAPTIVE_LEVEL)
        elif form.kind == "palette":
            _exact_palette(img).save(buffer, "PNG", compress_level=PALETTE_LEVEL)
        elif form.kind == "quantized":
            quantized = img.convert("RGB").quantize(
                PALETTE_COLOURS, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
            quantized.save(buffer, "PNG", compress_level=PALETTE_LEVEL)
        elif form.kind == "jpeg":
            if img.mode not in ("L", "RGB"):
                img = img.convert("L" if img.mode in ("L", "LA") else "RGB")
            img.save(buffer, "JPEG", quality=form.quality)
        else:
            raise ValueError(f"unknown image form {form.kind!r}")
    except _TooBig:
        return None
    return buffer.getvalue()


def smallest(
    img: Image.Image,
    formats: Collection[str],
    *,
    lossy: bool = False,
    jpeg_source: bool = False,
    max_bytes: int | None = None,
    cap: int | None = None,
    fallback: bool = True,
    skip: Collection[Form] = (),
    tried: dict[Form, int] | None = None,
) -> Encoded | None:
    """The smallest encoding of ``img`` among ``forms(img, formats, ...)`` that is at most
    ``max_bytes`` long (raw bytes, not base64); failing that (and if ``fallback``), the first
    fallback JPEG that is; ``None`` if nothing is. ``img`` is encoded as it is: scale it and
    drop an opaque alpha band first.

    ``cap``: stop any one encoding past this many bytes (default: ``max_bytes``). ``skip``:
    forms not to try (e.g. known to be too big). ``tried``: if given, filled with the bytes
    each form tried came to (``cap + 1`` for one stopped at the cap)."""
    first, later = forms(img, formats, lossy=lossy, jpeg_source=jpeg_source)
    limit = max_bytes if max_bytes is not None else float("inf")
    cap = cap if cap is not None else max_bytes
    best: Encoded | None = None
    for form in first:
        found = _attempt(img, form, cap, limit, skip, tried)
        if found is not None and (best is None or len(found.data) < len(best.data)):
            best = found
    for form in later if best is None and fallback else ():
        found = _attempt(img, form, cap, limit, skip, tried)
        if found is not None:
            return found
    return best


def _attempt(img: Image.Image, form: Form, cap: int | None, limit: float,
             skip: Collection[Form], tried: dict[Form, int] | None) -> Encoded | None:
    if form in skip:
        return None
    data = encode(img, form, cap)
    size = len(data) if data is not None else (cap or 0) + 1
    if tried is not None:
        tried[form] = size
    return Encoded(form, data) if data is not None and size <= limit else None


def few_colours(img: Image.Image) -> bool:
    """Whether a palette can hold every colour of ``img`` (LA, RGB or RGBA; grey takes a byte
    a pixel already, so an L image stays grey). Counting stops past ``PALETTE_COLOURS``."""
    return img.mode in ("LA", "RGB", "RGBA") and img.getcolors(PALETTE_COLOURS) is not None


# -- the pieces --------------------------------------------------------------------------------


class _TooBig(Exception):
    """Raised by ``_Capped`` when an encoding passes its cap."""


class _Capped(io.BytesIO):
    """A buffer that refuses to grow past ``cap`` bytes, so an encoding far too big stops
    there instead of filling memory."""

    def __init__(self, cap: int | None) -> None:
        super().__init__()
        self.cap = cap

    def write(self, data) -> int:  # type: ignore[no-untyped-def, override]
        if self.cap is not None and self.tell() + memoryview(data).nbytes > self.cap:
            raise _TooBig
        return super().write(data)


def _row_bands(img: Image.Image) -> list[tuple[int, int, int, int]]:
    width, height = img.size
    rows = max(1, _BAND_BYTES // (len(img.getbands()) * width))
    return [(0, top, width, min(height, top + rows)) for top in range(0, height, rows)]


def _rows_of(img: Image.Image, box: tuple[int, int, int, int]) -> Image.Image:
    return img if box == (0, 0, *img.size) else img.crop(box)


def _exact_palette(img: Image.Image) -> Image.Image:
    """``img`` as a P image with the same pixels: each colour (as RGBA) gets an index."""
    import numpy as np  # a dependency already (sixel); only this form needs it here

    def keys(part: Image.Image):  # one 32-bit number per pixel, of its R, G, B, A bytes
        rgba = part if part.mode == "RGBA" else part.convert("RGBA")
        return np.frombuffer(rgba.tobytes(), dtype="<u4")

    colours = img.getcolors(PALETTE_COLOURS) or []
    swatch = Image.new(img.mode, (len(colours), 1))
    swatch.putdata([cast(tuple[int, ...], colour) for _, colour in colours])  # multi-band
    table = np.unique(keys(swatch))  # sorted, for searchsorted
    out = Image.new("P", img.size)
    for box in _row_bands(img):
        index = np.searchsorted(table, keys(_rows_of(img, box))).astype(np.uint8)
        out.paste(Image.frombytes("L", (box[2] - box[0], box[3] - box[1]), index.tobytes()),
                  box[:2])
    entries = table.astype("<u4").tobytes()  # R, G, B, A of each index
    if entries[3::4].strip(b"\xff"):  # some colour is not opaque
        out.putpalette(entries, "RGBA")
    else:
        out.putpalette(b"".join(entries[i : i + 3] for i in range(0, len(entries), 4)), "RGB")
    return out


def _unfiltered_wins(img: Image.Image) -> bool:
    """Whether ``img``'s rows compress smaller unfiltered than with Pillow's adaptive
    filters, judged on three bands of ``SAMPLE_ROWS`` rows (a quarter, half and three
    quarters of the way down), each compressed both ways at zlib level 1."""
    width, height = img.size
    plain = adaptive = 0
    for centre in sorted({height // 4, height // 2, 3 * height // 4}):
        top = max(0, min(centre - SAMPLE_ROWS // 2, height - SAMPLE_ROWS))
        band = img.crop((0, top, width, min(height, top + SAMPLE_ROWS)))
        zipper = zlib.compressobj(1)
        plain += len(_compress_unfiltered(zipper, band)) + len(zipper.flush())
        buffer = io.BytesIO()
        band.save(buffer, "PNG", compress_level=1)
        adaptive += len(buffer.getvalue())
    return plain < adaptive


def _compress_unfiltered(zipper: zlib._Compress, band: Image.Image) -> bytes:
    """What ``zipper`` gives for ``band``'s raw rows, each behind a filter-type byte 0
    (none), as a PNG's IDAT holds them."""
    raw = memoryview(band.tobytes())
    stride = band.width * len(band.getbands())
    out = []
    for start in range(0, len(raw), stride):
        out.append(zipper.compress(b"\0"))
        out.append(zipper.compress(raw[start : start + stride]))
    return b"".join(out)


def _unfiltered_png(img: Image.Image, cap: int | None) -> bytes | None:
    """``img`` (L, LA, RGB or RGBA) as an 8-bit PNG whose rows are all unfiltered."""
    width, height = img.size
    header = struct.pack(">IIBBBBB", width, height, 8, _COLOUR_TYPE[img.mode], 0, 0, 0)
    zipper = zlib.compressobj(UNFILTERED_LEVEL)
    parts: list[bytes] = []
    size = 0
    for box in _row_bands(img):
        parts.append(_compress_unfiltered(zipper, _rows_of(img, box)))
        size += len(parts[-1])
        if cap is not None and size > cap:
            return None
    parts.append(zipper.flush())
    out = b"".join([_PNG_MAGIC, _chunk(b"IHDR", header), _chunk(b"IDAT", b"".join(parts)),
                    _chunk(b"IEND", b"")])
    return None if cap is not None and len(out) > cap else out


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
