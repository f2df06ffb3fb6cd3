"""Images a tool drew with iTerm2's inline image protocol, taken out of its text.

The protocol (https://iterm2.com/documentation-images.html):
``ESC ] 1337 ; File=<args> : <base64> BEL`` (or ST), or in parts:
``ESC ] 1337 ; MultipartFile=<args> BEL``, then ``ESC ] 1337 ; FilePart=<base64> BEL`` one or
more times, then ``ESC ] 1337 ; FileEnd BEL``. Args are ``key=value`` joined by ``;``:
``name`` (base64 of the file name), ``size``, ``inline`` (1: show it; default 0: a download),
``width``, ``height``, ``preserveAspectRatio``.
"""

from __future__ import annotations

import re

from silica.images.payload import ImagePayload
from silica.images.sniff import sniff_media_type
from silica.results.escapes import (
    ESC,
    Base64Stream,
    Extraction,
    StreamExtractor,
    safe,
    string_end,
)

__all__ = ["Extraction", "extract_iterm2"]

# What a cut-off sequence is taken to be: arguments and base64, no further.
_HEADER = re.compile(r"[A-Za-z0-9+/=,;:.%_\-]*")


def extract_iterm2(text: str) -> Extraction:
    """Take the images that iTerm2 inline image sequences carry out of ``text``.

    Callers may rely on this:

    - It never raises, and takes time and memory in proportion to ``text``.
    - Every ``File=``, ``MultipartFile=``, ``FilePart=`` and ``FileEnd`` sequence of OSC 1337
      (ended by BEL or ST, also inside tmux and GNU screen passthrough) is removed. Other OSC
      1337 commands and everything else stay, character for character.
    - Each file shown inline (``inline=1``) is one ``ImagePayload`` with
      ``source="iterm2"`` and ``declared_type=None`` (the bytes decide), in the order the
      transfers completed. A download (``inline=0``, the default) is kept only if its bytes
      are an image by their magic numbers.
    - A file that can't be had (bad base64, empty, not an image though a download, over 64
      MiB of base64, unfinished, cut off) leaves one bracketed marker where it began, saying
      what and why.
    - A sequence cut off (no BEL or ST before the next ESC or the end) loses only the
      arguments and base64 that run on from its start; the text after them stays.
    """
    if ESC not in text:  # memchr: the quickest no
        return Extraction(text=text, images=[])
    extractor = _ITerm2()
    first = extractor.find(text)
    if first < 0:  # none of ours, not even in passthrough (it is kept as it is)
        return Extraction(text=text, images=[])
    extractor.feed(text, at=first)
    return extractor.finish()


def _arguments(text: str) -> dict[str, str]:
    args: dict[str, str] = {}
    for item in text.split(";"):
        key, eq, value = item.partition("=")
        if eq:
            args[key.strip()] = value.strip()
    return args


def _name(args: dict[str, str]) -> str:
    stream = Base64Stream()
    stream.feed(args.get("name", "")[:400])
    raw = stream.finish()
    return safe(raw.decode("utf-8", errors="replace"), 60) if raw else ""


class _Multipart:
    __slots__ = ("args", "slot", "b64")

    def __init__(self, args: dict[str, str], slot: int) -> None:
        self.args, self.slot = args, slot
        self.b64 = Base64Stream()


class _ITerm2(StreamExtractor):
    source = "iterm2"
    intro = "\x1b]1337;"  # no rare character to hop on: str.find, long needle, does well
    commands = ("File=", "MultipartFile=", "FilePart=", "FileEnd")

    def __init__(self) -> None:
        super().__init__()
        self.loading: _Multipart | None = None
        self.orphan = False  # a marker was left for FilePart/FileEnd with no MultipartFile

    def sequence(self, text: str, start: int, body: int) -> int:
        stop, end = string_end(text, body)
        cut = end < 0
        if cut and text.startswith("FileEnd", body):
            stop = end = body + len("FileEnd")
            cut = False  # it carries nothing that could be lost
        elif cut:  # take only what can belong to the sequence
            stop = end = _HEADER.match(text, body, stop).end()
        if text.startswith("File=", body):
            self.single(text, body + len("File="), stop, cut)
        elif text.startswith("MultipartFile=", body):
            self.abandon("interrupted by another file")
            self.orphan = False
            args = _arguments(text[body + len("MultipartFile=") : stop])
            self.loading = _Multipart(args, self.slot())
            if cut:
                self.loading.b64.fail("escape sequence cut off")
        elif self.loading is None:
            if not self.orphan:
                self.out.append(self.note("iterm2 image dropped: file part without its start"))
                self.orphan = True
        elif text.startswith("FilePart=", body):
            self.loading.b64.feed(text, body + len("FilePart="), stop)
            if cut:
                self.loading.b64.fail("escape sequence cut off")
        else:  # FileEnd
            loading, self.loading = self.loading, None
            why = self.keep(loading.args, loading.b64)
            if why:
                self.fill(loading.slot, why)
        return end

    def single(self, text: str, start: int, stop: int, cut: bool) -> None:
        colon = text.find(":", start, stop)
        stream = Base64Stream()
        if cut:
            stream.fail("escape sequence cut off")
        elif colon < 0:
            stream.fail("no data")
        else:
            stream.feed(text, colon + 1, stop)
        args = _arguments(text[start : colon if colon >= 0 else min(stop, start + 4096)])
        why = self.keep(args, stream)
        if why:
            self.out.append(why)

    def keep(self, args: dict[str, str], stream: Base64Stream) -> str | None:
        """Add the file as an image if it is one; else return the marker to leave."""
        data = stream.finish()
        name = _name(args)
        called = f" {name}" if name else ""
        if data is None:
            return self.note(f"iterm2 image{called} dropped: {stream.error}")
        if not data:
            return self.note(f"iterm2 image{called} dropped: no data")
        if args.get("inline") != "1":
            kind = sniff_media_type(data)
            if not (kind and kind.startswith("image/")):
                return self.note(
                    f"iterm2 file download{called} dropped: not an image, {len(data)} bytes"
                )
        self.add_image(ImagePayload(data=data, declared_type=None, source="iterm2"))
        return None

    def abandon(self, reason: str) -> None:
        if self.loading is not None:
            loading, self.loading = self.loading, None
            loading.b64.fail(reason)
            self.fill(loading.slot, self.keep(loading.args, loading.b64) or "")

    def finish(self) -> Extraction:
        self.abandon("transfer not finished at the end of the output")
        return self.result()
