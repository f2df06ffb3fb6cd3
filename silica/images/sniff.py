"""Magic-byte sniffing: what an image's bytes say it is, whatever it was labelled."""

from __future__ import annotations

# Formats every vision provider accepts as-is.
SENDABLE = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})

# Human names for the notices that say what an image was.
LABELS = {
    "image/png": "PNG image",
    "image/jpeg": "JPEG image",
    "image/gif": "GIF image",
    "image/webp": "WebP image",
    "image/bmp": "BMP image",
    "image/tiff": "TIFF image",
    "image/x-icon": "ICO icon",
    "image/x-portable-anymap": "PPM/PGM/PBM image",
    "image/qoi": "QOI image",
    "application/pdf": "PDF document",
    "image/avif": "AVIF image",
    "image/heic": "HEIC/HEIF image",
    "image/svg+xml": "SVG image",
}

_PNM_KINDS = (b"1", b"2", b"3", b"4", b"5", b"6")
_WHITESPACE = (b" ", b"\t", b"\r", b"\n")

_ALIASES = {
    "image/jpg": "image/jpeg",
    "image/pjpeg": "image/jpeg",
    "image/x-png": "image/png",
    "image/x-ms-bmp": "image/bmp",
    "image/vnd.microsoft.icon": "image/x-icon",
}


def normalize_media_type(value: str | None) -> str | None:
    """Lower-case a declared media type and map common aliases (``image/jpg``)."""
    if not value or not isinstance(value, str):
        return None
    value = value.strip().lower().split(";", 1)[0].strip()
    return _ALIASES.get(value, value) or None


def describe_media_type(media_type: str | None) -> str:
    """A short human name for ``media_type`` ("PNG image"), for notices."""
    if not media_type:
        return "data of unknown type"
    return LABELS.get(media_type, media_type)


def sniff_media_type(data: bytes) -> str | None:
    """The media type the leading bytes of ``data`` announce, or ``None`` if unknown.

    Recognises PNG, JPEG, GIF, WebP, BMP, TIFF, ICO, PPM/PGM/PBM, QOI, PDF, AVIF, HEIC and
    SVG. Only the first bytes are read (2 KB at most, for SVG); nothing is decoded.
    """
    head = data[:64]
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head.startswith(b"BM"):
        return "image/bmp"
    if head.startswith((b"II*\x00", b"MM\x00*")):
        return "image/tiff"
    if head.startswith(b"\x00\x00\x01\x00"):
        return "image/x-icon"
    if head[:1] == b"P" and head[1:2] in _PNM_KINDS and head[2:3] in _WHITESPACE:
        return "image/x-portable-anymap"
    if head.startswith(b"qoif"):
        return "image/qoi"
    if head.startswith(b"%PDF-"):
        return "application/pdf"
    if head[4:8] == b"ftyp":
        brand = head[8:12]
        if brand in (b"avif", b"avis"):
            return "image/avif"
        if brand in (b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1"):
            return "image/heic"
    stripped = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    # <svg ...>, or an XML prolog / doctype / comment followed by <svg within 2 KB.
    if stripped.startswith(b"<svg") or (stripped.startswith(b"<") and b"<svg" in data[:2048]):
        return "image/svg+xml"
    return None
