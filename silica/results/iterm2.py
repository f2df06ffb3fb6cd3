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

from silica.images.limits import ImageLimits
from silica.images.payload import ImagePayload
from silica.images.sniff import sniff_media_type
from silica.results.escapes import (
    ESC,
    Base64Stream,
    Cut,
    Extraction,
    Output,
    StreamExtractor,
    match_end,
    output_bytes,
    safe,
    string_end,
    text_of,
)

__all__ = ["Extraction", "cut_iterm2", "extract_iterm2"]

# What a cut-off sequence is taken to be: arguments and base64, no further.
_HEADER = re.compile(rb"[A-Za-z0-9+/=,;:.%_\-]*")
_ARGS = 4096  # characters of arguments read from a File= with no data


def extract_iterm2(output: str | Output) -> Extraction:
    """Take the images that iTerm2 inline image sequences carry out of ``output``: the text
    a tool printed, or its bytes (then decoded as UTF-8, bad bytes replaced, once the images
    are out).

    Callers may rely on this:

    - It never raises, and takes time and memory in proportion to ``output``.
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
    - Bytes give the text that their decoding would give (see ``extract_kitty``).
    """
    if isinstance(output, str) and "\x1b" not in output:  # memchr: the quickest no
        return Extraction(text=output, images=[])
    return cut_iterm2(*output_bytes(output)).extraction()


def cut_iterm2(data: bytes | bytearray, errors: str = "replace",
               limits: ImageLimits | None = None) -> Cut:
    """``extract_iterm2`` on output bytes, the text left as bytes (``Cut``): what the result
    pipeline runs. ``errors``: how ``data`` decodes (see ``Cut``); ``limits``: the budgets
    (see ``Gathered``; iTerm2 images are sent as files, decoded only when prepared)."""
    if ESC not in data:  # memchr: the quickest no
        return Cut(data, [], errors)
    extractor = _ITerm2(errors, limits)
    first = extractor.find(data)
    if first < 0:  # none of ours, not even in passthrough (it is kept as it is)
        return Cut(data, [], errors)
    extractor.feed(bytes(data) if isinstance(data, bytearray) else data, at=first)
    return extractor.finish()


def _arguments(text: str) -> dict[str, str]:
    args: dict[str, str] = {}
    for item in text.split(";"):
        key, eq, value = item.partition("=")
        if eq:
            args[key.strip()] = value.strip()
    return args


def _name(args: dict[str, str]) -> str:
    stream = Base64Stream(errors="surrogatepass")
    stream.feed(args.get("name", "")[:400].encode("utf-8", "surrogatepass"))
    raw = stream.finish()
    return safe(raw.decode("utf-8", errors="replace"), 60) if raw else ""


class _Multipart:
    __slots__ = ("args", "slot", "b64")

    def __init__(self, args: dict[str, str], slot: int, errors: str) -> None:
        self.args, self.slot = args, slot
        self.b64 = Base64Stream(errors=errors)


class _ITerm2(StreamExtractor):
    source = "iterm2"
    intro = b"\x1b]1337;"  # no rare byte to hop on: bytes.find, long needle, does well
    commands = (b"File=", b"MultipartFile=", b"FilePart=", b"FileEnd")

    def __init__(self, errors: str = "replace", limits: ImageLimits | None = None) -> None:
        super().__init__(errors, limits)
        self.loading: _Multipart | None = None
        self.orphan = False  # a marker was left for FilePart/FileEnd with no MultipartFile

    def sequence(self, data: bytes, start: int, body: int) -> int:
        stop, end = string_end(data, body)
        cut = end < 0
        if cut and data.startswith(b"FileEnd", body):
            stop = end = body + len(b"FileEnd")
            cut = False  # it carries nothing that could be lost
        elif cut:  # take only what can belong to the sequence
            stop = end = match_end(_HEADER, data, body, stop)
        if data.startswith(b"File=", body):
            self.single(data, body + len(b"File="), stop, cut)
        elif data.startswith(b"MultipartFile=", body):
            self.abandon("interrupted by another file")
            self.orphan = False
            args = _arguments(text_of(data[body + len(b"MultipartFile=") : stop], self.errors))
            self.loading = _Multipart(args, self.slot(), self.errors)
            if cut:
                self.loading.b64.fail("escape sequence cut off")
        elif self.loading is None:
            if not self.orphan:
                self.out.append(self.note("iterm2 image dropped: file part without its start"))
                self.orphan = True
        elif data.startswith(b"FilePart=", body):
            self.loading.b64.feed(data, body + len(b"FilePart="), stop)
            if cut:
                self.loading.b64.fail("escape sequence cut off")
        else:  # FileEnd
            loading, self.loading = self.loading, None
            why = self.keep_file(loading.args, loading.b64)
            if why:
                self.fill(loading.slot, why)
        return end

    def single(self, data: bytes, start: int, stop: int, cut: bool) -> None:
        colon = data.find(b":", start, stop)
        stream = Base64Stream(errors=self.errors)
        if cut:
            stream.fail("escape sequence cut off")
        elif colon < 0:
            stream.fail("no data")
        else:
            stream.feed(data, colon + 1, stop)
        if colon >= 0:
            args = _arguments(text_of(data[start:colon], self.errors))
        else:  # no data: the arguments are all there is, read no further than _ARGS of them
            args = _arguments(self.leading(data, start, stop, _ARGS))
        why = self.keep_file(args, stream)
        if why:
            self.out.append(why)

    def leading(self, data: bytes, start: int, stop: int, chars: int) -> str:
        """The first ``chars`` characters of ``data[start:stop]``."""
        end = min(stop, start + 4 * chars)  # a character is at most 4 bytes
        for _ in range(3):  # not inside a character (of at most 3 bytes after its first)
            if start < end < stop and data[end] & 0xC0 == 0x80:
                end -= 1
        return text_of(data[start:end], self.errors)[:chars]

    def keep_file(self, args: dict[str, str], stream: Base64Stream) -> bytes | None:
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
            self.fill(loading.slot, self.keep_file(loading.args, loading.b64) or b"")

    def finish(self) -> Cut:
        self.abandon("transfer not finished at the end of the output")
        return self.result()
