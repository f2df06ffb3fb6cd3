"""Images a tool drew with the kitty graphics protocol, taken out of its output.

The protocol: ``ESC _ G <key>=<value>,... ; <base64 payload> ESC \\`` (or ending in BEL),
https://sw.kovidgoyal.net/kitty/graphics-protocol/. This module reads the stream as kitty
would, on the output's bytes (see ``silica.results.escapes``), and leaves everything that is
not a graphics sequence in the output as it was.
"""

from __future__ import annotations

import io
import re
import unicodedata
import zlib

from silica.images.limits import ImageLimits
from silica.images.payload import ImagePayload
from silica.results.escapes import (
    BEL,
    ESC,
    MAX_BASE64_CHARS,
    MAX_DECODED_BYTES,
    Base64Stream,
    Cut,
    Extraction,
    Output,
    StreamExtractor,
    match_end,
    output_bytes,
    safe,
    seal,
    strict_decode,
    string_end,
    text_of,
)

__all__ = ["Extraction", "cut_kitty", "extract_kitty"]

# What an unterminated command is taken to be: its keys, then its base64, and no further.
_HEADER = re.compile(rb"[A-Za-z0-9,=\-]*(?:;[A-Za-z0-9+/=]*)?")
_PLACEHOLDER = "\U0010eeee".encode()  # b"\xf4\x8e\xbb\xae"; no other character starts so
_TRANSMIT = ("t", "T", "f")  # actions that carry image data (f: an animation frame)
_NOT_INLINE = "image not transferred inline (kitty t={}): not shown"
_CONTROLS = 256  # distinct control strings whose keys are kept, read once each
# take hands the chunks it took on to the transfer in batches of this many, or bytes.
_BATCH = 1024
_BATCH_BYTES = 1 << 20
# At the ESC that ends a chunk: its ST, then the next chunk's ESC _ G and control data.
_NEXT = re.compile(rb"\x1b\\\x1b_G([^;\x1b\x07]*);")


def extract_kitty(output: str | Output) -> Extraction:
    """Take the images that kitty graphics sequences carry out of ``output``: the text a
    tool printed, or its bytes (then decoded as UTF-8, bad bytes replaced, once the images
    are out).

    Callers may rely on this:

    - It never raises, and takes time and memory in proportion to ``output``.
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
    - Bytes give the text that their decoding would give: ``extract_kitty(b).text ==
      extract_kitty(b.decode("utf-8", "replace")).text``.
    """
    if isinstance(output, str) and "\x1b" not in output and "\U0010eeee" not in output:
        return Extraction(text=output, images=[])  # memchr, and a look at the widest char
    return cut_kitty(*output_bytes(output)).extraction()


def cut_kitty(data: bytes | bytearray, errors: str = "replace",
              limits: ImageLimits | None = None) -> Cut:
    """``extract_kitty`` on output bytes, the text left as bytes (``Cut``): what the result
    pipeline runs. ``errors``: how ``data`` decodes (see ``Cut``); ``limits``: the decoding
    budgets (see ``Gathered``)."""
    if ESC not in data:  # memchr: the quickest no
        return Cut(_strip_placeholders(data, errors), [], errors)
    extractor = _Kitty(errors, limits)
    first = extractor.find(data)
    if first < 0:  # no ESC _ G, so no graphics, not even in passthrough (it is kept as it is)
        return Cut(_strip_placeholders(data, errors), [], errors)
    extractor.feed(bytes(data) if isinstance(data, bytearray) else data, at=first)
    return extractor.finish()


def _strip_placeholders(data: bytes | bytearray, errors: str) -> bytes | bytearray:
    """Remove U+10EEEE and the combining marks (row, column, id diacritics) after each."""
    find, view = data.find, memoryview(data)
    i = find(0xF4)  # memchr for its first byte: U+10EEEE is rare, and so is the byte
    out: bytearray | None = None  # one buffer, not an object a piece: there may be millions
    pos = 0
    while i >= 0:
        if data.startswith(_PLACEHOLDER, i):
            out = bytearray() if out is None else out
            out += seal(view[pos:i])
            pos = _after_marks(data, i + len(_PLACEHOLDER), errors)
            i = find(0xF4, pos)
        else:
            i = find(0xF4, i + 1)
    if out is None:
        return data
    out += view[pos:]
    return out


