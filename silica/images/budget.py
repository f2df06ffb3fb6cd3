"""What one image costs to decode and fit, read from its header before any pixel is decoded.

``inspect(payload, limits)`` answers for raw bytes (``build_result`` asks it before an image
is handed on); ``image_cost(img, data, limits)`` for an image Pillow has opened but not
loaded, and ``webp_cost`` for a WebP before Pillow opens it (Pillow's WebP plugin allocates
the canvas as it opens the file). Each gives a ``Cost``; ``refusal`` says why it is refused
under ``ImageLimits.max_pixels`` and ``ImageLimits.max_decoded_bytes``, or ``None``.

``Cost.bytes`` is a conservative estimate of the peak, in bytes of memory, of decoding and
fitting the image the way ``silica.images.check`` does:

- the decoded pixels as Pillow holds them (4 bytes a pixel for RGB, RGBA, CMYK, I, F...; 2
  for 16-bit grey; 1 for L, P, 1), at the size the decoder is asked for (a JPEG is drafted at
  1/2, 1/4 or 1/8 when it will be scaled down), for every frame decoded (each frame after
  the first at least 64 KiB, for the Python work each costs);
- the decoder's own buffers while it decodes: for WebP four more RGBA copies (libwebp's
  animation decoder holds two canvases, Pillow copies its output, lossless decoding holds
  one more; ``prepare_image`` lets them go once the frame is loaded), a progressive JPEG's
  coefficients (2 bytes a sample), a TIFF's largest strip or tile and a copy of the file;
  for AVIF/HEIF three RGBA copies, held as long as the image;
- then, with the pixels still held, the fit: the conversion to 8 bits (1 byte a pixel for
  grey, 4 for colour), two images of the target size, the bands ``resize`` and ``to_grey``
  work in, and the encoder's output (capped at 1.5 times the byte limit); with no scaling,
  three full-size copies instead. The larger of the two stages counts;
- for formats Pillow decodes in pure Python (QOI, RLE BMP, plain PPM...), whose time grows
  with the file at about 1 µs a byte, ``PY_DECODER_BYTES`` per byte of file, so that the
  budget bounds their time as well.

``resize``, ``to_grey`` and ``has_alpha`` are the operations ``prepare_image`` uses on the
full-size image; they work band by band, so no full-size copy is made and the estimate holds.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from PIL import Image

from silica.images.limits import GIF, MB, WEBP, ImageLimits
from silica.images.payload import ImagePayload
from silica.images.sniff import describe_media_type, normalize_media_type, sniff_media_type

PILLOW_FORMATS: dict[str, tuple[str, ...]] = {
    "image/png": ("PNG",),
    "image/jpeg": ("JPEG",),
    "image/gif": ("GIF",),
    "image/webp": ("WEBP",),
    "image/bmp": ("BMP",),
    "image/tiff": ("TIFF",),
    "image/x-icon": ("ICO",),
    "image/x-portable-anymap": ("PPM",),
    "image/qoi": ("QOI",),
    "image/avif": ("AVIF",),
    "image/heic": ("HEIF",),  # registered only by the pillow-heif plugin
}
"""The Pillow plugin that decodes each media type: no other plugin is ever tried."""

_PLUGIN_MODULES = {"PNG": "PngImagePlugin", "JPEG": "JpegImagePlugin", "GIF": "GifImagePlugin",
                   "WEBP": "WebPImagePlugin", "BMP": "BmpImagePlugin"}

REDUCING_GAP = 3.0
"""Past this ratio, ``resize`` first reduces by a whole factor (box filter), as Pillow does."""

BAND_PIXELS = 1 << 20
"""Pixels in one band of ``resize``, ``to_grey`` and ``has_alpha``: 4 MiB at 4 bytes each."""

PY_DECODER_BYTES = 100
"""Bytes of budget each byte of file costs in a format Pillow decodes in pure Python."""

_BAND_WORK = 4 * 4 * BAND_PIXELS  # a band's copies alive at once, with margin
_FRAME_FLOOR = 64 * 1024  # each frame costs ~35 µs of Python besides its pixels: as many bytes
_SMALL_MODES = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16L": 2, "I;16B": 2, "I;16N": 2}
_DECODER_COPIES = {"WEBP": 4}  # RGBA-sized buffers a decoder holds until it is let go
_KEPT_COPIES = {"AVIF": 3, "HEIF": 3}  # ... and those it holds as long as the image
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_SIXTEEN_BIT = frozenset({"I;16", "I;16L", "I;16B", "I;16N"})
_TRANSPOSE = {  # EXIF orientation -> what turns it upright (as ImageOps.exif_transpose)
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
SWAPPING = frozenset({Image.Transpose.TRANSPOSE, Image.Transpose.TRANSVERSE,
                       Image.Transpose.ROTATE_90, Image.Transpose.ROTATE_270})
_HEAVY = {  # formats whose decoder costs several times the pixels: what to send instead
    "WEBP": ", or PNG or JPEG (a WebP takes 5 times its pixels to decode)",
    "AVIF": ", or PNG or JPEG (an AVIF takes 4 times its pixels to decode)",
    "HEIF": ", or PNG or JPEG (a HEIF takes 4 times its pixels to decode)",
}
_SLOW = ", or PNG or JPEG (Pillow decodes this one in Python, slowly: its cost counts the time)"


@dataclass(frozen=True)
class Cost:
    """An image's declared size and the estimated peak bytes of decoding and fitting it."""

    label: str
    width: int
    height: int
    bytes: int
    frames: int = 1
    """Frames counted in ``bytes``: more than one only for an animation sent whole."""
    note: str | None = None
    """Why it is refused whatever the limits (Pillow's own bomb limit), if it is."""
    hint: str = ""
    """What else to send, for a format that costs more than its pixels (``", or PNG..."``)."""

    def refusal(self, limits: ImageLimits) -> str | None:
        """Why ``limits`` refuse this image undecoded (the text of the notice), or ``None``."""
        if self.note is not None:
            return self.note
        if self.width * self.height > limits.max_pixels:
            return pixel_refusal(self.label, (self.width, self.height), limits)
        if self.bytes > limits.max_decoded_bytes:
            return (
                f"{self.label} of {self.width}x{self.height} px would take about "
                f"{_mb(self.bytes)} of memory to decode and fit, over the "
                f"{_mb(limits.max_decoded_bytes)} budget per image (max_decoded_bytes); it was "
                f"not decoded or sent. Emit a smaller image{self.hint}"
            )
        return None


