"""Check and fit one image to a provider's limits (Pillow is imported here and in ``budget``).

``prepare_image`` turns what a tool emitted into either an ``ImageBlock`` that the provider
will accept, or a ``TextBlock`` notice starting ``[image dropped:`` that says what was
dropped and why. It never raises.

What it does, in order:

1. Sniff the magic bytes; they win over the declared type. Unknown bytes, SVG, PDF, and
   HEIC/AVIF without a Pillow decoder here are dropped with a notice.
2. Read only the header and refuse a decompression bomb before any pixel is decoded: width *
   height over ``limits.max_pixels``, or an estimated peak of decoding and fitting it (all
   frames decoded, the decoder's buffers, the conversion's; ``silica.images.budget``) over
   ``limits.max_decoded_bytes``. A WebP is measured before Pillow opens it, since opening
   allocates its canvas. ``Image.MAX_IMAGE_PIXELS`` is left alone (it is process-wide);
   Pillow's own ``DecompressionBombError`` is caught too.
3. Decode fully, so truncated or corrupt files are caught.
4. Keep the original bytes, untouched, when the format is accepted, the size needs no change,
   the base64 fits and the pixel mode is plain (no CMYK JPEG, no 16-bit PNG; for a PNG,
   every chunk checksum right, since libpng checks what Pillow skips). EXIF orientation is
   left as it is in kept bytes.
5. Otherwise re-encode: upright per EXIF, 8-bit RGB/RGBA/L/LA, scaled down (Lanczos, aspect
   kept) to the hard side limit and the default targets, then JPEG (if the source was JPEG)
   or PNG; if the base64 is still too big, JPEG at falling quality for opaque images, then
   smaller sizes, down to a floor of ``MIN_SIDE`` px. The full-size image is converted and
   scaled band by band, and an encoding stops once it is 1.5 times too big, so the memory
   used stays within the estimate of step 2.

Animated images: an animated GIF is sent whole when the limits allow animated GIFs, it needs
no change and all its frames decode within the pixel budget (frames * width * height <=
``max_pixels``) and the decoding budget (``max_decoded_bytes``). Otherwise, like any other
multi-frame image (APNG, animated WebP, multi-page TIFF), only its first frame is sent, as a
still image, and the block's ``source`` says so, e.g. ``"json (first frame of 12)"``.

Warnings Pillow raises while an image is prepared are silenced (``warnings.catch_warnings``).
"""

from __future__ import annotations

import io
import math
import struct
import warnings
import zlib

from PIL import Image

from silica.blocks import ImageBlock, TextBlock
from silica.images import budget
from silica.images.limits import ANTHROPIC, GIF, JPEG, PNG, WEBP, ImageLimits
from silica.images.payload import ImagePayload
from silica.images.png_repair import drop_damaged_ancillary
from silica.images.sniff import normalize_media_type, sniff_media_type

MIN_SIDE = 32
"""No image is scaled below this long side to make it fit the byte limit."""

JPEG_QUALITIES = (85, 70, 55, 40)
"""Qualities tried, in order, when an image must be JPEG-encoded to fit."""

MAX_ROUNDS = 12
"""Sizes tried, each smaller than the last, before an image is given up on."""

_NEVER_SENT = {
    "image/svg+xml": "render it to PNG first",
    "application/pdf": "render the pages you need to PNG first",
}

_PLAIN_MODES = frozenset({"1", "L", "LA", "P", "RGB", "RGBA"})
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
_SWAPPING = frozenset({Image.Transpose.TRANSPOSE, Image.Transpose.TRANSVERSE,
                       Image.Transpose.ROTATE_90, Image.Transpose.ROTATE_270})


class _TooBig(Exception):
    """Raised by ``_Capped`` when an encoding passes its cap."""


