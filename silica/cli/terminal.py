"""Images in the terminal: whether it can show them inline, and the kitty sequence that does.

Only the kitty graphics protocol is spoken (kitty, WezTerm and Ghostty understand it). Pillow
is imported only to convert a non-PNG image, so importing this module stays cheap.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping

FORCE_VAR = "SILICA_INLINE_IMAGES"  # "1": always show images inline, "0": never
CHUNK = 4096  # base64 characters per escape sequence, as the protocol asks
_KITTY_PROGRAMS = {"WezTerm", "ghostty"}


def kitty_supported(environ: Mapping[str, str], isatty: bool) -> bool:
    """Whether images can be drawn inline with the kitty graphics protocol.

    ``SILICA_INLINE_IMAGES=1`` or ``0`` decides outright. Otherwise the output must be a TTY
    and the terminal kitty (``TERM`` contains "kitty" or ``KITTY_WINDOW_ID`` is set), WezTerm
    or Ghostty (``TERM_PROGRAM``); inside tmux or screen, which drop graphics sequences unless
    told to pass them through, it is off.
    """
    forced = environ.get(FORCE_VAR, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    if not isatty:
        return False
    term = environ.get("TERM", "")
    if environ.get("TMUX") or term.startswith(("screen", "tmux")):
        return False
    return ("kitty" in term or bool(environ.get("KITTY_WINDOW_ID"))
            or environ.get("TERM_PROGRAM", "") in _KITTY_PROGRAMS)


def kitty_image(data: bytes) -> str:
    """The kitty graphics escape sequences that draw image ``data`` at the cursor.

    PNG bytes are sent as they are; any other format Pillow reads is converted to PNG first.
    The base64 goes in chunks of 4096 characters (``m=1`` on all but the last, ``m=0``), and
    ``q=2`` asks the terminal not to answer, so nothing ends up in the input stream.
    """
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        data = _as_png(data)
    encoded = base64.standard_b64encode(data).decode("ascii")
    chunks = [encoded[i:i + CHUNK] for i in range(0, len(encoded), CHUNK)] or [""]
    parts = []
    for i, chunk in enumerate(chunks):
        more = int(i < len(chunks) - 1)
        keys = f"a=T,f=100,q=2,m={more}" if i == 0 else f"q=2,m={more}"
        parts.append(f"\x1b_G{keys};{chunk}\x1b\\")
    return "".join(parts)


def _as_png(data: bytes) -> bytes:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        img.seek(0)
        frame = img.convert("RGBA" if "A" in img.getbands() or "transparency" in img.info
                            else "RGB")
    out = io.BytesIO()
    frame.save(out, format="PNG")
    return out.getvalue()