def label(true_type: str, declared: str | None = None) -> str:
    """How a notice names an image: ``PNG image (image/png)``, plus what it was declared as."""
    if declared and declared != true_type:
        return f"{describe_media_type(true_type)} ({true_type}, declared as {declared})"
    return f"{describe_media_type(true_type)} ({true_type})"


def pixel_refusal(label: str, size: tuple[int, int] | None, limits: ImageLimits) -> str:
    """The notice for an image over ``limits.max_pixels`` (``size`` ``None``: over Pillow's)."""
    limit = f"{limits.max_pixels / 1_000_000:g} megapixel safety limit"
    if size is None:
        pillow_limit = 2 * (Image.MAX_IMAGE_PIXELS or 0) / 1_000_000
        what = (
            f"{label} declares more than {pillow_limit:,.0f} megapixels, Pillow's "
            "decompression-bomb limit"
        )
    else:
        mp = size[0] * size[1] / 1_000_000
        what = f"{label} declares {size[0]}x{size[1]} px ({mp:,.1f} megapixels), over the {limit}"
    return f"{what}; it was not decoded or sent. Emit a smaller image"


def plugins(true_type: str) -> tuple[str, ...] | None:
    """The Pillow formats that decode ``true_type``, their plugins registered: the one needed
    imported alone where Pillow names it so, else through ``Image.init`` (which imports every
    plugin: a few tens of milliseconds). ``None`` when Pillow here has none."""
    formats = PILLOW_FORMATS.get(true_type)
    if formats is None:
        return None
    for name in formats:
        if name not in Image.OPEN and name in _PLUGIN_MODULES:
            with contextlib.suppress(ImportError):  # then Image.init looks for it
                importlib.import_module(f"PIL.{_PLUGIN_MODULES[name]}")
    if not all(f in Image.OPEN for f in formats):
        Image.init()
    return formats if all(f in Image.OPEN for f in formats) else None


