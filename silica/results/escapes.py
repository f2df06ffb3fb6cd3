"""What the terminal image extractors (kitty, iTerm2, sixel) share.

They read a tool's output as the bytes it wrote: escape sequences are found with a SIMD
substring search (``find_escape``), ``bytes.find`` and compiled bytes patterns, an image's
base64 is decoded straight from slices of those bytes (``memoryview``, no copy), and only
what is left once the images are cut out is decoded to text, once (``Cut.text``). ``Cut``
is their common result. The rest is plumbing: the bytes of the text a tool printed
(``output_bytes``), a base64 decoder that takes its input in pieces, the tmux and GNU screen
passthrough unwrappers, and ``StreamExtractor``, the walk over the output that the kitty and
iTerm2 extractors build on.

The text a ``Cut`` decodes to is the text the extractor would give for the output decoded
first (UTF-8, bad bytes replaced) and then read: a piece of output left in front of a cut
ends as it would have ended on its own (``seal``), so bytes on either side of a removed
image never join into a character they were not.
"""

from __future__ import annotations

import binascii
import codecs
import importlib
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from silica.images.limits import (
    DEFAULT_MAX_DECODED_BYTES,
    DEFAULT_MAX_RESULT_DECODED_BYTES,
    ImageLimits,
)
from silica.images.payload import Extraction, ImagePayload


def _optional(module: str) -> Any:
    """``module`` if it can be imported, else ``None``."""
    try:
        return importlib.import_module(module)
    except ImportError:  # pragma: no cover - depends on the environment
        return None


# a faster decoder, used when it happens to be installed
_pybase64 = _optional("pybase64")
# a SIMD substring search (a dependency; without it, find_escape hops on bytes.find)
_stringzilla = _optional("stringzilla")

# One image's base64 text above this is dropped, unread.
MAX_BASE64_CHARS = 64 * 1024 * 1024
# Images one extractor keeps from one output, in number and in bytes; past either, each is
# dropped and counted in one marker (a result sends far fewer: ``max_images_per_result``).
MAX_IMAGES = 10_000
MAX_IMAGE_BYTES = 64 * 1024 * 1024
# Decoding work (inflated bytes, pixels turned into PNG, sixel canvases) one output may cost
# in all: the default budget of one result. Past it, an image that needs such work is dropped
# undecoded, so a small hostile sequence repeated cannot cost its budget over and over.
MAX_OUTPUT_DECODED_BYTES = DEFAULT_MAX_RESULT_DECODED_BYTES
# Decompressed (``o=z``) data, or what raw pixels take to turn into PNG, above this is
# dropped: the default decoding budget of one image (``ImageLimits.max_decoded_bytes``).
MAX_DECODED_BYTES = DEFAULT_MAX_DECODED_BYTES

ESC = b"\x1b"
BEL = b"\x07"
ST = b"\x1b\\"
TMUX = b"\x1bPtmux;"
SCREEN = b"\x1bP"
_UNSAFE = re.compile(r"[^\x20-\x7e]|[\[\]]")
# find_escape: how far bytes.find looks before hopping starts, and how close hops may come
# on average before it leaves a way of hopping.
_NEAR = 2048
_HOP_GAP = 128

Output = bytes | bytearray | memoryview


@dataclass(frozen=True)
class Cut:
    """What an extractor found in a tool's output bytes.

    ``data`` is the output with the images cut out: every other byte kept, in order, and
    each image that could not be had leaving one short ASCII marker in brackets where it
    was; ``images`` holds the images in the order they completed. ``errors`` is how the
    bytes decode (``"replace"`` for a tool's output; ``"surrogatepass"`` for text that was
    encoded to be read, see ``output_bytes``). When nothing was found, ``data`` is the very
    object that was read.
    """

    data: bytes | bytearray
    images: list[ImagePayload]
    errors: str = "replace"

    def text(self) -> str:
        """``data`` decoded, as the output decoded whole would read without the images."""
        return str(self.data, "utf-8", self.errors)

    def extraction(self) -> Extraction:
        return Extraction(text=self.text(), images=self.images)


