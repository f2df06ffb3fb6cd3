"""The Unicode fallback: an image as half-block cells in 24-bit colour.

Each cell shows two pixels, one above the other: ``▀`` (U+2580, upper half block) in the
upper pixel's colour (SGR 38;2) on the lower pixel's (SGR 48;2). A pixel under half opaque is
left to the terminal's own background (SGR 39/49): ``▄`` (U+2584) when only the lower one is
drawn, a space when neither is. Colours are sent only where they change along a line, and
each line ends with an SGR reset and a newline, so nothing carries over to the text after.
"""

from __future__ import annotations

from PIL import Image

__all__ = ["draw_blocks"]

UPPER, LOWER = "\u2580", "\u2584"
RESET = "\x1b[0m"
_OPAQUE = 128  # alpha from which a pixel is drawn


def draw_blocks(img: Image.Image) -> str:
    """The lines that draw ``img`` (RGBA, an even number of rows: two per line), each ending
    with a reset and ``\\n``."""
    width, height = img.size
    if img.mode != "RGBA" or height % 2:
        raise ValueError("draw_blocks takes an RGBA image with an even number of rows")
    data = img.tobytes()
    stride = 4 * width
    lines = []
    for top in range(0, height, 2):
        parts: list[str] = []
        fg: bytes | None = None  # the colours in force; None: the terminal's default
        bg: bytes | None = None
        upper_row = data[top * stride : (top + 1) * stride]
        lower_row = data[(top + 1) * stride : (top + 2) * stride]
        for x in range(0, stride, 4):
            up = upper_row[x : x + 3] if upper_row[x + 3] >= _OPAQUE else None
            down = lower_row[x : x + 3] if lower_row[x + 3] >= _OPAQUE else None
            want_fg: bytes | None
            if up is None and down is not None:  # only the lower half: draw it as ▄
                glyph, want_fg, want_bg = LOWER, down, None
            elif up is None:
                glyph, want_fg, want_bg = " ", fg, None  # the foreground does not show
            else:
                glyph, want_fg, want_bg = UPPER, up, down
            if want_fg != fg:
                parts.append("\x1b[39m" if want_fg is None else _sgr(38, want_fg))
                fg = want_fg
            if want_bg != bg:
                parts.append("\x1b[49m" if want_bg is None else _sgr(48, want_bg))
                bg = want_bg
            parts.append(glyph)
        parts.append(RESET + "\n")
        lines.append("".join(parts))
    return "".join(lines)


def _sgr(kind: int, rgb: bytes) -> str:
    return f"\x1b[{kind};2;{rgb[0]};{rgb[1]};{rgb[2]}m"
