"""Images a tool drew with the kitty graphics protocol, taken out of its text.

The protocol: ``ESC _ G <key>=<value>,... ; <base64 payload> ESC \\`` (or ending in BEL),
https://sw.kovidgoyal.net/kitty/graphics-protocol/. This module reads the stream as kitty
would, and leaves everything that is not a graphics sequence in the text as it was.
"""

from __future__ import annotations

import io
import re
import unicodedata
import zlib

from silica.images.payload import ImagePayload
from silica.results.escapes import (
    BEL,
    ESC,
    MAX_BASE64_CHARS,
    MAX_DECODED_BYTES,
    Base64Stream,
    Extraction,
    StreamExtractor,
    safe,
    strict_decode,
    string_end,
)

__all__ = ["Extraction", "extract_kitty"]

# What an unterminated command is taken to be: its keys, then its base64, and no further.
_HEADER = re.compile(r"[A-Za-z0-9,=\-]*(?:;[A-Za-z0-9+/=]*)?")
_PLACEHOLDER = "\U0010eeee"
_TRANSMIT = ("t", "T", "f")  # actions that carry image data (f: an animation frame)
_NOT_INLINE = "image not transferred inline (kitty t={}): not shown"


def extract_kitty(text: str) -> Extraction:
    """Take the images that kitty graphics sequences carry out of ``text``.

    Callers may rely on this:

    - It never raises, and takes time and memory in proportion to ``text``.
    - Every graphics sequence (``ESC _ G ... ESC \\`` or ``... BEL``, also inside tmux and
      GNU screen passthrough) is removed, and so are Unicode placeholders (U+10EEEE and the
      combining marks after each). Everything else stays, character for character.
    - Each image transmitted inline (``a=t``, ``a=T``; chunked with ``m=1``; PNG ``f=100``,
      or raw ``f=24``/``f=32`` pixels, which come out as PNG; ``o=z`` compressed) is one
      ``ImagePayload`` with ``source="kitty"`` and ``declared_type="image/png"``, in the
      order the transfers completed. An id (``i=``) sent twice gives one image: the later,
      where the two differ.
    - Queries, placements, deletions and animation control are removed without a trace. An
      image that can't be had (not sent inline, bad base64, wrong pixel count, deleted or
      unfinished mid-transfer, over 64 MiB of base64...) leaves one bracketed marker where
      its transfer began, saying what and why.
    - A sequence cut off (no BEL or ST before the next ESC or the end) loses only its keys
      and base64 that run on from ``ESC _ G``; the text after them stays.
    """
    if ESC not in text:  # memchr: the quickest no
        return Extraction(text=_strip_placeholders(text), images=[])
    extractor = _Kitty()
    first = extractor.find(text)
    if first < 0:  # no ESC _ G, so no graphics, not even in passthrough (it is kept as it is)
        return Extraction(text=_strip_placeholders(text), images=[])
    extractor.feed(text, at=first)
    return extractor.finish()


def _strip_placeholders(text: str) -> str:
    """Remove U+10EEEE and the combining marks (row, column, id diacritics) after each."""
    if _PLACEHOLDER not in text:
        return text
    out: list[str] = []
    pos, n = 0, len(text)
    while True:
        i = text.find(_PLACEHOLDER, pos)
        if i < 0:
            out.append(text[pos:])
            return "".join(out)
        out.append(text[pos:i])
        pos = i + 1
        while pos < n and unicodedata.combining(text[pos]):
            pos += 1


def _keys(control: str) -> dict[str, str]:
    keys: dict[str, str] = {}
    for item in control.split(","):
        key, eq, value = item.partition("=")
        if eq:
            keys[key] = value
    return keys


def _int(value: str | None) -> int | None:
    if value is None or not value.isascii() or not value.isdigit() or len(value) > 12:
        return None
    return int(value)


