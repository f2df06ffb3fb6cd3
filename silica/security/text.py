"""Text from outside made safe to print in a terminal: ``safe_text``.

Tool descriptions, tool output and stderr, MCP servers' answers, pack manifests, file names
and error messages that quote any of them can carry escape sequences that set the window
title, clear the screen, draw links or reorder a line. ``safe_text`` leaves none of them
working, and shows the user where something was:

- an SGR sequence (7-bit ``ESC [ params m``, colour and bold) is removed silently: tool
  stderr is often coloured, and colour can neither move the cursor nor hide text for good;
- then ``"\\r\\n"`` becomes ``"\\n"``; newline and tab are kept;
- every other control character becomes visible: C0 controls (a lone CR included) and DEL
  as their Unicode control pictures (ESC is ``␛``, BEL ``␇``, CR ``␍``, DEL ``␡``); C1
  controls (U+0080-U+009F, the 8-bit CSI U+009B and OSC U+009D included), bidi marks,
  embeddings, overrides and isolates (U+061C, U+200E, U+200F, U+202A-U+202E,
  U+2066-U+2069) and lone surrogates (undecodable bytes of a file name) as ``<U+XXXX>``.

Every other escape sequence (CSI, OSC ended by BEL or ST, DCS, SOS, PM, APC, two-character
ESC sequences) is thereby shown whole and inert: ``"\\x1b]0;pwned\\x07"`` prints as
``␛]0;pwned␇``, an OSC 8 link as ``␛]8;;http://…␛\\click␛]8;;␛\\``. With its ESC gone no
part of a sequence is read by the terminal, however it ends or does not end.
"""

from __future__ import annotations

import re

# One class for everything that is cleaned; the fast path is one C-level search with it.
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                     r"\u2066-\u2069\ud800-\udfff]")
_SGR = re.compile(r"\x1b\[[0-9;:]*m")


def _visible(code: int) -> str:
    if code < 0x20:
        return chr(0x2400 + code)  # the control pictures block: ␀ … ␟
    if code == 0x7F:
        return "\u2421"  # ␡
    return f"<U+{code:04X}>"


_TABLE: dict[int, str] = {
    code: _visible(code)
    for lo, hi in ((0x00, 0x08), (0x0B, 0x1F), (0x7F, 0x9F), (0x061C, 0x061C),
                   (0x200E, 0x200F), (0x202A, 0x202E), (0x2066, 0x2069), (0xD800, 0xDFFF))
    for code in range(lo, hi + 1)
}


def safe_text(text: str) -> str:
    """``text`` with no character left that a terminal would act on (see the module
    docstring for what each becomes).

    What a caller may rely on: the result holds no C0 control but ``"\\n"`` and ``"\\t"``,
    no ESC, no DEL, no C1 control, no bidi control and no lone surrogate; text without any
    of those (emoji, CJK and combining marks included) is returned as it is (the same
    object); ``safe_text(safe_text(t)) == safe_text(t)``; the work is linear in
    ``len(text)``. Never raises for a ``str``.
    """
    if _UNSAFE.search(text) is None:
        return text
    # SGR first: a coloured line end ("\r\x1b[0m\n") is still a line end.
    text = _SGR.sub("", text).replace("\r\n", "\n")
    return text.translate(_TABLE)
