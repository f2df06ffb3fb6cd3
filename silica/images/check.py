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
4. The image *fits* when its format is accepted, its sides are within the hard side limit,
   its base64 fits and its pixel mode is plain (no CMYK JPEG, no 16-bit PNG; for a PNG,
   every chunk checksum right, since libpng checks what Pillow skips). A fitting image whose
   size needs no change is sent as it came, byte for byte, unless it is a PNG that re-encodes
   to at most ``REENCODE_GAIN`` of its bytes, saving ``REENCODE_MIN_SAVING`` or more (tried
   only where that is likely: a PNG written at zlib's fastest level or stored, one of at
   most 256 colours that is not a palette PNG, and any PNG when ``lossy``). EXIF orientation
   is left as it is in kept bytes.
5. Otherwise re-encode: upright per EXIF, 8-bit RGB/RGBA/L/LA, scaled down (area average,
   aspect kept: it adds no ringing, so flat screenshots stay flat and small) to the hard side
   limit and the default targets, then in the smallest form ``silica.images.encode`` allows:
   JPEG if the source was JPEG; else a palette PNG when that loses nothing (<= 256 colours)
   or a PNG, and only when ``lossy``, a 256-colour PNG or a JPEG too. If the base64 is still
   too big, JPEG at falling quality for opaque images, then smaller sizes, down to a floor
   of ``MIN_SIDE`` px. A fitting image is never made bigger: if no encoding of it at the
   target size is smaller than its own bytes, it is sent as it came (full size; the provider
   scales it down itself). The full-size image is converted and scaled band by band, and an
   encoding stops once it is 1.5 times too big, so the memory used stays within the
   estimate of step 2.

A re-encoded ``ImageBlock`` carries ``original_bytes``, the size of the bytes the tool emitted,
so callers can report bytes before and after.

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
import re
import struct
import warnings
import zlib

from PIL import Image

from silica.blocks import ImageBlock, TextBlock
from silica.images import budget, encode
from silica.images.limits import ANTHROPIC, GIF, JPEG, PNG, WEBP, ImageLimits
from silica.images.payload import ImagePayload
from silica.images.png_repair import drop_damaged_ancillary
from silica.images.sniff import normalize_media_type, sniff_media_type

MIN_SIDE = 32
"""No image is scaled below this long side to make it fit the byte limit."""

REENCODE_GAIN = 0.9
REENCODE_MIN_SAVING = 1024
"""A fitting image that needs no scaling is re-encoded only if that takes at most
``REENCODE_GAIN`` of its bytes and saves at least ``REENCODE_MIN_SAVING``: a few bytes saved
are not worth sending other bytes than the tool's."""

MAX_ROUNDS = 12
"""Sizes tried, each smaller than the last, before an image is given up on."""

_RESAMPLE = Image.Resampling.BOX
"""How images are scaled down: each pixel the average of the area it covers. On a screenshot
Lanczos rings around every glyph (four times the colours); its PNG came out 1.9 times the
size of the area average's, for text no easier to read."""

_NEVER_SENT = {
    "image/svg+xml": "render it to PNG first",
    "application/pdf": "render the pages you need to PNG first",
}

_PLAIN_MODES = frozenset({"1", "L", "LA", "P", "RGB", "RGBA"})


class _Dropped(Exception):
    """Raised inside this module to end with a notice."""


