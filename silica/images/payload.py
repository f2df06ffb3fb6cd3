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
