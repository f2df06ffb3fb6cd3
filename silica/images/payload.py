"""What an extractor found: image bytes not yet checked."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ImagePayload:
    """Bytes a tool emitted as an image, before any check.

    ``declared_type`` is the media type the tool claimed (``None`` if it claimed none); the
    bytes win over it. ``source`` names the processor that found it (``json``, ``kitty``...).
    """

    data: bytes
    declared_type: str | None = None
    source: str = ""


@dataclass(frozen=True)
class Extraction:
    """What an extractor (JSON fields, kitty, iTerm2) found in a text.

    ``text`` is the input with the images taken out; every other character is kept in
    order, unchanged, and each image that could not be extracted leaves one short marker in
    brackets where it was (``[kitty image dropped: invalid base64]``). ``images`` holds the
    extracted images in the order they completed.
    """

    text: str
    images: list[ImagePayload]