def inspect(payload: ImagePayload, limits: ImageLimits) -> Cost | None:
    """The cost of preparing ``payload`` for ``limits``, from its header only.

    ``None`` when the bytes are no image Pillow can open here: nothing will be decoded. Never
    raises.
    """
    name = "image"
    try:
        data = bytes(payload.data)
        true_type = sniff_media_type(data)
        if true_type is None or true_type not in PILLOW_FORMATS:
            return None
        name = label(true_type, normalize_media_type(payload.declared_type))
        if true_type == WEBP:
            return webp_cost(data, name, limits)
        formats = plugins(true_type)
        if formats is None:
            return None
        with Image.open(io.BytesIO(data), formats=list(formats)) as img:
            try:
                frames = max(1, int(getattr(img, "n_frames", 1)))
            except Exception:  # a frame after the first is unreadable: only the first is sent
                frames = 1
            return image_cost(img, data, name, limits, frames=frames)
    except Image.DecompressionBombError:
        return Cost(name, 0, 0, 0, note=pixel_refusal(name, None, limits))
    except Exception:  # prepare_image will say what is wrong with it
        return None


def webp_cost(
    data: bytes, label: str, limits: ImageLimits, many: bool = False
) -> Cost | None:
    """The cost of a WebP from its first chunk, before Pillow (which allocates the canvas on
    opening) sees it; ``None`` if that chunk is unreadable."""
    size = webp_size(data)
    if size is None:
        return None
    return _cost(label, "WEBP", size, "RGBA", limits, many, file_bytes=len(data))