class _Capped(io.BytesIO):
    """A buffer that refuses to grow past ``cap`` bytes, so an encoding far too big for the
    byte limit stops there instead of filling memory."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap

    def write(self, data) -> int:  # type: ignore[no-untyped-def, override]
        if self.tell() + memoryview(data).nbytes > self.cap:
            raise _TooBig
        return super().write(data)


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
    label = budget.label(true_type, declared)
    if true_type in _NEVER_SENT:
        raise _Dropped(f"{label} cannot be sent to the model; {_NEVER_SENT[true_type]}")
    pillow_formats = budget.PILLOW_FORMATS.get(true_type)
    Image.init()
    if not pillow_formats or not all(f in Image.OPEN for f in pillow_formats):
        raise _Dropped(
            f"{label} cannot be decoded here, so it was not sent; convert it to PNG or JPEG first"
        )
    source = payload.source
    if true_type == PNG:
        data, dropped = drop_damaged_ancillary(data)
        if dropped:
            note = f"damaged {', '.join(dict.fromkeys(dropped))} chunk dropped"
            source = f"{source} ({note})" if source else note
    return _fit(data, true_type, label, source, limits, many, pillow_formats)


def _fit(
    data: bytes,
    true_type: str,
    label: str,
    source: str,
    limits: ImageLimits,
    many: bool,
    pillow_formats: tuple[str, ...],
) -> ImageBlock:
    if true_type == WEBP:  # Pillow's WebP plugin allocates the whole canvas as it opens one
        early = budget.webp_cost(data, label, limits, many)
        refusal = early.refusal(limits) if early is not None else None
        if refusal:
            raise _Dropped(refusal)
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
        cost = budget.image_cost(img, data, label, limits, many, frames=1 if broken else frames)
        refusal = cost.refusal(limits)
        if refusal:
            raise _Dropped(refusal)
        side_limit = limits.side_limit(many)
        target = budget.fit_size(width, height, side_limit, limits)
        animated = frames > 1 and img.format != "MPO"  # MPO: a JPEG with extra pictures
        keep_animation = animated and true_type == GIF and limits.allow_animated_gif
        keep = (
            not broken
            and true_type in limits.formats
            and target == (width, height)
            and _base64_len(len(data)) <= limits.max_base64_bytes
            and _plain_mode(img, true_type, data)
            and (true_type != PNG or _png_intact(data))
            and (not animated or (keep_animation and cost.frames == frames))
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
        if img.format == "WEBP":  # libwebp's canvases and Pillow's copy: ~4x the pixels
            img._decoder = img.fp = None  # type: ignore[attr-defined]
        if not drafted and img.size != (width, height):  # ICO: the real size shows on load
            width, height = img.size
            if width * height > limits.max_pixels:
                raise _bomb(label, (width, height), limits)
            target = budget.fit_size(width, height, side_limit, limits)
        return _reencode(img, target, _orientation(img), true_type, label, source, limits)


def _reencode(
    frame: Image.Image,
    target: tuple[int, int],
    turn: Image.Transpose | None,
    true_type: str,
    label: str,
    source: str,
    limits: ImageLimits,
) -> ImageBlock:
    """Encode ``frame`` at ``target`` size (as stored; ``turn`` makes it upright after
    scaling) or smaller until its base64 fits."""
    png_ok, jpeg_ok = PNG in limits.formats, JPEG in limits.formats
    if not png_ok and not jpeg_ok:
        raise _Dropped(
            f"{label} would have to be converted, but these limits accept neither PNG nor "
            "JPEG; it was not sent"
        )
    frame = _eight_bit(frame)
    transparent = budget.has_alpha(frame)
    flatten = transparent and not png_ok  # JPEG only: flatten onto white
    alpha = transparent and not flatten
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
    cap = budget.encode_cap(limits)
    for _ in range(MAX_ROUNDS):
        scaled = _finish(budget.resize(frame, size, transparent), transparent, flatten, turn)
        for plan in plans:
            if plan in last and _base64_len(int(last[plan] * area_ratio)) > limits.max_base64_bytes:
                last[plan] = int(last[plan] * area_ratio)  # predicted still too big: skip it
                continue
            encoded = _encode(scaled, *plan, cap)
            if encoded is None:  # stopped at the cap: at least that big
                last[plan] = cap + 1
                continue
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
    if turn in _SWAPPING:
        target = (target[1], target[0])
    raise _Dropped(
        f"{label} of {target[0]}x{target[1]} px could not be made to fit "
        f"{limits.max_base64_bytes / 1024 / 1024:.1f} MB (base64) even at {MIN_SIDE} px; "
        "it was not sent. Emit a smaller or simpler image"
    )


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


def _orientation(img: Image.Image) -> Image.Transpose | None:
    """What turns ``img`` upright per its EXIF orientation (``None``: it is, or bad EXIF)."""
    try:
        return _TRANSPOSE.get(img.getexif().get(0x0112, 1))
    except Exception:  # bad EXIF: keep the pixels as stored
        return None


def _finish(
    scaled: Image.Image, transparent: bool, flatten: bool, turn: Image.Transpose | None
) -> Image.Image:
    """``scaled`` ready to encode: alpha dropped when opaque, flattened onto white when only
    JPEG is taken, turned upright."""
    if not transparent and scaled.mode in ("LA", "RGBA"):
        scaled = scaled.convert(scaled.mode[:-1])
    elif flatten:
        rgba = scaled.convert("RGBA")
        scaled = Image.new("RGB", rgba.size, "white")
        scaled.paste(rgba, mask=rgba.getchannel("A"))
    return scaled.transpose(turn) if turn is not None else scaled


def _eight_bit(img: Image.Image) -> Image.Image:
    """``img`` in one of L, LA, RGB, RGBA (16-bit and float samples scaled, not clipped)."""
    mode = img.mode
    if mode in ("L", "LA", "RGB", "RGBA"):
        return img
    if mode in _SIXTEEN_BIT or mode in ("I", "F"):  # band by band: no full-size 32-bit copy

        def wide(band: Image.Image) -> Image.Image:
            return band.convert("I") if mode in _SIXTEEN_BIT else band

        low, high = budget.extrema(img, wide)
        if mode == "F" or low < 0 or high > 65535:
            span = (high - low) or 1
            return budget.to_grey(
                img, lambda band: band.point(lambda v: (v - low) * 255.0 / span).convert("L")
            )
        if high > 255:
            return budget.to_grey(
                img, lambda band: wide(band).point(lambda v: v / 256.0).convert("L")
            )
        return budget.to_grey(img, lambda band: wide(band).convert("L"))
    if mode == "P":
        transparent = "transparency" in img.info or getattr(img.palette, "mode", "") == "RGBA"
        return img.convert("RGBA" if transparent else "RGB")
    if mode in ("1", "La"):
        return img.convert("L" if mode == "1" else "LA")
    if mode in ("PA", "RGBa") or "A" in mode:
        return img.convert("RGBA")
    return img.convert("RGB")  # CMYK, YCbCr, LAB, HSV, RGBX, ...


def _encode(img: Image.Image, fmt: str, quality: int | None, cap: int) -> bytes | None:
    """``img`` encoded; ``None`` if that passes ``cap`` bytes (encoding stops there)."""
    buffer = _Capped(cap)
    try:
        if fmt == "PNG":
            img.save(buffer, "PNG", compress_level=6)
        else:
            if img.mode not in ("L", "RGB"):
                img = img.convert("L" if img.mode in ("L", "LA") else "RGB")
            img.save(buffer, "JPEG", quality=quality)
    except _TooBig:
        return None
    return buffer.getvalue()


def _base64_len(size: int) -> int:
    return 4 * ((size + 2) // 3)


def _bomb(label: str, size: tuple[int, int] | None, limits: ImageLimits) -> _Dropped:
    return _Dropped(budget.pixel_refusal(label, size, limits))


def _corrupt(label: str, exc: Exception) -> _Dropped:
    reason = str(exc) or type(exc).__name__
    return _Dropped(
        f"{label} is truncated or corrupt and could not be decoded ({reason}); "
        "it was not sent. Check that the tool writes the whole file"
    )
