"""What the terminal image extractors (kitty, iTerm2) share.

``Extraction`` is their common result. The rest is plumbing: a base64 decoder that takes its
input in pieces, the tmux and GNU screen passthrough unwrappers, a fast search for escape
sequences (``find_escape``), and ``StreamExtractor``, the walk over the text that both
extractors build on.
"""

from __future__ import annotations

import binascii
import re

from silica.images.limits import DEFAULT_MAX_DECODED_BYTES
from silica.images.payload import Extraction, ImagePayload

try:  # a faster decoder, used when it happens to be installed
    import pybase64 as _pybase64
except ImportError:  # pragma: no cover - depends on the environment
    _pybase64 = None

# One image's base64 text above this is dropped, unread.
MAX_BASE64_CHARS = 64 * 1024 * 1024
# Decompressed (``o=z``) data, or what raw pixels take to turn into PNG, above this is
# dropped: the default decoding budget of one image (``ImageLimits.max_decoded_bytes``).
MAX_DECODED_BYTES = DEFAULT_MAX_DECODED_BYTES

ESC = "\x1b"
BEL = "\x07"
ST = "\x1b\\"
TMUX = "\x1bPtmux;"
SCREEN = "\x1bP"
_UNSAFE = re.compile(r"[^\x20-\x7e]|[\[\]]")
# find_escape: how far str.find looks before hopping starts, and how close hops may come
# on average before it leaves a way of hopping.
_NEAR = 2048
_HOP_GAP = 128


def marker(text: str) -> str:
    """A marker for the cleaned text: ``text`` in brackets."""
    return f"[{text}]"


def safe(value: str, limit: int = 40) -> str:
    """``value`` fit to quote inside a marker: printable ASCII, no brackets, short."""
    value = _UNSAFE.sub("?", value)
    return value if len(value) <= limit else value[: limit - 3] + "..."


def find_escape(
    text: str, needle: str, start: int = 0, end: int | None = None, rare: int = 0
) -> int:
    """``text.find(needle, start, end)`` for a ``needle`` that begins with ESC, only faster.

    CPython's ``str.find`` compares its way through the text (about 0.5 ns a character) for
    a needle of two characters or more, but finds one character with memchr, tens of times
    faster. So: the first ESC is most often the needle, or there is none (plain output);
    else ``str.find`` looks a little way on (``_NEAR``), where each call to it costs less
    than a hop below. Past that, this hops from one ESC to the next while they are far
    apart. Where they come thick (colours on every line) it hops on ``needle[rare]``
    instead, a character rare there; and if that comes thick too, ``str.find`` takes over.
    A hop costs about 0.1 µs, hence the switch once hops come closer than ``_HOP_GAP``.
    """
    end = len(text) if end is None else end
    find, startswith = text.find, text.startswith
    i = find(ESC, start, end)
    if i < 0 or startswith(needle, i, end):
        return i
    near = min(end, i + _NEAR)
    found = find(needle, i + 1, near)
    if found >= 0 or near == end:
        return found
    start = max(i + 1, near - len(needle) + 1)  # every start before this one was looked at
    for offset in (0, rare) if rare else (0,):
        char = needle[offset]
        i = find(char, start + offset, end)
        while True:
            if i < 0:
                return -1
            window = i
            for _ in range(64):
                if text[i - offset] == ESC and startswith(needle, i - offset, end):
                    return i - offset
                i = find(char, i + 1, end)
                if i < 0:
                    return -1
            if i - window < 64 * _HOP_GAP:
                break  # thick: try the next way
        start = i - offset  # every start before this one was looked at
    return find(needle, start, end)


def string_end(text: str, start: int, esc: int | None = None) -> tuple[int, int]:
    """Where the APC/OSC string whose body begins at ``start`` ends, as ``(stop, end)``.

    ``stop`` is the index of its terminator, BEL or ST, and ``end`` the index just past it.
    If an ESC that does not begin ST, or the end of ``text``, comes first, the string was cut
    off: ``stop`` is that point and ``end`` is -1. ``esc``: the first ESC from ``start``
    (-1: none), if the caller knows it.
    """
    esc = text.find(ESC, start) if esc is None else esc
    limit = len(text) if esc < 0 else esc
    bel = text.find(BEL, start, limit)
    if bel >= 0:
        return bel, bel + 1
    if esc >= 0 and text.startswith("\\", esc + 1):
        return esc, esc + 2
    return limit, -1