def webp_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from a WebP's first chunk: the canvas (VP8X) or the bitstream.

    libwebp refuses a frame larger than the canvas, so the canvas bounds what it decodes.
    """
    if len(data) < 30 or data[:4] != b"RIFF" or data[8:12] != b"WEBP":
        return None
    kind, body = data[12:16], data[20:30]
    if kind == b"VP8X":
        return 1 + int.from_bytes(body[4:7], "little"), 1 + int.from_bytes(body[7:10], "little")
    if kind == b"VP8L" and body[0] == 0x2F:
        bits = int.from_bytes(body[1:5], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if kind == b"VP8 " and body[3:6] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", body[6:10])
        return width & 0x3FFF, height & 0x3FFF
    return None


def image_cost(
    img: Image.Image,
    data: bytes,
    label: str,
    limits: ImageLimits,
    many: bool = False,
    *,
    frames: int = 1,
) -> Cost:
    """The cost of ``img`` (opened, not loaded; ``data``: its file), first frame only unless
    it is an animated GIF that ``limits`` let through whole and whose ``frames`` all fit the
    budget (then ``Cost.frames == frames``)."""
    fmt = img.format or ""
    size = img.size
    if fmt == "ICO":  # the entry decoded may be larger than the directory says
        size = max(size, _ico_size(data) or size, key=lambda s: s[0] * s[1])
    extra = 0
    if fmt in ("JPEG", "MPO") and img.info.get("progressive"):
        extra = _coefficient_bytes(img)
    elif fmt == "TIFF":
        extra = _tiff_strip_bytes(img) + len(data)
    tiles = getattr(img, "tile", None) or ()  # ImageFile's; the stubs give Image none
    python = any(getattr(t, "codec_name", "") in Image.DECODERS for t in tiles)
    first = _cost(label, fmt, size, img.mode, limits, many, file_bytes=len(data),
                  decoder_bytes=extra, python_decoder=python)
    whole = (
        frames > 1
        and fmt == "GIF"
        and limits.allow_animated_gif
        and GIF in limits.formats
        and fit_size(*size, limits.side_limit(many), limits) == size
        and frames * size[0] * size[1] <= limits.max_pixels
    )
    if whole:
        every = _cost(label, fmt, size, img.mode, limits, many, file_bytes=len(data),
                      frames=frames)
        if every.bytes <= limits.max_decoded_bytes:
            return every
    return first


def fit_size(width: int, height: int, side_limit: int, limits: ImageLimits) -> tuple[int, int]:
    """The largest size, aspect kept, within the hard side limit and the default targets."""
    long_side, short_side = max(width, height), min(width, height)
    scale = min(1.0, side_limit / long_side)
    if limits.target_long_side is not None:
        scale = min(scale, limits.target_long_side / long_side)
    if limits.target_short_side is not None:
        scale = min(scale, limits.target_short_side / short_side)
    if limits.target_megapixels is not None:
        scale = min(scale, math.sqrt(limits.target_megapixels * 1_000_000 / (width * height)))
    if scale >= 1.0:
        return width, height
    # The epsilon keeps 3000 * (1568 / 3000) at 1568, not 1567.
    return max(1, math.floor(width * scale + 1e-9)), max(1, math.floor(height * scale + 1e-9))


def pixel_bytes(mode: str) -> int:
    """Bytes Pillow holds per pixel of ``mode`` (RGB too takes 4)."""
    return _SMALL_MODES.get(mode, 4)


def eight_bit_mode(mode: str) -> str:
    """The mode ``prepare_image`` converts ``mode`` to before it scales and encodes."""
    if mode in ("L", "LA", "RGB", "RGBA"):
        return mode
    if mode in ("1", "I", "F") or mode.startswith("I;16"):
        return "L"
    if mode == "La":
        return "LA"
    if mode in ("P", "PA", "RGBa") or "A" in mode:
        return "RGBA"
    return "RGB"


def _cost(
    label: str,
    fmt: str,
    size: tuple[int, int],
    mode: str,
    limits: ImageLimits,
    many: bool,
    *,
    file_bytes: int,
    decoder_bytes: int = 0,
    python_decoder: bool = False,
    frames: int = 1,
) -> Cost:
    width, height = size
    if width <= 0 or height <= 0:
        return Cost(label, width, height, 0, frames)
    target = fit_size(width, height, limits.side_limit(many), limits)
    w, h = width, height
    if fmt in ("JPEG", "MPO") and target != size:  # drafted: decoded at 1/scale
        scale = next(s for s in (8, 4, 2, 1) if min(w // target[0], h // target[1]) >= s)
        w, h = -(-w // scale), -(-h // scale)
    area = w * h
    # While decoding: the pixels, the decoder's buffers (freed once it is done: WebP's are
    # let go by prepare_image), and for an animation every frame after the first, as RGB(A),
    # plus the one kept for disposal.
    decoded = area * pixel_bytes(mode)
    kept = area * 4 * _KEPT_COPIES.get(fmt, 0)
    peak = decoded + kept + decoder_bytes + area * 4 * _DECODER_COPIES.get(fmt, 0)
    if frames > 1:
        peak += (frames - 1) * max(area * 4, _FRAME_FLOOR) + 2 * area * 4
    # Then, with the pixels still held: to 8 bits, scaled, encoded.
    fit = decoded + kept + encode_cap(limits)
    band = min(_BAND_WORK, 4 * area * 4)
    eight = eight_bit_mode(mode)
    if eight != mode:
        fit += area * pixel_bytes(eight) + band
    if target != (w, h):
        fit += 2 * target[0] * target[1] * 4 + band  # the result, and its conversion
    else:
        fit += 3 * area * 4  # alpha dropped, flattened or turned upright at full size
    total = max(peak, fit)
    hint = _HEAVY.get(fmt, "")
    if python_decoder:
        total += PY_DECODER_BYTES * file_bytes
        hint = _SLOW
    return Cost(label, width, height, total, frames, hint=hint)


def encode_cap(limits: ImageLimits) -> int:
    """Bytes an encoder may write before it is stopped: 1.5 times what fits the base64 limit."""
    return 3 * (limits.max_base64_bytes * 3 // 4) // 2 + 65536


def _mb(size: int) -> str:
    return f"{size / MB:,.0f} MiB"


def _coefficient_bytes(img: Image.Image) -> int:
    """What libjpeg holds for a progressive JPEG: every component's DCT coefficients (2 bytes
    a sample) at full size, each subsampled component at its own resolution."""
    width, height = img.size
    layers = getattr(img, "layer", None) or [(0, 1, 1, 0)] * len(img.getbands())
    h_max = max(max(layer[1] for layer in layers), 1)
    v_max = max(max(layer[2] for layer in layers), 1)
    samples = sum(
        -(-width * max(layer[1], 1) // h_max) * -(-height * max(layer[2], 1) // v_max)
        for layer in layers
    )
    return 2 * samples + 2 * 64 * (width + height)  # and padding to whole blocks


def _tiff_strip_bytes(img: Image.Image) -> int:
    """The largest strip or tile libtiff decodes at once (the whole image if unknown)."""
    width, height = img.size
    try:
        tags = img.tag_v2  # type: ignore[attr-defined]
        bits = tags.get(258, (8,))
        bits = sum(bits) if isinstance(bits, tuple) else int(bits) * int(tags.get(277, 1))
        per_pixel = max(4, -(-bits // 8))  # the RGBA path takes 4, whatever is stored
        if 322 in tags and 323 in tags:
            return int(tags[322]) * int(tags[323]) * per_pixel
        rows = min(height, int(tags.get(278, height)))
        return width * max(1, rows) * per_pixel
    except Exception:
        return width * height * 8


def _ico_size(data: bytes) -> tuple[int, int] | None:
    """The largest size any ICO entry declares inside it (PNG or BMP header), or ``None``.

    Pillow reads an entry's real size only when it decodes it, which can be far larger
    than the directory says.
    """
    count = int.from_bytes(data[4:6], "little")
    best: tuple[int, int] | None = None
    for index in range(count):
        entry = data[6 + 16 * index : 22 + 16 * index]
        if len(entry) < 16:
            break
        width, height = entry[0] or 256, entry[1] or 256
        offset = int.from_bytes(entry[12:16], "little")
        head = data[offset : offset + 26]
        if head[:8] == _PNG_MAGIC and len(head) >= 24:
            width, height = struct.unpack(">II", head[16:24])
        elif len(head) >= 12 and int.from_bytes(head[:4], "little") == 12:
            width, height = struct.unpack("<HH", head[4:8])
        elif len(head) >= 12:
            w, h = struct.unpack("<ii", head[4:12])
            width, height = abs(w), abs(h)
        if best is None or width * height > best[0] * best[1]:
            best = (width, height)
    return best


# -- the lean operations the estimate assumes ---------------------------------------------------


def _bands(img: Image.Image, multiple: int = 1) -> list[tuple[int, int, int, int]]:
    """Boxes of whole rows that cover ``img``, each ~``BAND_PIXELS`` (rows: a multiple of
    ``multiple``, but the last)."""
    width, height = img.size
    rows = max(1, BAND_PIXELS // max(1, width))
    rows = max(multiple, rows - rows % multiple)
    return [(0, top, width, min(height, top + rows)) for top in range(0, height, rows)]


def resize(img: Image.Image, size: tuple[int, int], premultiply: bool,
           resample: Image.Resampling = Image.Resampling.LANCZOS,
           reducing_gap: float | None = REDUCING_GAP) -> Image.Image:
    """``img`` (L, LA, RGB or RGBA) scaled down to ``size`` with ``resample`` (Lanczos, or a
    filter that reaches no further, such as BOX).

    As Pillow's ``resize(size, resample, reducing_gap=REDUCING_GAP)`` does, it first reduces
    by a whole factor (box filter) when the ratio passes ``REDUCING_GAP``, then scales the
    rows, then the columns; but it does so band by band of the result, so besides the result
    it holds only one band of rows at a time (about ``BAND_PIXELS``), never a full-size copy
    or a full-height intermediate. An image of at most ``2 * BAND_PIXELS`` is scaled by
    Pillow in one call: its copies then take no more than the bands' (``_BAND_WORK``), and
    the bands' own work would double the time. ``premultiply``: scale with premultiplied
    alpha, so transparent pixels do not bleed their colour. ``reducing_gap=None``: no reduction
    by a whole factor first, so every pixel of the result is ``resample`` over the source
    exactly (slower on a large ratio).
    """
    width, height = img.size
    out_w, out_h = size
    if (width, height) == size:
        return img
    work = {"LA": "La", "RGBA": "RGBa"}.get(img.mode, img.mode) if premultiply else img.mode
    if width * height <= 2 * BAND_PIXELS:
        whole = img.convert(work) if work != img.mode else img
        out = whole.resize(size, resample, reducing_gap=reducing_gap)
        return out.convert(img.mode) if work != img.mode else out
    factor_x = max(1, int(width / out_w / reducing_gap)) if reducing_gap else 1
    factor_y = max(1, int(height / out_h / reducing_gap)) if reducing_gap else 1
    reduced_h = -(-height // factor_y)
    scale = reduced_h / out_h  # reduced rows per row of the result
    margin = math.ceil(3.0 * max(scale, 1.0)) + 1  # Lanczos reaches 3 * scale rows each way
    per_band = max(1, BAND_PIXELS // width // factor_y)  # reduced rows made per band
    out_rows = max(1, int(per_band / scale))

    def rows(start: int, stop: int) -> Image.Image:
        """Reduced rows ``start:stop``, scaled to the result's width."""
        band = img.crop((0, start * factor_y, width, min(height, stop * factor_y)))
        if work != img.mode:
            band = band.convert(work)
        if factor_x > 1 or factor_y > 1:
            band = band.reduce((factor_x, factor_y))
        return band.resize((out_w, band.height), resample) if band.width != out_w else band

    out = Image.new(work, size)
    kept, kept_top = Image.new(work, (out_w, 0)), 0  # scaled rows made for the last band
    for top in range(0, out_h, out_rows):
        bottom = min(out_h, top + out_rows)
        first = max(0, int(top * scale) - margin)
        last = min(reduced_h, math.ceil(bottom * scale) + margin)
        done = max(first, kept_top + kept.height)  # rows from here on are new
        middle = Image.new(work, (out_w, last - first))
        if done > first:  # reuse the rows this band shares with the last one
            middle.paste(kept.crop((0, first - kept_top, out_w, done - kept_top)), (0, 0))
        if last > done:
            middle.paste(rows(done, last), (0, done - first))
        box = (0.0, top * scale - first, float(out_w), bottom * scale - first)
        out.paste(middle.resize((out_w, bottom - top), resample, box=box), (0, top))
        kept, kept_top = middle, first
    del kept, middle
    return out.convert(img.mode) if work != img.mode else out