def output_bytes(output: str | Output) -> tuple[bytes | bytearray, str]:
    """``output`` as bytes to scan, and the ``errors`` they decode with.

    Bytes are read as they are (a ``memoryview`` is copied once: searching needs
    ``bytes.find``); text is encoded to UTF-8, lone surrogates and all, so that it decodes
    back to itself.
    """
    if isinstance(output, str):
        return output.encode("utf-8", "surrogatepass"), "surrogatepass"
    if isinstance(output, memoryview):
        return output.tobytes(), "replace"
    return output, "replace"


def seal(piece: Output) -> Output:
    """``piece``, with an unfinished UTF-8 character at its end made what decoding gives
    for it there (U+FFFD, once or more).

    A piece of output kept in front of something cut out must decode as it would have,
    with what was cut still after it: the bytes after the cut must not complete a
    character it left unfinished. ``decode(seal(a) + b) == decode(a) + decode(b)``.
    """
    if not piece or piece[-1] < 0x80:
        return piece
    tail = bytes(piece[-3:])  # an unfinished character is at most 3 bytes
    _, used = codecs.utf_8_decode(tail, "replace", False)
    if used == len(tail):
        return piece
    cut = len(piece) - len(tail) + used  # what is left is decoded as the end would decode it
    return bytes(piece[:cut]) + tail[used:].decode("utf-8", "replace").encode()


def text_of(data: Output, errors: str) -> str:
    """A short slice of output (keys, arguments) as text; ``data`` ends on a character."""
    return str(data, "utf-8", errors)


def marker(text: str) -> bytes:
    """A marker for the cleaned output: ``text`` in brackets."""
    return f"[{text}]".encode()


def safe(value: str, limit: int = 40) -> str:
    """``value`` fit to quote inside a marker: printable ASCII, no brackets, short."""
    value = _UNSAFE.sub("?", value)
    return value if len(value) <= limit else value[: limit - 3] + "..."


def find_escape(
    data: bytes | bytearray, needle: bytes, start: int = 0, end: int | None = None,
    rare: int = 0,
) -> int:
    """``data.find(needle, start, end)`` for a ``needle`` that begins with ESC, only faster.

    With stringzilla installed, its SIMD search: one call over the data, about 0.1 ns a
    byte, however thick ESCs come. Without it: CPython's ``bytes.find`` compares its way
    through the data (about 0.5-1 ns a byte) for a needle of two bytes or more, but finds
    one byte with memchr, tens of times faster. So: the first ESC is most often the needle,
    or there is none (plain output); else ``bytes.find`` looks a little way on (``_NEAR``),
    where each call to it costs less than a hop below. Past that, this hops from one ESC to
    the next while they are far apart. Where they come thick (colours on every line) it hops
    on ``needle[rare]`` instead, a byte rare there; and if that comes thick too,
    ``bytes.find`` takes over. A hop costs a ``bytes.find`` call (0.1-0.4 µs), hence the
    switch once hops come closer than ``_HOP_GAP``.
    """
    end = len(data) if end is None else end
    if _stringzilla is not None:
        return _stringzilla.find(data, needle, start, end)
    find, startswith = data.find, data.startswith
    i = find(ESC, start, end)
    if i < 0 or startswith(needle, i, end):
        return i
    near = min(end, i + _NEAR)
    found = find(needle, i + 1, near)
    if found >= 0 or near == end:
        return found
    start = max(i + 1, near - len(needle) + 1)  # every start before this one was looked at
    for offset in (0, rare) if rare else (0,):
        byte = needle[offset]
        i = find(byte, start + offset, end)
        while True:
            if i < 0:
                return -1
            window = i
            for _ in range(64):
                if data[i - offset] == 0x1B and startswith(needle, i - offset, end):
                    return i - offset
                i = find(byte, i + 1, end)
                if i < 0:
                    return -1
            if i - window < 64 * _HOP_GAP:
                break  # thick: try the next way
        start = i - offset  # every start before this one was looked at
    return find(needle, start, end)