def prepare_image(
    payload: ImagePayload,
    limits: ImageLimits = ANTHROPIC,
    *,
    many: bool = False,
    lossy: bool = False,
) -> ImageBlock | TextBlock:
    """Fit ``payload`` to ``limits``, or explain in a ``TextBlock`` why it was dropped.

    ``many``: the request holds more than ``limits.many_threshold`` images, so the stricter
    ``limits.max_side_many`` applies. ``lossy`` (or ``limits.lossy``): a lossless image may be
    sent in a form that changes pixels (JPEG, 256 colours) when that is smaller; without it,
    only when nothing
    else fits the byte limit. Never raises. A returned ``ImageBlock`` has a ``media_type``
    that matches its bytes and is in ``limits.formats``, ``width``/``height`` that match its
    bytes and fit the side limit, a base64 form within ``limits.max_base64_bytes``, and
    ``source`` copied from the payload (plus a note when only the first frame of an
    animation was kept). Its bytes are the payload's own bytes, unchanged, whenever nothing
    had to change, and never more bytes than the payload's when the payload already fitted
    the hard limits (format, sides, bytes); when they are other bytes, ``original_bytes``
    says how many the payload had.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            block = _prepare(payload, limits, many, lossy or limits.lossy)
        if block.data != payload.data:
            block = block.model_copy(update={"original_bytes": len(payload.data)})
        return block
    except _Dropped as notice:
        return TextBlock(text=f"[image dropped: {notice}]")
    except Exception as exc:  # never let a bad image break a tool result
        return TextBlock(
            text=f"[image dropped: an unexpected error occurred while checking the image "
            f"({type(exc).__name__}: {exc}); it was not sent]"
        )


def _prepare(payload: ImagePayload, limits: ImageLimits, many: bool, lossy: bool) -> ImageBlock:
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
    pillow_formats = budget.plugins(true_type)
    if pillow_formats is None:
        raise _Dropped(
            f"{label} cannot be decoded here, so it was not sent; convert it to PNG or JPEG first"
        )
    source = payload.source
    if true_type == PNG:
        data, dropped = drop_damaged_ancillary(data)
        if dropped:
            note = f"damaged {', '.join(dict.fromkeys(dropped))} chunk dropped"
            source = f"{source} ({note})" if source else note
    return _fit(data, true_type, label, source, limits, many, lossy, pillow_formats)


def _fit(
    data: bytes,
    true_type: str,
    label: str,
    source: str,
    limits: ImageLimits,
    many: bool,
    lossy: bool,
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
        fits = (
            not broken
            and true_type in limits.formats
            and max(width, height) <= side_limit
            and _base64_len(len(data)) <= limits.max_base64_bytes
            and _plain_mode(img, true_type, data)
            and (true_type != PNG or _png_intact(data))
            and (not animated or (keep_animation and cost.frames == frames))
        )
        kept = ImageBlock(media_type=true_type, data=data, width=width, height=height,
                          source=source)
        if fits and target == (width, height) and (
            not animated or _all_frames_decode(img, frames)
        ):
            _load(img, label)  # the first frame, and every frame for a kept animation
            most = min(int(len(data) * REENCODE_GAIN), len(data) - REENCODE_MIN_SAVING)
            if animated or most <= 0 or not _worth_reencoding(img, true_type, data, lossy):
                return kept
            return _reencode(img, target, None, true_type, label, source, limits, lossy,
                             (kept, most))
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
        # A fitting still image is never sent bigger than it came (an animation sent whole
        # would be a different thing, so it is not compared).
        original = (kept, len(data) - 1) if fits and not animated else None
        return _reencode(img, target, budget.orientation(img), true_type, label, source, limits,
                         lossy, original)


def _reencode(
    frame: Image.Image,
    target: tuple[int, int],
    turn: Image.Transpose | None,
    true_type: str,
    label: str,
    source: str,
    limits: ImageLimits,
    lossy: bool,
    original: tuple[ImageBlock, int] | None,
) -> ImageBlock:
    """Encode ``frame`` at ``target`` size (as stored; ``turn`` makes it upright after
    scaling) in its smallest allowed form, or smaller until its base64 fits.

    ``original``: the image as it came, when it fits ``limits`` already, and the most bytes
    an encoding may take to be sent instead; if none is that small, the original is sent."""
    png_ok, jpeg_ok = PNG in limits.formats, JPEG in limits.formats
    if not png_ok and not jpeg_ok:
        raise _Dropped(
            f"{label} would have to be converted, but these limits accept neither PNG nor "
            "JPEG; it was not sent"
        )
    frame = budget.eight_bit(frame)
    transparent = budget.has_alpha(frame)
    flatten = transparent and not png_ok  # JPEG only: flatten onto white
    max_bytes = limits.max_base64_bytes // 4 * 3  # the most raw bytes whose base64 fits
    cap = budget.encode_cap(limits)
    if original is not None:  # one size only: the original fits, so it is the fallback
        max_bytes = min(max_bytes, original[1])
        cap = min(cap, max_bytes)
    size = target
    last: dict[encode.Form, int] = {}  # form -> encoded bytes at the previous size (predicted)
    area_ratio = 1.0
    for _ in range(MAX_ROUNDS):
        scaled = _finish(budget.resize(frame, size, transparent, resample=_RESAMPLE),
                         transparent, flatten, turn)
        too_big = {form for form, n in last.items() if int(n * area_ratio) > max_bytes}
        tried: dict[encode.Form, int] = {}
        best = encode.smallest(
            scaled, limits.formats, lossy=lossy, jpeg_source=true_type == JPEG,
            max_bytes=max_bytes, cap=cap, fallback=original is None, skip=too_big,
            tried=tried)
        if best is not None:
            return ImageBlock(media_type=best.media_type, data=best.data, width=scaled.width,
                              height=scaled.height, source=source)
        if original is not None:
            return original[0]
        last = {form: int(n * area_ratio) for form, n in last.items()} | tried
        # Shrink the area by the ratio still needed (10% margin), and at least by a quarter.
        needed = limits.max_base64_bytes / _base64_len(min(last.values()))
        ratio = min(0.75, 0.9 * math.sqrt(needed))
        new_size = (max(1, math.floor(size[0] * ratio)), max(1, math.floor(size[1] * ratio)))
        if max(new_size) < MIN_SIDE or new_size == size:
            break
        area_ratio = (new_size[0] * new_size[1]) / (size[0] * size[1])
        size = new_size
    if turn in budget.SWAPPING:
        target = (target[1], target[0])
    raise _Dropped(
        f"{label} of {target[0]}x{target[1]} px could not be made to fit "
        f"{limits.max_base64_bytes / 1024 / 1024:.1f} MB (base64) even at {MIN_SIDE} px; "
        "it was not sent. Emit a smaller or simpler image"
    )


def _worth_reencoding(img: Image.Image, true_type: str, data: bytes, lossy: bool) -> bool:
    """Whether a fitting image that needs no scaling is likely to get smaller re-encoded:
    only a PNG, upright as stored, and not a palette PNG already; then when ``lossy``, when
    it was written at zlib's fastest level (or stored), or when a palette holds it."""
    if true_type != PNG or img.mode not in ("L", "LA", "RGB", "RGBA"):
        return False
    if budget.orientation(img) is not None:  # re-encoding would turn it: keep it as it came
        return False
    return lossy or _png_zlib_level(data) == 0 or encode.few_colours(img)


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


def _png_zlib_level(data: bytes) -> int | None:
    """The compression level the first IDAT's zlib header declares (0 fastest or stored,
    1 fast, 2 default, 3 best), or ``None`` if there is none to read."""
    position = 8
    while position + 12 <= len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        if data[position + 4 : position + 8] == b"IDAT":
            header = data[position + 8 : position + 8 + min(length, 2)]
            return header[1] >> 6 if len(header) == 2 else None
        position += 12 + length
    return None


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


def _base64_len(size: int) -> int:
    return 4 * ((size + 2) // 3)


def _bomb(label: str, size: tuple[int, int] | None, limits: ImageLimits) -> _Dropped:
    return _Dropped(budget.pixel_refusal(label, size, limits))


def _corrupt(label: str, exc: Exception) -> _Dropped:
    # Pillow names the buffer it read ("cannot identify image file <_io.BytesIO object at
    # 0x7f...>"): an address that tells nobody anything
    reason = re.sub(r"\s*<[\w.]+ object at 0x[0-9a-f]+>", "", str(exc)) or type(exc).__name__
    return _Dropped(
        f"{label} is truncated or corrupt and could not be decoded ({reason}); "
        "it was not sent. Check that the tool writes the whole file"
    )