def to_grey(img: Image.Image, convert: Callable[[Image.Image], Image.Image]) -> Image.Image:
    """An L image of ``img``'s size, made band by band by ``convert`` (a band -> L)."""
    out = Image.new("L", img.size)
    for box in _bands(img):
        out.paste(convert(img.crop(box)), box[:2])
    return out


def extrema(img: Image.Image, convert: Callable[[Image.Image], Image.Image]) -> tuple[float, float]:
    """The lowest and highest value of single-band ``img``, each band passed through
    ``convert`` first (e.g. 16-bit to ``I``, which ``getextrema`` takes)."""
    low, high = math.inf, -math.inf
    for box in _bands(img):
        band = cast(tuple[float, float], convert(img.crop(box)).getextrema())  # single band
        low, high = min(low, band[0]), max(high, band[1])
    return low, high


def has_alpha(img: Image.Image) -> bool:
    """Whether an LA or RGBA ``img`` has a pixel that is not fully opaque."""
    if img.mode not in ("LA", "RGBA"):
        return False
    return any(img.crop(box).getchannel("A").getextrema() != (255, 255) for box in _bands(img))


def orientation(img: Image.Image) -> Image.Transpose | None:
    """What turns ``img`` upright per its EXIF orientation (``None``: it is, or bad EXIF)."""
    try:
        return _TRANSPOSE.get(img.getexif().get(0x0112, 1))
    except Exception:  # bad EXIF: keep the pixels as stored
        return None