def strict_decode(s: str) -> bytes | None:
    """Decode padded base64 with nothing else in it (no whitespace); ``None`` if it is not."""
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
    """Base64 text fed in pieces, decoded as it comes.

    Each piece may carry its own ``=`` padding (it is then decoded on its own), or stop
    anywhere (the unfinished quantum waits for the next piece). Whitespace inside is skipped.
    Anything else that is not base64, or more than ``MAX_BASE64_CHARS`` in all, sets ``error``
    and frees what was decoded.
    """

    __slots__ = ("parts", "carry", "chars", "error", "decode")

    def __init__(self, decode: bool = True) -> None:
        self.parts: list[bytes] = []
        self.carry = ""
        self.chars = 0
        self.error: str | None = None
        self.decode = decode  # False: only count (the data will be thrown away)

    def fail(self, reason: str) -> None:
        if self.error is None:
            self.error = reason
        self.parts = []
        self.carry = ""

    def feed(
        self, text: str, start: int = 0, end: int | None = None, decoded: bytes | None = None
    ) -> None:
        """Take ``text[start:end]``; the slice is only made when it will be decoded.

        ``decoded``, if given, is what ``strict_decode`` made of that slice on its own (a
        caller that decoded it to learn that it is all base64); it is used when no unfinished
        quantum waits before it, and saves decoding the slice again.
        """
        end = len(text) if end is None else end
        if self.error is not None or end <= start:
            return
        self.chars += end - start
        if self.chars > MAX_BASE64_CHARS:
            self.fail("over 64 MiB of base64")
            return
        if not self.decode:
            return
        if decoded is not None and not self.carry:
            self.parts.append(decoded)
            return
        s = self.carry + text[start:end]
        self.carry = ""
        if len(s) % 4 == 0:
            out = strict_decode(s)
            if out is not None:
                self.parts.append(out)
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
            self.parts.append(out)

    def finish(self) -> bytes | None:
        """All the decoded bytes, or ``None`` if ``error`` is set (it is set here too)."""
        if self.error is None and self.carry:
            tail = _padded(self.carry)
            if tail is None:
                self.fail("invalid base64")
            else:
                self.parts.append(tail)
        if self.error is not None:
            return None
        data = b"".join(self.parts)
        self.parts = []
        return data


def unwrap_tmux(text: str, start: int) -> tuple[str, int]:
    """Unwrap ``ESC P tmux; <inner, each ESC doubled> ESC \\`` found at ``start``.

    Returns the inner text and the index just past the wrapper. A lone ESC inside is kept as
    it is; with no closing ``ESC \\`` the wrapper runs to the end of ``text``.
    """
    body_start = start + len("\x1bPtmux;")
    i, n = body_start, len(text)
    while True:
        j = text.find(ESC, i)
        if j < 0 or j + 1 >= n:
            body, end = text[body_start:], n
            break
        follower = text[j + 1]
        if follower == "\\":
            body, end = text[body_start:j], j + 2
            break
        i = j + 2 if follower == ESC else j + 1
    return body.replace("\x1b\x1b", ESC), end


def _still_open(seg: str, was_open: bool) -> bool:
    """Whether a sequence is still open after ``seg`` (was it open before: ``was_open``)."""
    begun = max(seg.rfind("\x1b_"), seg.rfind("\x1b]"))
    ended = max(seg.rfind(ST), seg.rfind(BEL))
    if begun != ended:
        return begun > ended
    return was_open


def unwrap_screen(text: str, start: int) -> tuple[str, int]:
    """Unwrap GNU screen's passthrough found at ``start``: ``ESC P <piece> ESC \\`` repeated.

    screen passes each DCS string's content on unread, so emitters cut a sequence into
    pieces (chafa: every 200 bytes) and wrap each one; the ST inside the sequence is either
    cut in two (``ESC ESC \\ ESC P \\``) or, from emitters that cut blindly, taken by the
    piece it falls in. While the wrapped sequence is still open, the next adjacent piece is
    joined to it, and an ``ESC \\`` that ended a piece and is followed by another ``ESC \\``,
    ``ESC _`` or ``ESC ]`` is taken as the sequence's own ST. Returns the inner text and the
    index just past the last piece; with no closing ``ESC \\`` the last piece runs to the end.
    """
    parts: list[str] = []
    pos, n = start + 2, len(text)
    is_open, last = False, ""
    while True:
        j = text.find(ST, pos)
        if j < 0:
            parts.append(text[pos:])
            return "".join(parts), n
        piece = text[pos:j]
        parts.append(piece)
        is_open = _still_open(last + piece, is_open)
        last = piece[-1:] or last
        k = j + 2
        if not is_open:
            return "".join(parts), k
        if text.startswith("\x1bP", k):
            pos = k + 2
        elif text.startswith((ST, "\x1b_", "\x1b]"), k):
            parts.append(ST)
            is_open, last, pos = False, "\\", k
        else:
            return "".join(parts), k


