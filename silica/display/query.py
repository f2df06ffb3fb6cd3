"""Asking the terminal what it can draw: one round of queries on the terminal itself, read
within a time and a size bound, the answers parsed (``parse_answers``).

The queries go out in one write, DA1 last: every terminal answers DA1 (``CSI c``), and in
the order asked, so once its answer is in, every other answer the terminal gives is in too.
A terminal that does not know a query ignores it. What is read that is not an answer
(garbage, a key typed at that moment) is dropped.
"""

from __future__ import annotations

import os
import re
import select
import termios
import time
from dataclasses import dataclass

KITTY_QUERY = b"\x1b_Gi=31,s=1,v=1,a=q,t=d,f=24;AAAA\x1b\\"  # kitty graphics: a 1x1 image
VERSION_QUERY = b"\x1b[>0q"  # XTVERSION: the terminal's name and version
CELL_QUERY = b"\x1b[16t"  # a cell's size in pixels
WINDOW_QUERY = b"\x1b[14t"  # the text area's size in pixels
DA1_QUERY = b"\x1b[c"  # primary device attributes; "4" among them: sixel
QUERY = KITTY_QUERY + VERSION_QUERY + CELL_QUERY + WINDOW_QUERY + DA1_QUERY
MAX_ANSWER = 4096  # bytes read at most: the answers take about a hundred

_KITTY_OK = re.compile(rb"\x1b_Gi=31;OK(?:\x1b\\|\x07)")
_DA1 = re.compile(rb"\x1b\[\?([0-9;]{0,64})c")
_CELL = re.compile(rb"\x1b\[6;([0-9]{1,5});([0-9]{1,5})t")
_WINDOW = re.compile(rb"\x1b\[4;([0-9]{1,5});([0-9]{1,5})t")
_VERSION = re.compile(rb"\x1bP>\|([\x20-\x7e]{0,128})(?:\x1b\\|\x07)")


@dataclass(frozen=True)
class Answers:
    """What the terminal said. ``cell`` and ``window`` are ``(width, height)`` in pixels;
    ``complete``: the DA1 answer came, so nothing more is on its way."""

    kitty: bool = False
    sixel: bool = False
    name: str = ""
    cell: tuple[int, int] | None = None
    window: tuple[int, int] | None = None
    complete: bool = False


def parse_answers(data: bytes) -> Answers:
    """The answers found in ``data``, whatever else it holds (never raises). A size of 0 is
    no answer; the DA1 answer is the first one found."""
    da1 = _DA1.search(data)
    attributes = da1.group(1).split(b";") if da1 else []
    version = _VERSION.search(data)
    return Answers(kitty=_KITTY_OK.search(data) is not None, sixel=b"4" in attributes,
                   name=version.group(1).decode("ascii") if version else "",
                   cell=_pixels(_CELL.search(data)), window=_pixels(_WINDOW.search(data)),
                   complete=da1 is not None)


def _pixels(found: re.Match[bytes] | None) -> tuple[int, int] | None:
    if found is None:
        return None
    height, width = int(found.group(1)), int(found.group(2))
    return (width, height) if width and height else None


def ask_terminal(fd: int, timeout: float) -> Answers:
    """Send ``QUERY`` to the terminal open on ``fd`` and read its answers for at most
    ``timeout`` seconds in all (less once the DA1 answer is in), at most ``MAX_ANSWER``
    bytes. The terminal is put in non-canonical mode without echo for the time, so the
    answers are neither shown nor left as input, and is always put back as it was (an
    error or Ctrl-C included: signals stay on)."""
    saved = termios.tcgetattr(fd)
    quiet = [*saved]
    quiet[3] &= ~(termios.ICANON | termios.ECHO)
    quiet[6] = [*saved[6]]
    quiet[6][termios.VMIN], quiet[6][termios.VTIME] = 0, 0
    data = bytearray()
    try:
        termios.tcsetattr(fd, termios.TCSANOW, quiet)
        deadline = time.monotonic() + timeout
        _write_all(fd, QUERY)
        while len(data) < MAX_ANSWER:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                break
            piece = os.read(fd, MAX_ANSWER - len(data))
            if not piece:
                break
            data += piece
            if _DA1.search(data):
                break
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)
    return parse_answers(bytes(data))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