def match_end(pattern: re.Pattern[bytes], data: bytes | bytearray, pos: int,
              stop: int) -> int:
    """Where ``pattern``, which matches the empty string, stops matching ``data`` at
    ``pos`` (looking no further than ``stop``)."""
    found = pattern.match(data, pos, stop)
    return pos if found is None else found.end()


def find_pair(data: bytes | bytearray, pair: bytes, start: int = 0) -> int:
    """``data.find(pair, start)`` for two bytes whose second is rare (a C1 control in
    UTF-8: ``\\xc2\\x90``): memchr on it, and ``bytes.find`` once it comes thick (or the
    SIMD search of ``find_escape``)."""
    if _stringzilla is not None:
        return _stringzilla.find(data, pair, start)
    find, lead, byte = data.find, pair[0], pair[1]
    i = find(byte, start + 1)
    hops = 0
    while i >= 0:
        if data[i - 1] == lead:
            return i - 1
        hops += 1
        if hops == 64:
            return find(pair, i)
        i = find(byte, i + 1)
    return -1


def string_end(data: bytes | bytearray, start: int, esc: int | None = None) -> tuple[int, int]:
    """Where the APC/OSC string whose body begins at ``start`` ends, as ``(stop, end)``.

    ``stop`` is the index of its terminator, BEL or ST, and ``end`` the index just past it.
    If an ESC that does not begin ST, or the end of ``data``, comes first, the string was cut
    off: ``stop`` is that point and ``end`` is -1. ``esc``: the first ESC from ``start``
    (-1: none), if the caller knows it.
    """
    esc = data.find(ESC, start) if esc is None else esc
    limit = len(data) if esc < 0 else esc
    bel = data.find(BEL, start, limit)
    if bel >= 0:
        return bel, bel + 1
    if esc >= 0 and data.startswith(b"\\", esc + 1):
        return esc, esc + 2
    return limit, -1


def strict_decode(s: str | Output) -> bytes | None:
    """Decode padded base64 with nothing else in it (no whitespace); ``None`` if it is not.

    ``s`` may be ASCII text or any bytes-like object (a ``memoryview`` slice is not copied).
    """
    try:
        if _pybase64 is not None:
            return _pybase64.b64decode(s, validate=True)
        return binascii.a2b_base64(s, strict_mode=True)
    except ValueError:  # binascii.Error is a ValueError; so is non-ASCII text
        return None


def decode_base64(s: str) -> bytes | None:
    """Decode standard base64 text (whitespace and missing padding tolerated); ``None`` if
    it is not base64. Uses the fast decoder when it is installed."""
    if not s.isascii():
        return None
    if any(c in s for c in " \t\r\n"):
        s = "".join(s.split())
    return _padded(s)


def _padded(s: str) -> bytes | None:
    """Decode ``s`` as a whole, mending missing or partial ``=`` padding at its end."""
    body = s.rstrip("=")
    rest = len(body) % 4
    if rest == 1:
        return None
    return strict_decode(body + "=" * ((4 - rest) % 4))


