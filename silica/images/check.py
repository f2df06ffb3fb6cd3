"""Check and fit one image to a provider's limits: the only module here that imports Pillow.

``prepare_image`` turns what a tool emitted into either an ``ImageBlock`` that the provider
will accept, or a ``TextBlock`` notice starting ``[image dropped:`` that says what was
dropped and why. It never raises.

What it does, in order:

1. Sniff the magic bytes; they win over the declared type. Unknown bytes, SVG, PDF, and
   HEIC/AVIF without a Pillow decoder here are dropped with a notice.
2. Read only the header and refuse a decompression bomb (width * height over
   ``limits.max_pixels``) before any pixel is decoded. ``Image.MAX_IMAGE_PIXELS`` is left
   alone (it is process-wide); Pillow's own ``DecompressionBombError`` is caught too.
3. Decode fully, so truncated or corrupt files are caught.
4. Keep the original bytes, untouched, when the format is accepted, the size needs no change,
   the base64 fits and the pixel mode is plain (no CMYK JPEG, no 16-bit PNG; for a PNG,
   every chunk checksum right, since libpng checks what Pillow skips). EXIF orientation is
   left as it is in kept bytes.
5. Otherwise re-encode: upright per EXIF, 8-bit RGB/RGBA/L/LA, scaled down (Lanczos, aspect
   kept) to the hard side limit and the default targets, then JPEG (if the source was JPEG)
   or PNG; if the base64 is still too big, JPEG at falling quality for opaque images, then
   smaller sizes, down to a floor of ``MIN_SIDE`` px.

Animated images: an animated GIF is sent whole when the limits allow animated GIFs, it needs
no change and all its frames decode within the pixel budget (frames * width * height <=
``max_pixels``). Otherwise, like any other multi-frame image (APNG, animated WebP,
multi-page TIFF), only its first frame is sent, as a still image, and the block's ``source``
says so, e.g. ``"json (first frame of 12)"``.

Warnings Pillow raises while an image is prepared are silenced (``warnings.catch_warnings``).
"""

from __future__ import annotations

import io
import math
import struct
import warnings
import zlib

from PIL import Image, ImageOps

from silica.blocks import ImageBlock, TextBlock
from silica.images.limits import ANTHROPIC, GIF, JPEG, PNG, ImageLimits
from silica.images.payload import ImagePayload
from silica.images.sniff import describe_media_type, normalize_media_type, sniff_media_type

MIN_SIDE = 32
"""No image is scaled below this long side to make it fit the byte limit."""

JPEG_QUALITIES = (85, 70, 55, 40)
"""Qualities tried, in order, when an image must be JPEG-encoded to fit."""

MAX_ROUNDS = 12
"""Sizes tried, each smaller than the last, before an image is given up on."""