def _after_marks(data: bytes | bytearray, pos: int, errors: str) -> int:
    """Where the combining marks that begin at ``pos`` end (``pos`` if there are none)."""
    n = len(data)
    while pos < n:
        lead = data[pos]
        size = 2 if 0xC2 <= lead <= 0xDF else 3 if 0xE0 <= lead <= 0xEF else 4
        if lead < 0xC2 or lead > 0xF4:  # ASCII, or no start of a character: no mark
            return pos
        try:
            char = text_of(data[pos : pos + size], errors)
        except UnicodeDecodeError:  # cut short, so no mark
            return pos
        if len(char) != 1 or not unicodedata.combining(char):
            return pos
        pos += size
    return pos


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

    def __init__(self, keys: dict[str, str], kind: str, slot: int | None, errors: str) -> None:
        self.keys, self.kind, self.slot = keys, kind, slot
        self.b64 = Base64Stream(decode=kind == "image", errors=errors)

    def add(self, data: Output, start: int, end: int, cut: bool, decoded: bytes | None) -> None:
        if cut:
            self.b64.fail("escape sequence cut off")
        self.b64.feed(data, start, end, decoded)

    def image(self, convert) -> tuple[bytes, None] | tuple[None, str]:
        """The image's bytes as PNG, or why there are none (``convert``: ``_Kitty.convert``)."""
        data = self.b64.finish()
        if data is None:
            return None, self.b64.error or "invalid base64"
        return convert(self.keys, data)