class Base64Stream:
    """Base64 fed in pieces (slices of the output bytes), decoded as it comes.

    Each piece may carry its own ``=`` padding (it is then decoded on its own), or stop
    anywhere (the unfinished quantum waits for the next piece). Whitespace inside is skipped
    (what ``str.split`` takes for whitespace). Anything else that is not base64, or more
    than ``MAX_BASE64_CHARS`` characters in all, sets ``error`` and frees what was decoded.
    A piece of whole quanta is decoded straight from the bytes; any other is read as text
    (decoded with ``errors``), as it was written.
    """

    __slots__ = ("parts", "carry", "chars", "error", "decode", "errors")

    def __init__(self, decode: bool = True, errors: str = "replace") -> None:
        # One buffer, not a list: thousands of tiny chunks cost their bytes, no object each.
        self.parts = bytearray()
        self.carry = ""
        self.chars = 0
        self.error: str | None = None
        self.decode = decode  # False: only count (the data will be thrown away)
        self.errors = errors

    def fail(self, reason: str) -> None:
        if self.error is None:
            self.error = reason
        self.parts = bytearray()
        self.carry = ""

    def feed(
        self, data: Output, start: int = 0, end: int | None = None,
        decoded: bytes | None = None,
    ) -> None:
        """Take ``data[start:end]``; nothing is copied when it decodes as it is.

        ``decoded``, if given, is what ``strict_decode`` made of that slice on its own (a
        caller that decoded it to learn that it is all base64); it is used when no unfinished
        quantum waits before it, and saves decoding the slice again.
        """
        end = len(data) if end is None else end
        if self.error is not None or end <= start:
            return
        size = end - start  # bytes: the characters, or more where some are not ASCII
        if self.chars + size > MAX_BASE64_CHARS:
            size = len(text_of(data[start:end], self.errors))
            if self.chars + size > MAX_BASE64_CHARS:
                self.fail("over 64 MiB of base64")
                return
        if not self.decode:
            piece = bytes(data[start:end])
            self.chars += size if piece.isascii() else len(text_of(piece, self.errors))
            return
        carry = self.carry
        if carry:
            decoded = None
        elif decoded is None and not size & 3:  # the usual: whole quanta, straight from bytes
            decoded = strict_decode(memoryview(data)[start:end])
        if decoded is not None:  # it decoded: all ASCII, so as many characters as bytes
            self.chars += size
            self.parts.extend(decoded)
            return
        # Read as text from here. (Without a carry, whole quanta were tried just above.)
        text = text_of(data[start:end], self.errors)
        self.chars += len(text)
        s = carry + text
        self.carry = ""
        if carry and len(s) % 4 == 0:
            out = strict_decode(s)
            if out is not None:
                self.parts.extend(out)
                return
        s = "".join(s.split())  # whitespace out (line-wrapped base64)
        if "=" in s:
            out = _padded(s)
        else:
            cut = len(s) - len(s) % 4
            out = strict_decode(s[:cut])
            self.carry = s[cut:]
        if out is None:
            self.fail("invalid base64")
        else:
            self.parts.extend(out)

    def finish(self) -> bytes | None:
        """All the decoded bytes, or ``None`` if ``error`` is set (it is set here too)."""
        if self.error is None and self.carry:
            tail = _padded(self.carry)
            if tail is None:
                self.fail("invalid base64")
            else:
                self.parts.extend(tail)
        if self.error is not None:
            return None
        data = bytes(self.parts)
        self.parts = bytearray()
        return data


def unwrap_tmux(data: bytes | bytearray, start: int) -> tuple[bytes, int]:
    """Unwrap ``ESC P tmux; <inner, each ESC doubled> ESC \\`` found at ``start``.

    Returns the inner bytes and the index just past the wrapper. A lone ESC inside is kept
    as it is; with no closing ``ESC \\`` the wrapper runs to the end of ``data``.
    """
    body_start = start + len(TMUX)
    i, n = body_start, len(data)
    while True:
        j = data.find(ESC, i)
        if j < 0 or j + 1 >= n:
            body, end = data[body_start:], n
            break
        follower = data[j + 1]
        if follower == 0x5C:  # backslash: ST
            body, end = data[body_start:j], j + 2
            break
        i = j + 2 if follower == 0x1B else j + 1
    return bytes(body).replace(b"\x1b\x1b", ESC), end