def eight_bit(img: Image.Image) -> Image.Image:
    """``img`` in one of L, LA, RGB, RGBA (16-bit and float samples scaled, not clipped)."""
    mode = img.mode
    if mode in ("L", "LA", "RGB", "RGBA"):
        return img
    if mode in _SIXTEEN_BIT or mode in ("I", "F"):  # band by band: no full-size 32-bit copy

        def wide(band: Image.Image) -> Image.Image:
            return band.convert("I") if mode in _SIXTEEN_BIT else band

        low, high = extrema(img, wide)
        if mode == "F" or low < 0 or high > 65535:
            span = (high - low) or 1
            return to_grey(
                img, lambda band: band.point(lambda v: (v - low) * 255.0 / span).convert("L")
            )
        if high > 255:
            return to_grey(
                img, lambda band: wide(band).point(lambda v: v / 256.0).convert("L")
            )
        return to_grey(img, lambda band: wide(band).convert("L"))
    if mode == "P":
        transparent = "transparency" in img.info or getattr(img.palette, "mode", "") == "RGBA"
        return img.convert("RGBA" if transparent else "RGB")
    if mode in ("1", "La"):
        return img.convert("L" if mode == "1" else "LA")
    if mode in ("PA", "RGBa") or "A" in mode:
        return img.convert("RGBA")
    return img.convert("RGB")  # CMYK, YCbCr, LAB, HSV, RGBX, ...