class _Transfer:
    """One command's worth of image data, perhaps spread over many chunks."""

    __slots__ = ("keys", "kind", "slot", "b64")

    def __init__(self, keys: dict[str, str], kind: str, slot: int) -> None:
        self.keys, self.kind, self.slot = keys, kind, slot
        self.b64 = Base64Stream(decode=kind == "image")

    def add(self, text: str, start: int, end: int, cut: bool, decoded: bytes | None) -> None:
        if cut:
            self.b64.fail("escape sequence cut off")
        self.b64.feed(text, start, end, decoded)

    def image(self) -> tuple[bytes, None] | tuple[None, str]:
        """The image's bytes as PNG, or why there are none.

        Raw pixels are measured by their declared ``s`` and ``v`` before anything is
        inflated, and ``o=z`` data is inflated no further than the pixels need (a PNG: no
        further than an uncompressed transfer could carry, ``_MAX_PNG_BYTES``): a zlib bomb
        stops there.
        """
        data = self.b64.finish()
        if data is None:
            return None, self.b64.error or "invalid base64"
        if not data:
            return None, "no data"
        compression = self.keys.get("o")
        if compression and compression != "z":
            return None, f"unknown compression o={safe(compression, 8)}"
        fmt = self.keys.get("f", "32")
        if fmt not in ("24", "32", "100"):
            return None, f"unknown format f={safe(fmt, 8)}"
        width = height = channels = 0
        expected = _MAX_PNG_BYTES
        if fmt != "100":
            channels = 3 if fmt == "24" else 4
            width, height = _int(self.keys.get("s")), _int(self.keys.get("v"))
            if not width or not height:
                return None, f"raw pixels (f={fmt}) without a width and height (s=, v=)"
            cost = _png_cost(width, height, channels)
            if cost > MAX_DECODED_BYTES:
                return None, (
                    f"s={width} v={height} (f={fmt}) would take {cost / _MIB:,.0f} MiB to turn "
                    f"into PNG, over the {MAX_DECODED_BYTES / _MIB:,.0f} MiB budget; send a "
                    "smaller image"
                )
            expected = width * height * channels
        if compression == "z":
            inflated, why = _inflate(data, expected)
            if inflated is None:
                if why != "over":
                    return None, why
                if fmt == "100":
                    return None, f"over {_MAX_PNG_BYTES / _MIB:,.0f} MiB once decompressed"
                return None, (
                    f"more than {expected} bytes of f={fmt} pixels once decompressed do not "
                    f"make s={width} v={height}"
                )
            data = inflated
            if not data:
                return None, "no data"
        if fmt == "100":
            return bytes(data), None
        if len(data) != expected:
            return None, f"{len(data)} bytes of f={fmt} pixels do not make s={width} v={height}"
        return _png(data, width, height, channels), None


_MIB = 1024 * 1024
# A PNG inflated from o=z may be no larger than one sent as it is could be.
_MAX_PNG_BYTES = MAX_BASE64_CHARS * 3 // 4


def _inflate(data: bytes, limit: int) -> tuple[bytes | bytearray, None] | tuple[None, str]:
    """``data`` inflated, or why not (``"over"``: past ``limit`` bytes, where it stopped).

    Inflates 1 MiB at a time into one growing buffer: never past ``limit`` + 1 byte, and with
    no second copy of it (one ``decompress`` call joins its pieces at the end, doubling them).
    """
    inflater, out, pending = zlib.decompressobj(), bytearray(), data
    try:
        while True:
            piece = inflater.decompress(pending, min(1 << 20, limit + 1 - len(out)))
            out += piece
            if len(out) > limit:
                return None, "over"
            pending = inflater.unconsumed_tail
            if inflater.eof or not (piece or pending):
                break
    except zlib.error:
        return None, "bad zlib data (o=z)"
    if not inflater.eof:
        return None, "zlib data cut short (o=z)"
    return out, None


def _png_cost(width: int, height: int, channels: int) -> int:
    """Bytes turning raw pixels into PNG may hold at once: the pixels, Pillow's image of
    them (4 bytes a pixel; RGBA shares the pixels' buffer) and a PNG up to their size."""
    pixels = width * height
    return pixels * channels * 2 + (pixels * 4 if channels == 3 else 0)


def _png(pixels: bytes | bytearray, width: int, height: int, channels: int) -> bytes:
    """Raw 8-bit RGB (3 channels) or RGBA (4) pixels, row after row, as PNG bytes.

    One Pillow call over the whole buffer, no loop per row: time and memory in proportion
    to the pixels (see ``_png_cost``).
    """
    from PIL import Image  # only when there are raw pixels: listing tools needs no Pillow

    mode = "RGB" if channels == 3 else "RGBA"
    image = Image.frombuffer(mode, (width, height), pixels, "raw", mode, 0, 1)
    out = io.BytesIO()
    image.save(out, "PNG", compress_level=6)
    return out.getvalue()