def _still_open(seg: bytes | bytearray, was_open: bool) -> bool:
    """Whether a sequence is still open after ``seg`` (was it open before: ``was_open``)."""
    begun = max(seg.rfind(b"\x1b_"), seg.rfind(b"\x1b]"))
    ended = max(seg.rfind(ST), seg.rfind(BEL))
    if begun != ended:
        return begun > ended
    return was_open


def unwrap_screen(data: bytes | bytearray, start: int) -> tuple[bytes, int]:
    """Unwrap GNU screen's passthrough found at ``start``: ``ESC P <piece> ESC \\`` repeated.

    screen passes each DCS string's content on unread, so emitters cut a sequence into
    pieces (chafa: every 200 bytes) and wrap each one; the ST inside the sequence is either
    cut in two (``ESC ESC \\ ESC P \\``) or, from emitters that cut blindly, taken by the
    piece it falls in. While the wrapped sequence is still open, the next adjacent piece is
    joined to it, and an ``ESC \\`` that ended a piece and is followed by another ``ESC \\``,
    ``ESC _`` or ``ESC ]`` is taken as the sequence's own ST. Returns the inner bytes and the
    index just past the last piece; with no closing ``ESC \\`` the last piece runs to the end.
    """
    parts: list[bytes | bytearray] = []
    pos, n = start + 2, len(data)
    is_open = False
    last: bytes | bytearray = b""
    while True:
        j = data.find(ST, pos)
        if j < 0:
            parts.append(data[pos:])
            return b"".join(parts), n
        piece = data[pos:j]
        parts.append(piece)
        is_open = _still_open(last + piece, is_open)
        last = piece[-1:] or last
        k = j + 2
        if not is_open:
            return b"".join(parts), k
        if data.startswith(SCREEN, k):
            pos = k + 2
        elif data.startswith((ST, b"\x1b_", b"\x1b]"), k):
            parts.append(ST)
            is_open, last, pos = False, b"\\", k
        else:
            return b"".join(parts), k


class Gathered:
    """What an extractor gathers from one output, within bounds whatever the output is: the
    output rebuilt without the images (``out``, bytes in one buffer), at most ``max_markers``
    markers (the rest counted, in one marker at the end), and the images, at most
    ``MAX_IMAGES`` of them and ``MAX_IMAGE_BYTES`` in all (the rest dropped and counted).
    ``source`` names the extractor in those markers. Decoding is within the budgets of
    ``limits`` (the configured ``[images]`` ones): ``max_decoded_bytes`` for one image
    (``max_decoded``) and ``max_result_decoded_bytes`` for all of the output's
    (``max_output``); without limits, the defaults."""

    source = ""
    max_markers = 100

    def __init__(self, errors: str = "replace", limits: ImageLimits | None = None) -> None:
        self.errors = errors
        self.max_decoded = MAX_DECODED_BYTES if limits is None else limits.max_decoded_bytes
        self.max_output = (MAX_OUTPUT_DECODED_BYTES if limits is None
                           else limits.max_result_decoded_bytes)
        self.out = Rebuilt()
        self._images: list[ImagePayload | None] = []
        self.kept_bytes = self.over = 0  # image bytes kept; images dropped past the caps
        self.marked = self.unmarked = 0
        self.spent = 0  # decoding work, see max_output

    @property
    def left(self) -> int:
        """Decoding work this output may still cost, in bytes."""
        return self.max_output - self.spent

    def spend(self, cost: int) -> None:
        self.spent += max(0, cost)

    @property
    def full(self) -> bool:
        """Whether no further image would be kept (``MAX_IMAGES``, or no budget left)."""
        return len(self._images) >= MAX_IMAGES or self.left <= 0

    def over_budget(self) -> str:
        return (f"{self.source} image dropped: over the decoding budget of one output "
                f"({self.max_output / (1024 * 1024):,.0f} MiB); send fewer or smaller "
                "images")

    def note(self, text: str) -> bytes:
        """The marker saying ``text``; or, once ``max_markers`` were made, ``b""`` (counted)."""
        if self.marked < self.max_markers:
            self.marked += 1
            return marker(text)
        self.unmarked += 1
        return b""

    def slot(self) -> int:
        """Reserve a place in the output here, for a marker that may be known only later."""
        return self.out.slot()

    def fill(self, slot: int, text: bytes) -> None:
        self.out.fill(slot, text)

    def add_image(self, payload: ImagePayload) -> int:
        """Keep ``payload``; its index, or -1 when it is past ``MAX_IMAGES`` images or
        ``MAX_IMAGE_BYTES`` bytes in all (it is then dropped, and counted in one marker)."""
        size = len(payload.data)
        if len(self._images) >= MAX_IMAGES or self.kept_bytes + size > MAX_IMAGE_BYTES:
            self.over += 1
            return -1
        self.kept_bytes += size
        self._images.append(payload)
        return len(self._images) - 1

    def remove_image(self, index: int) -> None:
        payload = self._images[index]
        if payload is not None:
            self.kept_bytes -= len(payload.data)
        self._images[index] = None

    def result(self, data: bytes | bytearray | None = None) -> Cut:
        data = self.out.join() if data is None else data
        self.out = Rebuilt()
        tail = []
        if self.unmarked:
            tail.append(marker(
                f"{self.source}: {self.unmarked} more dropped, not marked one by one"))
        if self.over:
            tail.append(marker(
                f"{self.source}: {self.over} more images dropped, past {MAX_IMAGES} images or "
                f"{MAX_IMAGE_BYTES // (1024 * 1024)} MiB of them in one output"))
        if tail:
            data = bytearray(data) if isinstance(data, bytes) else data
            for piece in tail:
                data += piece
        return Cut(data, [p for p in self._images if p is not None], self.errors)



