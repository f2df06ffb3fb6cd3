"""Images in a tool's JSON output: ``base64``, ``image.base64``, ``images: [...]``, data URLs.

The shapes existing silica tools print::

    {"base64": "<b64>", "media_type": "image/png", ...}
    {"image": {"base64": "<b64>", "media_type": "image/png"}, ...}
    {"images": [{"base64": "<b64>"}, "data:image/png;base64,<b64>", ...], ...}

Any ``base64`` value may also be a ``data:`` URL. The JSON may be surrounded by stray lines
(log output, progress); they are kept as text. Everything else in the JSON stays, as one
text block, without the image data.

JSON nested too deeply for the parser, or holding too many values to build as objects
(``MAX_VALUES``: memory would be many times the text's), is not given up on: its
``"base64"`` string fields and ``data:image/...`` URLs are found by a flat scan and taken out
just the same, so image data never stays behind as text. Time is linear in the text: at
most ``_MAX_CANDIDATES`` documents are tried, none inside one read before.
"""

from __future__ import annotations

import json
import re
from typing import Any

from silica.images.payload import Extraction, ImagePayload
from silica.images.sniff import normalize_media_type, sniff_media_type
from silica.results.escapes import decode_base64

_DATA_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+)?((?:;[\w-]+=[^;,]*)*);base64,", re.I)
_MAX_CANDIDATES = 32  # JSON documents tried when the output is not JSON as a whole
MAX_VALUES = 200_000
"""Values (counted by the characters that begin or separate them: ``{ [ , :``) past which
the text is not parsed into objects; a small object takes some 200 bytes as one."""
_FIRST = re.compile(r"\S")


def extract_json_images(text: str) -> Extraction:
    """Find a JSON object in ``text`` and take its images out.

    Where the output holds no JSON object with image fields, the text comes back unchanged
    and there are no images. Otherwise the text is the lines around the JSON plus the JSON
    without its image data (indented), and image data that is not valid base64 is replaced
    by an ``[image dropped: ...]`` notice. Never raises on any text.
    """
    if not _may_hold_json(text):  # the common case: plain text, no scan at all
        return Extraction(text, [])
    if sum(text.count(c) for c in "{[,:") > MAX_VALUES:
        return _scan_flat(text, "holds too many values to read as a whole")
    try:
        found = _find_json_object(text)
    except RecursionError:
        return _scan_flat(text, "is nested too deeply to read as a whole")
    if found is None:
        return Extraction(text, [])
    start, end, doc = found
    images: list[ImagePayload] = []
    notices: list[str] = []
    rest = _take_images(doc, images, notices)
    if not images and not notices:
        return Extraction(text, [])
    middle = json.dumps(rest, indent=2, ensure_ascii=False) if rest else ""
    pieces = [text[:start].rstrip("\n"), middle, *notices, text[end:].lstrip("\n")]
    return Extraction("\n".join(p for p in pieces if p.strip()), images)


# A JSON string of base64: plain characters, or the escapes an encoder may use in it.
_B64_STRING = r'(?:[^"\\]|\\[/nr]){16,}'
_FLAT_FIELD = re.compile(
    rf'"base64"\s*:\s*"(?P<b64>{_B64_STRING})"'
    rf'|"(?P<url>data:image/[\w.+-]+(?:;[\w-]+=[^;,"]*)*;base64,{_B64_STRING})"', re.I)
_JSON_ESCAPES = {"\\/": "/", "\\n": "", "\\r": ""}


def _may_hold_json(text: str) -> bool:
    """Whether an object may begin ``text`` or one of its lines (else there is none to try)."""
    first = _FIRST.search(text)
    return first is not None and (first.group() == "{" or _LINE_OBJECT.search(text) is not None)


_LINE_OBJECT = re.compile(r"(?m)^[ \t]*\{")