_PILLOW_FORMATS: dict[str, tuple[str, ...]] = {
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

_NEVER_SENT = {
    "image/svg+xml": "render it to PNG first",
    "application/pdf": "render the pages you need to PNG first",
}

_PLAIN_MODES = frozenset({"1", "L", "LA", "P", "RGB", "RGBA"})
_SIXTEEN_BIT = frozenset({"I;16", "I;16L", "I;16B", "I;16N"})
_SWAPPING_ORIENTATIONS = frozenset({5, 6, 7, 8})


class _Dropped(Exception):
    """Raised inside this module to end with a notice."""


def prepare_image(
    payload: ImagePayload, limits: ImageLimits = ANTHROPIC, *, many: bool = False
) -> ImageBlock | TextBlock:
    """Fit ``payload`` to ``limits``, or explain in a ``TextBlock`` why it was dropped.

    ``many``: the request holds more than ``limits.many_threshold`` images, so the stricter
    ``limits.max_side_many`` applies. Never raises. A returned ``ImageBlock`` has a
    ``media_type`` that matches its bytes and is in ``limits.formats``, ``width``/``height``
    that match its bytes and fit the side limit, a base64 form within
    ``limits.max_base64_bytes``, and ``source`` copied from the payload (plus a note when
    only the first frame of an animation was kept). Its bytes are the payload's own bytes,
    unchanged, whenever nothing had to change.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _prepare(payload, limits, many)
    except _Dropped as notice:
        return TextBlock(text=f"[image dropped: {notice}]")
    except Exception as exc:  # never let a bad image break a tool result
        return TextBlock(
            text=f"[image dropped: an unexpected error occurred while checking the image "
            f"({type(exc).__name__}: {exc}); it was not sent]"
        )


def _prepare(payload: ImagePayload, limits: ImageLimits, many: bool) -> ImageBlock:
    data = payload.data
    if not isinstance(data, bytes):
        data = bytes(data)
    declared = normalize_media_type(payload.declared_type)
    if not data:
        raise _Dropped("the tool emitted an empty image (0 bytes); nothing was sent")
    true_type = sniff_media_type(data)
    if true_type is None:
        claimed = f"declared as {declared}" if declared else "with no declared type"
        raise _Dropped(
            f"{len(data):,} bytes {claimed} are not in any known image format; "
            "emit PNG or JPEG bytes instead"
        )
    label = f"{describe_media_type(true_type)} ({true_type})"
    if declared and declared != true_type:
        label = f"{describe_media_type(true_type)} ({true_type}, declared as {declared})"
    if true_type in _NEVER_SENT:
        raise _Dropped(f"{label} cannot be sent to the model; {_NEVER_SENT[true_type]}")
    pillow_formats = _PILLOW_FORMATS.get(true_type)
    Image.init()
    if not pillow_formats or not all(f in Image.OPEN for f in pillow_formats):
        raise _Dropped(
            f"{label} cannot be decoded here, so it was not sent; convert it to PNG or JPEG first"
        )
    return _fit(data, true_type, label, payload.source, limits, many, pillow_formats)


def _fit(
    data: bytes,
    true_type: str,
    label: str,
    source: str,
    limits: ImageLimits,
    many: bool,
    pillow_formats: tuple[str, ...],
) -> ImageBlock:
    try:
        img = Image.open(io.BytesIO(data), formats=list(pillow_formats))
    except Image.DecompressionBombError:
        raise _bomb(label, None, limits) from None
    except Exception as exc:
        raise _corrupt(label, exc) from None
    with img:
        width, height = img.size
        if width <= 0 or height <= 0:
            raise _Dropped(f"{label} declares an empty size ({width}x{height}); nothing was sent")
        if width * height > limits.max_pixels:
            raise _bomb(label, (width, height), limits)
        frames = _frame_count(img)
        broken = frames is None  # then only the first frame may be sent, re-encoded
        frames = frames or 2
        side_limit = limits.side_limit(many)
        target = _fit_size(width, height, side_limit, limits)
        animated = frames > 1 and img.format != "MPO"  # MPO: a JPEG with extra pictures
        keep_animation = animated and true_type == GIF and limits.allow_animated_gif
        keep = (
            not broken
            and true_type in limits.formats
            and target == (width, height)
            and _base64_len(len(data)) <= limits.max_base64_bytes
            and _plain_mode(img, true_type, data)
            and (true_type != PNG or _png_intact(data))
            and (not animated or (keep_animation and frames * width * height <= limits.max_pixels))
        )
        if keep and (not animated or _all_frames_decode(img, frames)):
            _load(img, label)  # the first frame, and every frame for a kept animation
            return ImageBlock(
                media_type=true_type, data=data, width=width, height=height, source=source
            )
        if animated:
            note = (
                "first frame only, the rest is unreadable" if broken else f"first frame of {frames}"
            )
            source = f"{source} ({note})" if source else note
            _rewind(img, label)
        drafted = target != (width, height) and img.format in ("JPEG", "MPO")
        if drafted:
            img.draft(img.mode, target)  # decode at 1/2, 1/4 or 1/8 scale: faster, less memory
        _load(img, label)
        if not drafted and img.size != (width, height):  # ICO: the real size shows on load
            width, height = img.size
            if width * height > limits.max_pixels:
                raise _bomb(label, (width, height), limits)
            target = _fit_size(width, height, side_limit, limits)
        frame, swapped = _upright(img)
        if swapped:
            target = (target[1], target[0])
        return _reencode(frame, target, true_type, label, source, limits)


def _reencode(
    frame: Image.Image,
    target: tuple[int, int],
    true_type: str,
    label: str,
    source: str,
    limits: ImageLimits,
) -> ImageBlock:
    """Encode ``frame`` at ``target`` size or smaller until its base64 fits."""
    frame = _eight_bit(frame)
    alpha = _has_alpha(frame)
    if not alpha and frame.mode in ("LA", "RGBA"):
        frame = frame.convert(frame.mode[:-1])
    png_ok, jpeg_ok = PNG in limits.formats, JPEG in limits.formats
    if not png_ok and not jpeg_ok:
        raise _Dropped(
            f"{label} would have to be converted, but these limits accept neither PNG nor "
            "JPEG; it was not sent"
        )
    if alpha and not png_ok:  # JPEG only: flatten onto white
        backdrop = Image.new("RGB", frame.size, "white")
        backdrop.paste(frame.convert("RGBA"), mask=frame.convert("RGBA").getchannel("A"))
        frame, alpha = backdrop, False
    plans: list[tuple[str, int | None]] = []
    if jpeg_ok and (true_type == JPEG or not png_ok):
        plans += [("JPEG", q) for q in JPEG_QUALITIES]
    else:
        plans.append(("PNG", None))
        if jpeg_ok and not alpha:
            plans += [("JPEG", q) for q in JPEG_QUALITIES]
    size = target
    last: dict[tuple[str, int | None], int] = {}  # plan -> encoded bytes at the previous size
    area_ratio = 1.0
    for _ in range(MAX_ROUNDS):
        scaled = _resize(frame, size)
        for plan in plans:
            if plan in last and _base64_len(int(last[plan] * area_ratio)) > limits.max_base64_bytes:
                last[plan] = int(last[plan] * area_ratio)  # predicted still too big: skip it
                continue
            encoded = _encode(scaled, *plan)
            if _base64_len(len(encoded)) <= limits.max_base64_bytes:
                return ImageBlock(
                    media_type=PNG if plan[0] == "PNG" else JPEG,
                    data=encoded,
                    width=scaled.width,
                    height=scaled.height,
                    source=source,
                )
            last[plan] = len(encoded)
        # Shrink the area by the ratio still needed (10% margin), and at least by a quarter.
        needed = limits.max_base64_bytes / _base64_len(min(last.values()))
        ratio = min(0.75, 0.9 * math.sqrt(needed))
        new_size = (max(1, math.floor(size[0] * ratio)), max(1, math.floor(size[1] * ratio)))
        if max(new_size) < MIN_SIDE or new_size == size:
            break
        area_ratio = (new_size[0] * new_size[1]) / (size[0] * size[1])
        size = new_size
    raise _Dropped(
        f"{label} of {target[0]}x{target[1]} px could not be made to fit "
        f"{limits.max_base64_bytes / 1024 / 1024:.1f} MB (base64) even at {MIN_SIDE} px; "
        "it was not sent. Emit a smaller or simpler image"
    )


def _fit_size(width: int, height: int, side_limit: int, limits: ImageLimits) -> tuple[int, int]:
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


def _frame_count(img: Image.Image) -> int | None:
    """How many frames ``img`` has, or ``None`` if a frame after the first is unreadable."""
    try:
        return max(1, int(getattr(img, "n_frames", 1)))
    except Exception:
        return None


def _plain_mode(img: Image.Image, true_type: str, data: bytes) -> bool:
    """Whether every decoder copes with this pixel mode (no CMYK JPEG, no 16-bit PNG)."""
    if true_type == JPEG:
        return img.mode in ("L", "RGB")
    if true_type == PNG and data[24:25] == b"\x10":  # IHDR bit depth 16, even for RGB(A)
        return False
    return img.mode in _PLAIN_MODES


def _png_intact(data: bytes) -> bool:
    """Whether every PNG chunk up to IEND is whole and its CRC right.

    Pillow does not check IDAT and IEND checksums, libpng does: a PNG that fails here is
    re-encoded from the pixels Pillow decoded rather than sent as it is.
    """
    position = 8
    while position + 12 <= len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        end = position + 8 + length
        if end + 4 > len(data):
            return False
        (crc,) = struct.unpack(">I", data[end : end + 4])
        if zlib.crc32(data[position + 4 : end]) != crc:
            return False
        if data[position + 4 : position + 8] == b"IEND":
            return True
        position = end + 4
    return False


def _all_frames_decode(img: Image.Image, frames: int) -> bool:
    """Whether every frame decodes within the canvas; leaves ``img`` at its first frame."""
    size = img.size
    try:
        for index in range(frames):
            img.seek(index)
            img.load()
        ok = img.size == size  # Pillow grows the canvas for a frame that sticks out of it
    except Exception:
        ok = False
    try:
        img.seek(0)
    except Exception:
        return False
    return ok


def _rewind(img: Image.Image, label: str) -> None:
    try:
        img.seek(0)
    except Exception as exc:
        raise _corrupt(label, exc) from None


def _load(img: Image.Image, label: str) -> None:
    try:
        img.load()
    except Image.DecompressionBombError:
        raise _Dropped(
            f"{label} holds a frame too large to decode safely; it was not sent"
        ) from None
    except Exception as exc:
        raise _corrupt(label, exc) from None


def _upright(img: Image.Image) -> tuple[Image.Image, bool]:
    """``img`` turned upright per its EXIF orientation, and whether width/height swapped."""
    try:
        orientation = img.getexif().get(0x0112, 1)
        if orientation in (2, 3, 4, 5, 6, 7, 8):
            return ImageOps.exif_transpose(img), orientation in _SWAPPING_ORIENTATIONS
    except Exception:  # bad EXIF: keep the pixels as stored
        pass
    return img, False


def _eight_bit(img: Image.Image) -> Image.Image:
    """``img`` in one of L, LA, RGB, RGBA (16-bit and float samples scaled, not clipped)."""
    mode = img.mode
    if mode in ("L", "LA", "RGB", "RGBA"):
        return img
    if mode in _SIXTEEN_BIT or mode in ("I", "F"):
        img = img.convert("I") if mode in _SIXTEEN_BIT else img
        low, high = img.getextrema()
        if mode == "F" or low < 0 or high > 65535:
            span = (high - low) or 1
            return img.point(lambda v: (v - low) * 255.0 / span).convert("L")
        return img.point(lambda v: v / 256.0).convert("L") if high > 255 else img.convert("L")
    if mode == "P":
        transparent = "transparency" in img.info or getattr(img.palette, "mode", "") == "RGBA"
        return img.convert("RGBA" if transparent else "RGB")
    if mode in ("1", "La"):
        return img.convert("L" if mode == "1" else "LA")
    if mode in ("PA", "RGBa") or "A" in mode:
        return img.convert("RGBA")
    return img.convert("RGB")  # CMYK, YCbCr, LAB, HSV, RGBX, ...


def _has_alpha(img: Image.Image) -> bool:
    if img.mode not in ("LA", "RGBA"):
        return False
    return img.getchannel("A").getextrema() != (255, 255)


def _resize(img: Image.Image, size: tuple[int, int]) -> Image.Image:
    if img.size == size:
        return img
    if img.mode in ("LA", "RGBA"):  # premultiply so transparent pixels do not bleed colour
        premultiplied = "La" if img.mode == "LA" else "RGBa"
        scaled = img.convert(premultiplied).resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
        return scaled.convert(img.mode)
    return img.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)


def _encode(img: Image.Image, fmt: str, quality: int | None) -> bytes:
    buffer = io.BytesIO()
    if fmt == "PNG":
        img.save(buffer, "PNG", compress_level=6)
    else:
        img.convert("L" if img.mode in ("L", "LA") else "RGB").save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def _base64_len(size: int) -> int:
    return 4 * ((size + 2) // 3)


def _bomb(label: str, size: tuple[int, int] | None, limits: ImageLimits) -> _Dropped:
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
    return _Dropped(f"{what}; it was not decoded or sent. Emit a smaller image")


def _corrupt(label: str, exc: Exception) -> _Dropped:
    reason = str(exc) or type(exc).__name__
    return _Dropped(
        f"{label} is truncated or corrupt and could not be decoded ({reason}); "
        "it was not sent. Check that the tool writes the whole file"
    )