class StreamExtractor(Gathered):
    """A walk over output bytes that finds one protocol's sequences, directly or in
    passthrough.

    A subclass sets ``source``, ``intro`` (how each of its sequences begins: ESC and the
    bytes after it) and ``commands`` (if given, one of them must follow ``intro``), and
    implements ``sequence``; it writes markers to ``out`` (between the pieces of output that
    ``feed`` keeps there) and the images through ``add_image``. ``errors``: how
    the output decodes (see ``Cut``), for the keys and arguments it reads as text.
    """

    source = ""
    intro = b""
    commands: tuple[bytes, ...] = ()
    rare = 0  # which byte of intro to hop on where ESCs are thick (see find_escape)
    max_depth = 2  # passthrough inside passthrough, and no deeper
    starts: ClassVar[re.Pattern[bytes]]  # set for each subclass, see __init_subclass__
    reach: ClassVar[int]

    def __init_subclass__(cls) -> None:
        direct = re.escape(cls.intro[1:])
        if cls.commands:
            direct += b"(?=" + b"|".join(map(re.escape, cls.commands)) + b")"
        # The next sequence or passthrough nearby: one call, the regex engine skips ahead
        # fast between escapes. ``reach``: the most bytes a match looks at.
        cls.starts = re.compile(
            b"\x1b(?:(?P<direct>" + direct + b")|(?P<tmux>Ptmux;)|(?P<screen>P(?=\x1b"
            + direct + b")))"
        )
        longest = max(map(len, cls.commands), default=0)
        cls.reach = max(len(TMUX), len(SCREEN) + len(cls.intro) + longest)

    def __init__(self, errors: str = "replace", limits: ImageLimits | None = None) -> None:
        super().__init__(errors, limits)
        self.view = memoryview(b"")  # of the bytes being walked, for slices without a copy

    def sequence(self, data: bytes, start: int, body: int) -> int:
        """Handle the sequence at ``data[start]`` (its body begins at ``body``); return its end."""
        raise NotImplementedError

    def find(self, data: bytes | bytearray, pos: int = 0) -> int:
        """Where our next sequence begins in ``data``, at ``pos`` or after; -1 if nowhere."""
        while True:
            at = find_escape(data, self.intro, pos, rare=self.rare)
            if at < 0 or not self.commands or data.startswith(self.commands, at + len(self.intro)):
                return at
            pos = at + 1

    def feed(self, data: bytes, depth: int = 0, at: int = -1) -> None:
        """Walk ``data`` (bytes: the control strings read from it are looked up by value);
        ``at``: where ``find`` says our first sequence is, if known."""
        outer, self.view = self.view, memoryview(data)
        out, pos, size, search, view = self.out, 0, len(data), self.starts.search, self.view
        find, startswith, intro, commands = data.find, data.startswith, self.intro, self.commands
        skip, keep, sequence = len(intro), out.append, self.sequence
        while True:
            near = pos + _NEAR
            esc = find(ESC, pos, near)
            if esc >= 0 and startswith(intro, esc) and (
                not commands or startswith(commands, esc + skip)
            ):  # the first ESC begins one of ours: no earlier match for search to find
                if esc > pos:  # kept, and sealed: what begins at esc is cut out
                    piece = view[pos:esc]
                    keep(piece if piece[-1] < 0x80 else seal(piece))
                pos = sequence(data, esc, esc + skip)
                continue
            if (found := search(data, pos, near)) is not None:
                start, kind = found.start(), found.lastgroup
            elif near >= size:
                break
            else:  # nothing near: hop to our next sequence (at, kept while it is ahead)
                far = max(pos, near - self.reach)  # no match begins before far
                if at < far:
                    at = self.find(data, far)
                if at < 0:
                    break
                # Passthrough that matters wraps one of our sequences, so it begins before
                # it: tmux anywhere, screen just before. Past the last, it is kept as it is.
                start, kind = at, "direct"
                esc = find(ESC, far, at)
                if esc >= 0:
                    tmux = find_escape(data, TMUX, esc, at, rare=1)
                    if tmux >= 0:
                        start, kind = tmux, "tmux"
                    elif at - 2 >= far and data.startswith(SCREEN, at - 2):
                        start, kind = at - 2, "screen"
            if start > pos:  # kept, and sealed: what begins at start is cut out
                piece = view[pos:start]
                keep(piece if piece[-1] < 0x80 else seal(piece))
            if kind == "direct":
                pos = sequence(data, start, start + skip)
                continue
            wrapper = TMUX if kind == "tmux" else SCREEN
            if depth >= self.max_depth:
                out.append(wrapper)
                pos = start + len(wrapper)
                continue
            inner, pos = (unwrap_tmux if kind == "tmux" else unwrap_screen)(data, start)
            first = self.find(inner)
            if first >= 0:
                self.feed(inner, depth + 1, first)
            else:  # passthrough of something else: not ours, keep it whole
                out.append(view[start:pos])
        # The end of passthrough is followed by what came after the wrapper: sealed too.
        out.append(view[pos:] if depth == 0 else seal(view[pos:]))
        self.view = outer

class Rebuilt:
    """The output being rebuilt by an extractor: what is kept, copied into one buffer (no
    object per piece, however many there are), and the places reserved for markers that are
    known only later (``slot``, ``fill``)."""

    __slots__ = ("buf", "slots", "filled")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.slots: list[int] = []  # where each reserved place is in buf
        self.filled: dict[int, bytes] = {}

    def append(self, piece: Output) -> None:
        self.buf += piece

    def slot(self) -> int:
        self.slots.append(len(self.buf))
        return len(self.slots) - 1

    def fill(self, slot: int, text: bytes) -> None:
        if text:
            self.filled[slot] = text
        else:
            self.filled.pop(slot, None)

    def join(self) -> bytearray:
        """The output, the markers in their places."""
        if not self.filled:
            return self.buf
        out, view, pos = bytearray(), memoryview(self.buf), 0
        for slot in sorted(self.filled):
            at = self.slots[slot]
            out += view[pos:at]
            out += self.filled[slot]
            pos = at
        out += view[pos:]
        return out