def _scan_flat(text: str, why: str) -> Extraction:
    """Images in JSON that cannot be parsed as a whole (``why``): each ``"base64"`` field
    and image data URL that decodes to an image is taken out; the rest of the text stays,
    with a note."""
    images: list[ImagePayload] = []
    notices: list[str] = []

    def take(match: re.Match[str]) -> str:
        value = match.group("b64") or match.group("url")
        for escape, plain in _JSON_ESCAPES.items():
            value = value.replace(escape, plain)
        if _take_one({"base64": value}, images, notices, "base64"):
            return '"[image taken out]"'
        return match.group(0)

    rest = _FLAT_FIELD.sub(take, text)
    if not images and not notices:
        return Extraction(text, [])
    note = f"[the JSON {why}; its images were found by their fields]"
    return Extraction("\n".join([rest, *notices, note]), images)


def _find_json_object(text: str) -> tuple[int, int, dict] | None:
    decoder = json.JSONDecoder()
    first = _FIRST.search(text)
    if first is not None and first.group() == "{":  # the whole text, surrounding space aside
        try:
            doc, end = decoder.raw_decode(text, first.start())
        except ValueError:
            doc = None
        if isinstance(doc, dict) and _FIRST.search(text, end) is None:
            return 0, len(text), doc
    tries, after = 0, 0
    for match in _LINE_OBJECT.finditer(text):
        if match.start() < after:  # inside a document read before: read once, not again
            continue
        tries += 1
        if tries > _MAX_CANDIDATES:
            break
        pos = match.end() - 1
        try:
            doc, end = decoder.raw_decode(text, pos)
        except ValueError:
            continue
        if isinstance(doc, dict) and _has_image_fields(doc):
            return match.start(), end, doc
        after = end
    return None


def _has_image_fields(doc: dict) -> bool:
    return isinstance(doc.get("base64"), str) or isinstance(doc.get("image"), dict | str) \
        or isinstance(doc.get("images"), list)


def _take_images(doc: dict, images: list[ImagePayload], notices: list[str]) -> dict:
    """``doc`` without its image data; found images and notices are appended."""
    rest = dict(doc)
    if isinstance(doc.get("base64"), str) and _take_one(doc, images, notices, "base64"):
        rest.pop("base64", None)
        rest.pop("media_type", None)
    image = doc.get("image")
    if isinstance(image, dict | str):
        leftover = _take_item(image, images, notices, "image")
        if leftover is not image:
            if leftover:
                rest["image"] = leftover
            else:
                rest.pop("image")
    items = doc.get("images")
    if isinstance(items, list):
        kept = []
        taken = False
        for i, item in enumerate(items):
            leftover = _take_item(item, images, notices, f"images[{i}]")
            taken = taken or leftover is not item
            if leftover:
                kept.append(leftover)
        if taken:
            if kept:
                rest["images"] = kept
            else:
                rest.pop("images")
    return rest


def _take_item(item: Any, images: list[ImagePayload], notices: list[str], where: str) -> Any:
    """Take the image out of one ``image`` value; returns what is left of it (or ``item``
    itself, untouched, when it holds no image)."""
    if isinstance(item, str):
        if _DATA_URL.match(item) and _take_one({"base64": item}, images, notices, where):
            return None
        return item
    if isinstance(item, dict) and isinstance(item.get("base64"), str) \
            and _take_one(item, images, notices, f"{where}.base64"):
        return {k: v for k, v in item.items() if k not in ("base64", "media_type")}
    return item


def _take_one(obj: dict, images: list[ImagePayload], notices: list[str], where: str) -> bool:
    """Decode ``obj["base64"]``; True if it was taken (as an image or as a dropped notice).

    Data that declares no image type and does not sniff as an image is left alone: some
    tools return other base64 data, and it stays text as it always was.
    """
    value: str = obj["base64"]
    declared = normalize_media_type(obj.get("media_type"))
    url = _DATA_URL.match(value)
    if url:
        declared = normalize_media_type(url.group(1)) or declared
        value = value[url.end():]
    decoded = decode_base64(value)
    data, ok = decoded or b"", decoded is not None
    looks_like_image = (declared or "").startswith("image/") or bool(url)
    if not ok or not data:
        if looks_like_image:
            why = "is empty" if ok else "is not valid base64"
            notices.append(f"[image dropped: the {where} field {why}; nothing was sent]")
            return True
        return False
    if not looks_like_image and sniff_media_type(data) is None:
        return False
    images.append(ImagePayload(data=data, declared_type=declared, source="json"))
    return True
