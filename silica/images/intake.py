"""Images a person sends (an upload, a fetched URL): checked and fitted, or refused.

    block = prepare_upload(data, name="shot.png", declared="image/png", limits=limits,
                           max_bytes=settings.images.max_size_bytes)

A person's image goes through the same ``silica_prepare_image`` hook as a tool's (sniffed,
fully decoded, converted and fitted to ``limits``), after checks a tool's image does not need,
because here the sender can be told and can fix it. Where a tool's bad image becomes a notice
the model reads, a person's bad image is an ``ImageRefused`` that names it, says why, and
says what to do:

- empty, or over ``max_bytes`` (``[images] max_size_bytes``): refused unread;
- bytes in no known image format, SVG (a vector drawing, not a raster image) and PDF;
- a declared type that disagrees with the bytes (a JPEG labelled ``image/png``): refused, not
  guessed at. The label came from the sender's software, and an image that is not what it
  says is more often a wrong file than a wrong label; the message says which type to send.
  A generic label (``application/octet-stream``, none) declares nothing and is not checked;
- a decompression bomb (a 30000x30000 PNG): refused from its header, before any pixel is
  decoded (``silica.images.budget``);
- truncated or corrupt bytes: refused when the full decode fails.

Library layer: no web framework here. Pillow is imported only when an image is checked.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from silica.blocks import ImageBlock, TextBlock
from silica.errors import SilicaError
from silica.images.limits import ImageLimits
from silica.images.payload import ImagePayload
from silica.images.sniff import describe_media_type, normalize_media_type, sniff_media_type
from silica.security.text import safe_text

GENERIC_TYPES = frozenset({"application/octet-stream", "binary/octet-stream",
                           "application/unknown", "application/binary"})
"""Declared types that say nothing about the bytes: browsers and tools use them for a file
whose type they do not know."""

NOT_RASTER = {
    "image/svg+xml": "it is an SVG drawing (vector graphics), not a raster image; "
                     "render it to PNG first and send that",
    "application/pdf": "it is a PDF document, not an image; "
                       "render the pages you need to PNG and send those",
}

_NAME_CHARS = 120  # of a file name, in messages

# The checker's notices speak to a tool's author; a person who sent a file is told the same
# thing in their terms.
_REWORDED = (
    ("[image dropped: ", ""),
    ("Check that the tool writes the whole file", "Check that the whole file was sent"),
    ("Emit a smaller or simpler image", "Send a smaller or simpler image"),
    ("Emit a smaller image", "Send a smaller image"),
    ("emit PNG or JPEG bytes instead", "send PNG or JPEG instead"),
    ("the tool emitted", "it is"),
)


class ImageRefused(SilicaError):
    """A person's image cannot be used. ``str(err)`` names it, says why and what to do.

    ``code``: ``image_too_large`` (over the byte limit) or ``invalid_image`` (anything else:
    empty, not an image, SVG, mislabelled, a bomb, truncated).
    """

    def __init__(self, message: str, *, code: str = "invalid_image") -> None:
        super().__init__(message)
        self.code = code


def display_name(name: str | None, fallback: str = "image") -> str:
    """``name`` as messages show it: safe for a terminal, at most ``_NAME_CHARS`` long."""
    shown = safe_text((name or "").strip()) or fallback
    return shown if len(shown) <= _NAME_CHARS else shown[: _NAME_CHARS - 1] + "…"


def check_size(size: int, label: str, max_bytes: int) -> None:
    """``ImageRefused`` for an image of ``size`` bytes that is empty or over ``max_bytes``
    (``[images] max_size_bytes``), however it came (a file, a URL, an upload)."""
    if size == 0:
        raise ImageRefused(f"{label} is empty (0 bytes); send the image file itself")
    if size > max_bytes:
        raise ImageRefused(
            f"{label} is {size:,} bytes, over the limit of {max_bytes:,} bytes per image "
            "([images] max_size_bytes); send a smaller image (a PNG screenshot scaled down, "
            "or a JPEG)", code="image_too_large")


def read_image_file(path: Path, *, limits: ImageLimits, max_bytes: int) -> ImageBlock:
    """A person's image file (``ask --image FILE``), checked as an upload is: the same
    limit (refused from its size, unread), checks and wording; ``ImageRefused`` or
    ``SilicaError`` (unreadable) otherwise."""
    path = path.expanduser()
    label = f'image "{display_name(str(path))}"'
    try:
        check_size(path.stat().st_size, label, max_bytes)
        data = path.read_bytes()
    except OSError as exc:
        raise SilicaError(f"cannot read the image {path}: {exc.strerror or exc}") from exc
    return prepare_upload(data, name=path.name, declared=None, limits=limits,
                          max_bytes=max_bytes, label=label)


def prepare_upload(
    data: bytes,
    *,
    name: str,
    declared: str | None,
    limits: ImageLimits,
    max_bytes: int,
    label: str | None = None,
) -> ImageBlock:
    """``data`` checked and fitted to ``limits`` as tool images are, or ``ImageRefused``.

    ``name``: what the sender called it (a file name); it becomes the block's ``source``.
    ``declared``: the media type the sender gave (``None``: none). ``label``: how messages
    refer to the image (default ``image "<name>"``). The returned block's media type matches
    its bytes and it fits ``limits`` (see ``silica.images.check.prepare_image``). Blocks:
    decodes the image; call it off an event loop.
    """
    shown = display_name(name)
    label = label or f'image "{shown}"'
    size = len(data)
    check_size(size, label, max_bytes)
    true_type = sniff_media_type(data)
    claimed = normalize_media_type(declared)
    if claimed in GENERIC_TYPES:
        claimed = None
    if true_type is None:
        what = f"labelled {safe_text(claimed)}" if claimed else "with no image type"
        raise ImageRefused(
            f"{label} ({size:,} bytes {what}) is not in any image format silica reads; "
            "send a PNG, JPEG, GIF or WebP image")
    if true_type in NOT_RASTER:
        raise ImageRefused(f"{label} was refused: {NOT_RASTER[true_type]}")
    if claimed is not None and claimed != true_type:
        raise ImageRefused(
            f"{label} is labelled {safe_text(claimed)} but its bytes are a "
            f"{describe_media_type(true_type)} ({true_type}); silica refuses a mislabelled "
            f"image rather than guess which is wrong. Check that it is the file you meant, "
            f"then send it as {true_type} (or with no type)")
    payload = ImagePayload(bytes(data), true_type, shown)
    _refuse_bomb(payload, label, limits)
    from silica.plugins import get_plugin_manager

    block = get_plugin_manager().hook.silica_prepare_image(payload=payload, limits=limits)
    if isinstance(block, ImageBlock):
        return block.model_copy(update={"source": shown})
    reason = block.text if isinstance(block, TextBlock) else "no image plugin accepted it"
    raise ImageRefused(f"{label} was refused: {for_person(reason)}")


def _refuse_bomb(payload: ImagePayload, label: str, limits: ImageLimits) -> None:
    """Refuse an image whose header alone shows it too big to decode (whatever plugin then
    prepares it): nothing but the header is read."""
    from silica.images import budget

    with warnings.catch_warnings():  # Pillow warns of big images: this refuses them instead
        warnings.simplefilter("ignore")
        cost = budget.inspect(payload, limits)
    refusal = cost.refusal(limits) if cost is not None else None
    if refusal:
        raise ImageRefused(f"{label} was refused: {for_person(refusal)}")


def for_person(notice: str) -> str:
    """A notice of the image checker (``[image dropped: ...]``, which speaks to a tool's
    author) in a person's terms, made safe to print: for an image a person sent."""
    text = notice.strip()
    for old, new in _REWORDED:
        text = text.replace(old, new)
    if notice.strip().startswith("[image dropped:") and text.endswith("]"):
        text = text[:-1]
    return safe_text(text)