class _Kitty(StreamExtractor):
    source = "kitty"
    intro = "\x1b_G"
    rare = 1  # "_": rare in coloured output, where ESC is everywhere

    def __init__(self) -> None:
        super().__init__()
        self.loading: _Transfer | None = None  # a chunked transfer under way
        self.by_id: dict[int, tuple[int, int, bytes]] = {}  # i= -> (image index, slot, bytes)
        self.control, self.keys = "", {}  # the last control data read, and its keys
        self.batch = True  # whether run may take chunks; see ran

    def parse(self, control: str) -> dict[str, str]:
        # Chunks after the first repeat one control string ("m=1"): read it once.
        if control != self.control:
            self.control, self.keys = control, _keys(control)
        return self.keys

    def sequence(self, text: str, start: int, body: int) -> int:
        # The usual command, "keys;base64" ended by ST, read with as few passes over its
        # base64 as can be: one to find the ESC, and decoding it, which also shows there is
        # no BEL in it (that would end it sooner). Anything else takes the general way.
        esc = text.find(ESC, body)
        if esc >= 0 and text.startswith("\\", esc + 1):
            semi = text.find(";", body, esc)
            if semi >= 0:
                control = text[body:semi]
                if BEL not in control:
                    keys = self.parse(control)
                    decoded = self.decoded(keys, text, semi + 1, esc)
                    if decoded is not None or text.find(BEL, semi + 1, esc) < 0:
                        self.command(keys, text, semi + 1, esc, False, decoded)
                        chunks = self.loading is not None and self.batch
                        if chunks and text.startswith(self.intro, esc + 2):
                            return self.run(text, esc + 2)
                        return esc + 2
        stop, end = string_end(text, body, esc)
        cut = end < 0
        if cut:  # take only what can belong to a graphics command
            stop = end = _HEADER.match(text, body, stop).end()
        semi = text.find(";", body, stop)
        keys = self.parse(text[body : semi if semi >= 0 else stop])
        self.command(keys, text, semi + 1 if semi >= 0 else stop, stop, cut, None)
        return end

    def run(self, text: str, pos: int) -> int:
        """Take the chunks of the transfer under way that come one right after the other at
        ``pos``, as ``sequence`` would; return where the first one left to it begins.

        Thousands of chunks carry one big image, each most often with the same control data
        as the one before ("m=1"). So while a chunk's ST is followed by that same control
        data, the next chunk is taken with two ``str`` calls, and all their base64, whole
        quanta, is decoded in one call at the end. That it decodes shows that no BEL cut a
        chunk short; if it does not, the chunks are fed one by one, as they would have been.
        """
        find, startswith = text.find, text.startswith
        pieces: list[str] = []
        take = pieces.append
        first, more = pos, True
        while more and startswith(self.intro, pos):  # a chunk at pos: read its control data
            esc = find(ESC, pos + 3)
            semi = find(";", pos + 3, esc) if esc >= 0 else -1
            if semi < 0:
                break
            control = text[pos + 3 : semi]
            keys = self.parse(control)
            if BEL in control or not _continues(keys):
                break
            more, start = keys.get("m") == "1", semi + 1
            prefix = text[pos:start]  # ESC _ G, the control data, ";"
            again, skip = "\\" + prefix, 2 + len(prefix)  # after a chunk's ESC: ST's end, prefix
            size = esc - start  # of the base64 from start to the first ESC
            while more and size >= 0 and not size & 3 and startswith(again, esc + 1):
                take(text[start:esc])
                start = esc + skip
                esc = find(ESC, start)
                size = esc - start
            if size < 0 or size & 3 or not startswith("\\", esc + 1):  # left to the general way
                return self.ran(text, first, pieces, start - len(prefix), True)
            take(text[start:esc])
            pos = esc + 2
        return self.ran(text, first, pieces, pos, more)

    def ran(self, text: str, first: int, pieces: list[str], pos: int, more: bool) -> int:
        """Feed what ``run`` took (``pieces``: the base64 of the chunks from ``first`` to
        ``pos``), finish the transfer unless ``more``; return where the general way goes on."""
        loading = self.loading
        assert loading is not None
        stream, joined = loading.b64, "".join(pieces)
        pieces.clear()  # free them before decoding
        decoded = None
        if (
            joined and stream.decode and stream.error is None and not stream.carry
            and len(joined) <= MAX_BASE64_CHARS
        ):
            decoded = strict_decode(joined)
        if decoded is not None:
            stream.feed(joined, 0, len(joined), decoded)
        else:  # walk the chunks again, each checked for BEL and fed on its own
            at = first
            while at < pos:
                start = text.find(";", at) + 1
                end = text.find(ESC, start)  # where run found its ST
                if text.find(BEL, start, end) >= 0:  # it ends at that BEL: the general way.
                    # The chunks after it were taken for nothing; were that to happen again
                    # and again, each run taking them anew, time would grow as the square.
                    self.batch = False
                    return at
                stream.feed(text, start, end)
                at = end + 2
        if not more:
            self.loading = None
            self.complete(loading)
        return pos

    def decoded(self, keys: dict[str, str], text: str, start: int, end: int) -> bytes | None:
        """``text[start:end]`` decoded, if it is image data, whole base64 quanta and no more."""
        size = end - start
        if not 0 < size <= MAX_BASE64_CHARS or size % 4 or keys.get("a", "t") not in ("t", "T"):
            return None
        return strict_decode(text[start:end])

    def command(
        self, keys: dict[str, str], text: str, start: int, end: int, cut: bool,
        decoded: bytes | None,
    ) -> None:
        action = keys.get("a", "t")
        more = keys.get("m") == "1"
        medium = keys.get("t", "d")
        loading = self.loading
        if loading is not None and _continues(keys):
            # A chunk after the first: only m= counts, whatever else it repeats.
            loading.add(text, start, end, cut, decoded)
            if not more:
                self.loading = None
                self.complete(loading)
            return
        if action == "d":
            if loading is not None and _deletes(keys, loading.keys):
                loading.b64.fail("deleted before its transfer finished")
                self.loading = None
                self.complete(loading)
            return
        if action not in _TRANSMIT and action != "q":
            return  # placement, animation control, composition...: nothing to show
        if medium != "d":
            if action == "f":
                self.out.append(self.note("kitty animation frame: not shown"))
            elif action != "q":
                self.out.append(self.note(_NOT_INLINE.format(safe(medium, 8))))
            return
        kind = "query" if action == "q" else "frame" if action == "f" else "image"
        transfer = _Transfer(keys, kind, self.slot())
        transfer.add(text, start, end, cut, decoded)
        if more:
            self.loading = transfer
        else:
            self.complete(transfer)

    def complete(self, transfer: _Transfer) -> None:
        if transfer.kind == "query":
            return
        if transfer.kind == "frame":
            self.fill(transfer.slot, self.note("kitty animation frame: not shown"))
            return
        data, why = transfer.image()
        if data is None:
            self.fill(transfer.slot, self.note(f"kitty image dropped: {why}"))
            return
        image_id = _int(transfer.keys.get("i"))
        if image_id:
            earlier = self.by_id.get(image_id)
            if earlier is not None:
                index, slot, old = earlier
                if old == data:
                    return  # the same image again
                self.remove_image(index)
                self.fill(slot, self.note(f"kitty image i={image_id} dropped: sent again, changed"))
        index = self.add_image(ImagePayload(data=data, declared_type="image/png", source="kitty"))
        if image_id:
            self.by_id[image_id] = (index, transfer.slot, data)

    def finish(self) -> Extraction:
        if self.loading is not None:
            self.loading.b64.fail("transfer not finished at the end of the output")
            self.complete(self.loading)
            self.loading = None
        return self.result(_strip_placeholders("".join(self.out)))


def _continues(keys: dict[str, str]) -> bool:
    """Whether a command with ``keys`` is a chunk of the transfer under way, if one is."""
    return keys.get("a", "t") in _TRANSMIT and keys.get("t", "d") == "d"


def _deletes(keys: dict[str, str], loading: dict[str, str]) -> bool:
    """Whether delete command ``keys`` names the image being loaded (by i= or I=)."""
    what = keys.get("d", "a").lower()
    if what == "i":
        target = _int(keys.get("i"))
        return bool(target) and target == _int(loading.get("i"))
    if what == "n":
        target = _int(keys.get("I"))
        return bool(target) and target == _int(loading.get("I"))
    return False