class StreamExtractor:
    """A walk over text that finds one protocol's sequences, directly or in passthrough.

    A subclass sets ``source``, ``intro`` (how each of its sequences begins: ESC and the
    characters after it) and ``commands`` (if given, one of them must follow ``intro``), and
    implements ``sequence``; it writes the cleaned text to ``out`` and the images through
    ``add_image``.
    """

    source = ""
    intro = ""
    commands: tuple[str, ...] = ()
    rare = 0  # which character of intro to hop on where ESCs are thick (see find_escape)
    max_depth = 2  # passthrough inside passthrough, and no deeper

    max_markers = 100  # past this many, drops are only counted, in one marker at the end

    def __init_subclass__(cls) -> None:
        direct = re.escape(cls.intro[1:])
        if cls.commands:
            direct += "(?=" + "|".join(map(re.escape, cls.commands)) + ")"
        # The next sequence or passthrough nearby: one call, the regex engine skips ahead
        # fast between escapes. ``reach``: the most characters a match looks at.
        cls.starts = re.compile(
            f"\x1b(?:(?P<direct>{direct})|(?P<tmux>Ptmux;)|(?P<screen>P(?=\x1b{direct})))"
        )
        longest = max(map(len, cls.commands), default=0)
        cls.reach = max(len(TMUX), len(SCREEN) + len(cls.intro) + longest)

    def __init__(self) -> None:
        self.out: list[str] = []
        self._images: list[ImagePayload | None] = []
        self.marked = self.unmarked = 0

    def sequence(self, text: str, start: int, body: int) -> int:
        """Handle the sequence at ``text[start]`` (its body begins at ``body``); return its end."""
        raise NotImplementedError

    def find(self, text: str, pos: int = 0) -> int:
        """Where our next sequence begins in ``text``, at ``pos`` or after; -1 if nowhere."""
        while True:
            at = find_escape(text, self.intro, pos, rare=self.rare)
            if at < 0 or not self.commands or text.startswith(self.commands, at + len(self.intro)):
                return at
            pos = at + 1

    def feed(self, text: str, depth: int = 0, at: int = -1) -> None:
        """Walk ``text``; ``at``: where ``find`` says our first sequence is, if known."""
        out, pos, size, search = self.out, 0, len(text), self.starts.search
        while True:
            near = pos + _NEAR
            found = search(text, pos, near)
            if found is not None:
                start, kind = found.start(), found.lastgroup
            elif near >= size:
                break
            else:  # nothing near: hop to our next sequence (at, kept while it is ahead)
                far = max(pos, near - self.reach)  # no match begins before far
                if at < far:
                    at = self.find(text, far)
                if at < 0:
                    break
                # Passthrough that matters wraps one of our sequences, so it begins before
                # it: tmux anywhere, screen just before. Past the last, it is kept as it is.
                start, kind = at, "direct"
                esc = text.find(ESC, far, at)
                if esc >= 0:
                    tmux = find_escape(text, TMUX, esc, at, rare=1)
                    if tmux >= 0:
                        start, kind = tmux, "tmux"
                    elif at - 2 >= far and text.startswith(SCREEN, at - 2):
                        start, kind = at - 2, "screen"
            if start > pos:
                out.append(text[pos:start])
            if kind == "direct":
                pos = self.sequence(text, start, start + len(self.intro))
                continue
            wrapper = TMUX if kind == "tmux" else SCREEN
            if depth >= self.max_depth:
                out.append(wrapper)
                pos = start + len(wrapper)
                continue
            inner, pos = (unwrap_tmux if kind == "tmux" else unwrap_screen)(text, start)
            first = self.find(inner)
            if first >= 0:
                self.feed(inner, depth + 1, first)
            else:  # passthrough of something else: not ours, keep it whole
                out.append(text[start:pos])
        out.append(text[pos:])

    def note(self, text: str) -> str:
        """The marker saying ``text``; or, once ``max_markers`` were made, ``""`` (counted)."""
        if self.marked < self.max_markers:
            self.marked += 1
            return marker(text)
        self.unmarked += 1
        return ""

    def slot(self) -> int:
        """Reserve a place in the text here, for a marker that may be known only later."""
        self.out.append("")
        return len(self.out) - 1

    def fill(self, slot: int, text: str) -> None:
        self.out[slot] = text

    def add_image(self, payload: ImagePayload) -> int:
        self._images.append(payload)
        return len(self._images) - 1

    def remove_image(self, index: int) -> None:
        self._images[index] = None

    def result(self, text: str | None = None) -> Extraction:
        text = "".join(self.out) if text is None else text
        if self.unmarked:
            text += marker(f"{self.source}: {self.unmarked} more dropped, not marked one by one")
        return Extraction(text=text, images=[p for p in self._images if p is not None])