def _image(keys: dict[str, str], data: bytes | bytearray,
           max_decoded: int = MAX_DECODED_BYTES) -> tuple[bytes | None, str | None]:
    """The bytes a transfer with ``keys`` carried, as PNG, or why there are none (raw pixels
    that would take over ``max_decoded`` bytes to turn into PNG are refused, undecoded).

    Raw pixels are measured by their declared ``s`` and ``v`` before anything is inflated,
    and ``o=z`` data is inflated no further than the pixels need (a PNG: no further than an
    uncompressed transfer could carry, ``_MAX_PNG_BYTES``): a zlib bomb stops there.
    """
    if not data:
        return None, "no data"
    compression = keys.get("o")
    if compression and compression != "z":
        return None, f"unknown compression o={safe(compression, 8)}"
    fmt = keys.get("f", "32")
    if fmt not in ("24", "32", "100"):
        return None, f"unknown format f={safe(fmt, 8)}"
    width = height = channels = 0
    expected = _MAX_PNG_BYTES
    if fmt != "100":
        channels = 3 if fmt == "24" else 4
        given_width, given_height = _int(keys.get("s")), _int(keys.get("v"))
        if not given_width or not given_height:
            return None, f"raw pixels (f={fmt}) without a width and height (s=, v=)"
        width, height = given_width, given_height
        cost = _png_cost(width, height, channels)
        if cost > max_decoded:
            return None, (
                f"s={width} v={height} (f={fmt}) would take {cost / _MIB:,.0f} MiB to turn "
                f"into PNG, over the {max_decoded / _MIB:,.0f} MiB budget "
                "(max_decoded_bytes); send a "
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


def _inflate(data: bytes | bytearray,
             limit: int) -> tuple[bytes | bytearray, None] | tuple[None, str]:
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
    intro = b"\x1b_G"
    rare = 1  # "_": rare in coloured output, where ESC is everywhere

    def __init__(self, errors: str = "replace", limits: ImageLimits | None = None) -> None:
        super().__init__(errors, limits)
        self.loading: _Transfer | None = None  # a chunked transfer under way
        self.by_id: dict[int, tuple[int, int, bytes]] = {}  # i= -> (image index, slot, bytes)
        self.controls: dict[bytes, _Control] = {}  # control data read, see parse
        self.batch = True  # whether take may take chunks; see ran
        # The heads of the chunks take read last (see take), and of the first chunk of the
        # image taken last (see sequence); to start, NUL: they are looked for where an ESC
        # is, so it matches none.
        self.glues = b"\x00", 0, False, b"\x00", 0, False
        self.head: tuple[bytes, _Control | None] = b"\x00", None

    def parse(self, control: bytes) -> _Control:
        """``control`` read. Chunks repeat a few control strings ("a=T,f=100,m=1", "m=1",
        "m=0"), so each is read once: callers look in ``controls`` first."""
        found = self.controls.get(control)
        if found is None:
            found = _Control(_keys(text_of(control, self.errors)))
            if len(self.controls) >= _CONTROLS:
                self.controls.clear()
            self.controls[control] = found
        return found

    def sequence(self, data: bytes, start: int, body: int) -> int:
        # The usual command, "keys;base64" ended by ST, read with as few passes over its
        # base64 as can be: one to find the ESC, and decoding it, which also shows there is
        # no BEL in it (that would end it sooner). Anything else takes the general way.
        find = data.find
        head, read = self.head
        if read is not None and data.startswith(head, start) and self.batch:  # the last head
            first = start + len(head)
            esc = find(ESC, first)
            if esc >= 0 and data[esc + 1 : esc + 2] == b"\\":
                return self.take(data, start, first, esc, read)
        esc = find(ESC, body)
        if esc >= 0 and data[esc + 1 : esc + 2] == b"\\":
            semi = find(b";", body, esc)
            if semi >= 0:
                control = data[body:semi]
                if BEL not in control:
                    read = self.controls.get(control) or self.parse(control)
                    if read.continues and self.batch:  # image data: it, and the chunks after
                        self.head = data[start : semi + 1], read
                        return self.take(data, start, semi + 1, esc, read)
                    keys = read.keys
                    decoded = self.decoded(keys, semi + 1, esc)
                    if decoded is not None or find(BEL, semi + 1, esc) < 0:
                        self.command(keys, data, semi + 1, esc, False, decoded)
                        return esc + 2
        stop, end = string_end(data, body, esc)
        cut = end < 0
        if cut:  # take only what can belong to a graphics command
            stop = end = match_end(_HEADER, data, body, stop)
        semi = find(b";", body, stop)
        keys = self.parse(data[body : semi if semi >= 0 else stop]).keys
        self.command(keys, data, semi + 1 if semi >= 0 else stop, stop, cut, None)
        return end

    def take(self, data: bytes, start: int, first: int, esc: int, read: _Control) -> int:
        """Take the chunk of image data at ``start`` (its base64 from ``first`` to its ST at
        ``esc``; ``read``: its control data) and the chunks of the same transfer that come
        right after it; return where the general way goes on.

        Thousands of chunks carry one big image, and one small image may come in a few: the
        chunks that follow one another are found with a ``startswith`` and a ``find`` each
        (the regex ``_NEXT`` reads the head of a chunk unlike the two last seen, the "glues":
        ST, ESC _ G, the control data and ";"), and all their base64 is decoded in one call
        at the end. That it decodes shows that no BEL cut a chunk short, and that none
        carried its own padding; if it does not, the chunks are fed one by one, as they would
        have been (``ran``). A new image taken whole in one go is added at once.
        """
        view = self.view
        pieces = [view[first:esc]]
        more = read.more
        if more:
            find, startswith, add = data.find, data.startswith, pieces.append
            size_taken = esc - first
            # The last two heads seen: the glue, its length, and whether more chunks follow;
            # first the one more chunks follow (chunks in the middle are most).
            glue, size, again, glue2, size2, again2 = self.glues
            if again2 and not again:
                (glue, size, again), (glue2, size2, again2) = (
                    (glue2, size2, again2), (glue, size, again))
            open_at = -1  # a chunk taken before its ST was seen: where the one before it ended
            while True:
                if startswith(glue, esc):  # the same head as the chunk before
                    begin, after = esc + size, again
                elif startswith(glue2, esc):  # the other (most often m=0 after m=1)
                    (glue, size, again), (glue2, size2, again2) = (
                        (glue2, size2, again2), (glue, size, again))
                    begin, after = esc + size, again
                else:
                    found = _NEXT.match(data, esc)
                    if found is None:
                        break
                    control = found.group(1)
                    chunk = self.controls.get(control) or self.parse(control)
                    if not chunk.continues:  # another command: the general way
                        break
                    begin, after = found.end(), chunk.more
                    glue2, size2, again2 = glue, size, again
                    glue, size, again = data[esc:begin], begin - esc, after
                open_at = -1  # every head begins with ST: the chunk before it is whole
                end = find(ESC, begin)
                if end < 0:
                    break
                if after:  # more chunks follow: the head of the next shows the ST of this one
                    add(view[begin:end])
                    open_at, esc = esc, end
                    size_taken += end - begin
                    if len(pieces) > _BATCH or size_taken > _BATCH_BYTES:
                        # All but the last (its ST is not seen yet) handed on: memory stays
                        # in proportion to a batch, however many chunks there are.
                        at = self.hand_on(data, start, pieces, open_at + 2, read)
                        if at != open_at + 2:  # a BEL ended one of them: the general way
                            self.glues = glue, size, again, glue2, size2, again2
                            return at
                        start, pieces, size_taken = at, [pieces[-1]], end - begin
                        add = pieces.append
                    continue
                if data[end + 1 : end + 2] == b"\\":  # the last chunk, whole
                    add(view[begin:end])
                    esc, more = end, False
                break
            if open_at >= 0 and data[esc + 1 : esc + 2] != b"\\":  # that chunk had no ST
                pieces.pop()
                esc = open_at
            self.glues = glue, size, again, glue2, size2, again2
        pos = esc + 2
        joined = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        if self.loading is not None:
            return self.ran(data, start, joined, pos, more)
        keys, kind = read.keys, read.kind
        decoded = None
        if kind == "image" and 0 < len(joined) <= MAX_BASE64_CHARS:
            decoded = strict_decode(joined)
            if decoded is not None and not more:  # the usual: a whole image in one go
                if read.plain:  # PNG, no id: kept as it came
                    self.add_image(ImagePayload(decoded, "image/png", "kitty"))
                else:
                    png, why = self.convert(keys, decoded)
                    self.land(read.image_id, png, why, None)
                return pos
        self.loading = _Transfer(keys, kind, self.slot(), self.errors)
        return self.ran(data, start, joined, pos, more, decoded, kind == "image")

    def hand_on(self, data: bytes, start: int, pieces: list, pos: int, read: _Control) -> int:
        """Feed the base64 of the chunks ``take`` took from ``start`` to ``pos`` but the last
        (``pieces[:-1]``) to the transfer, begun here if none is under way; where to go on
        (``pos``, or where a BEL ended a chunk: see ``ran``)."""
        if self.loading is None:
            self.loading = _Transfer(read.keys, read.kind, self.slot(), self.errors)
        return self.ran(data, start, b"".join(pieces[:-1]), pos, True)

    def ran(self, data: bytes, first: int, joined: Output, pos: int, more: bool,
            decoded: bytes | None = None, tried: bool = False) -> int:
        """Feed what ``take`` took (``joined``: the base64 of the chunks from ``first`` to
        ``pos``; ``decoded``, if ``tried``: what it decodes to), finish the transfer unless
        ``more``; return where the general way goes on."""
        loading = self.loading
        assert loading is not None
        stream = loading.b64
        if (
            not tried and joined and stream.decode and stream.error is None
            and not stream.carry and len(joined) <= MAX_BASE64_CHARS
        ):
            decoded = strict_decode(joined)
        if decoded is not None:
            stream.feed(joined, 0, len(joined), decoded)
        else:  # walk the chunks again, each checked for BEL and fed on its own
            at = first
            while at < pos:
                start = data.find(b";", at) + 1
                end = data.find(ESC, start)  # where take found its ST
                if data.find(BEL, start, end) >= 0:  # it ends at that BEL: the general way.
                    # The chunks after it were taken for nothing; were that to happen again
                    # and again, each time taking them anew, time would grow as the square.
                    self.batch = False
                    return at
                stream.feed(data, start, end)
                at = end + 2
        if not more:
            self.loading = None
            self.complete(loading)
        return pos

    def decoded(self, keys: dict[str, str], start: int, end: int) -> bytes | None:
        """``data[start:end]`` decoded, if it is image data, whole base64 quanta and no more."""
        size = end - start
        if not 0 < size <= MAX_BASE64_CHARS or size % 4 or keys.get("a", "t") not in ("t", "T"):
            return None
        return strict_decode(self.view[start:end])

    def command(
        self, keys: dict[str, str], data: bytes, start: int, end: int, cut: bool,
        decoded: bytes | None,
    ) -> None:
        action = keys.get("a", "t")
        more = keys.get("m") == "1"
        medium = keys.get("t", "d")
        loading = self.loading
        if loading is not None and _continues(keys):
            # A chunk after the first: only m= counts, whatever else it repeats.
            loading.add(data, start, end, cut, decoded)
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
        # A place for its marker is reserved only when output may come before it ends.
        transfer = _Transfer(keys, kind, self.slot() if more else None, self.errors)
        transfer.add(data, start, end, cut, decoded)
        if more:
            self.loading = transfer
        else:
            self.complete(transfer)

    def complete(self, transfer: _Transfer) -> None:
        if transfer.kind == "query":
            return
        if transfer.kind == "frame":
            marker = self.note("kitty animation frame: not shown")
            if transfer.slot is None:
                self.out.append(marker)
            else:
                self.fill(transfer.slot, marker)
            return
        png, why = transfer.image(self.convert)
        self.land(_int(transfer.keys.get("i")), png, why, transfer.slot)

    def convert(self, keys: dict[str, str], data: bytes) -> tuple[bytes | None, str | None]:
        """``_image``, within the output's decoding budget: inflating and turning raw pixels
        into PNG are work beyond the bytes sent, and are charged to it; once it is spent,
        such an image is dropped undecoded."""
        fmt, squeezed = keys.get("f", "32"), bool(keys.get("o"))
        if fmt == "100" and not squeezed:  # a PNG as it was sent: no work
            return _image(keys, data, self.max_decoded)
        if self.left <= 0:
            return None, self.over_budget().split(": ", 1)[1]
        png, why = _image(keys, data, self.max_decoded)
        width, height = _int(keys.get("s")), _int(keys.get("v"))
        cost = _png_cost(width, height, 3 if fmt == "24" else 4) if width and height else 0
        if fmt in ("24", "32") and cost <= self.max_decoded:  # else refused, undecoded
            self.spend(cost)
        elif png is not None:
            self.spend(len(png))
        return png, why

    def land(self, image_id: int | None, data: bytes | None, why: str | None,
             slot: int | None) -> None:
        """An image transfer done (``image_id``: its ``i=``): its image added, or a marker
        saying ``why`` not where it began (``slot``; ``None``: here, nothing having been
        written since it began)."""
        if data is None:
            marker = self.note(f"kitty image dropped: {why}")
            if slot is None:
                self.out.append(marker)
            else:
                self.fill(slot, marker)
            return
        if image_id:
            earlier = self.by_id.get(image_id)
            if earlier is not None:
                index, old_slot, old = earlier
                if old == data:
                    return  # the same image again
                self.remove_image(index)
                self.fill(old_slot,
                          self.note(f"kitty image i={image_id} dropped: sent again, changed"))
                del self.by_id[image_id]
        index = self.add_image(ImagePayload(data, "image/png", "kitty"))
        if image_id and index >= 0:
            self.by_id[image_id] = (index, self.slot() if slot is None else slot, data)

    def finish(self) -> Cut:
        if self.loading is not None:
            self.loading.b64.fail("transfer not finished at the end of the output")
            self.complete(self.loading)
            self.loading = None
        return self.result(_strip_placeholders(self.out.join(), self.errors))


class _Control:
    """Control data, read: its keys, and what taking chunks asks of them."""

    __slots__ = ("keys", "continues", "more", "kind", "image_id", "plain")

    def __init__(self, keys: dict[str, str]) -> None:
        self.keys = keys
        self.continues = _continues(keys)  # image data, of a transfer if one is under way
        self.more = keys.get("m") == "1"
        self.kind = "frame" if keys.get("a") == "f" else "image"  # if it begins a transfer
        self.image_id = _int(keys.get("i"))
        # A PNG with no id: what _image makes of its bytes is those bytes.
        self.plain = keys.get("f") == "100" and not keys.get("o") and not self.image_id


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
