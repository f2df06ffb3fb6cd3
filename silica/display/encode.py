"""The text that draws an image in a terminal, fitted to its cells.

``encode(data, protocol, cells)`` takes an image silica already holds (PNG, JPEG, GIF or WebP
bytes), decodes it through the same budget as every image from outside
(``silica.images.budget``), scales it down to fit the terminal (``fit``) and encodes the
pixels anew for the protocol:

- ``kitty``: the graphics protocol, a PNG (``a=T,f=100``) in chunks of 4096 base64
  characters, ``q=2`` (no answer comes back into the input) and ``c=``/``r=``, so it takes
  the cells ``fit`` chose whatever the terminal's real cell size;
- ``iterm2``: OSC 1337 ``File=inline=1;width=N;height=M;preserveAspectRatio=1:<base64>``,
  ended by BEL, with the fitted PNG;
- ``sixel``: DCS ``q`` ... ST at the fitted pixel size, 256 colours at most
  (``silica.display.sixel``);
- ``blocks``: the Unicode fallback, upper half blocks in 24-bit colour, a pixel above and one
  below in each cell (``silica.display.blocks``).

Nothing of the original bytes is written: no metadata, no text chunk, no trailing data,
only pixels encoded here. The text ends with the cursor at the start of the line below the
image. ``tmux=True`` wraps each escape sequence in tmux's passthrough, in pieces tmux
accepts.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import Literal, get_args

from PIL import Image

from silica.errors import SilicaError
from silica.images import budget
from silica.images.budget import SWAPPING, eight_bit, orientation
from silica.images.limits import ANTHROPIC
from silica.images.payload import ImagePayload
from silica.images.sniff import sniff_media_type

__all__ = ["PROTOCOLS", "Cells", "Fitted", "ImageNotDrawn", "Protocol", "encode", "fit",
           "tmux_wrap"]

Protocol = Literal["kitty", "iterm2", "sixel", "blocks"]
PROTOCOLS: tuple[Protocol, ...] = get_args(Protocol)

KITTY_CHUNK = 4096
"""Base64 characters per kitty graphics command, as the protocol asks."""

ITERM2_PART = 65536
"""Base64 characters per ``FilePart`` when an iTerm2 image goes through tmux in parts."""

TMUX_MAX = 900_000
"""Most bytes one tmux passthrough sequence may take: tmux drops a DCS string over 1 MiB
(its ``INPUT_BUF_LIMIT``), so a sixel image drawn through tmux is made smaller until its
wrapped sequence fits under this."""

LIMITS = ANTHROPIC
"""Whose bomb guard (``max_pixels``, ``max_decoded_bytes``) an image passes before it is
decoded: the same as for a tool's images."""

_TMUX_START, _ST, _BEL = "\x1bPtmux;", "\x1b\\", "\x07"
# area average, as fitting for a provider (flat stays flat), and exact: no reduction first
_RESAMPLE = Image.Resampling.BOX


class ImageNotDrawn(SilicaError):
    """The bytes given cannot be drawn: no image silica decodes, a truncated or corrupt
    one, or one over the decoding budget. ``str(err)`` says which."""


@dataclass(frozen=True)
class Cells:
    """The terminal's size in cells, and a cell's size in pixels (``CSI 16 t``; a guess when
    the terminal does not say)."""

    columns: int
    rows: int
    cell_width: int = 10
    cell_height: int = 20

    def __post_init__(self) -> None:
        for name in ("columns", "rows", "cell_width", "cell_height"):
            if getattr(self, name) < 1:
                raise ValueError(f"Cells.{name} must be at least 1")


@dataclass(frozen=True)
class Fitted:
    """The size an image is drawn at: its pixels, and the cells they take."""

    width_px: int
    height_px: int
    columns: int
    rows: int


def fit(width: int, height: int, cells: Cells, *, max_rows: int | None = None) -> Fitted:
    """The size a ``width`` x ``height`` image is drawn at in ``cells``.

    Callers may rely on this: it is never larger than the image on either side; it fits
    ``cells.columns`` columns and ``max_rows`` rows (default: the terminal's rows less two,
    at least one, so the line that describes the image stays on screen with it); when it is
    scaled down, the side that binds takes its whole room and the other is rounded to the
    nearest pixel (at least one), so the aspect ratio holds within that rounding. ``columns``
    and ``rows`` are the cells the pixels cover, at least one each.
    """
    if width < 1 or height < 1:
        raise ValueError("an image has at least one pixel a side")
    rows_room = max(1, cells.rows - 2) if max_rows is None else max(1, max_rows)
    room_w, room_h = cells.columns * cells.cell_width, rows_room * cells.cell_height
    if width <= room_w and height <= room_h:
        w, h = width, height
    elif width * room_h >= height * room_w:  # the width binds
        w, h = room_w, max(1, (2 * height * room_w + width) // (2 * width))
    else:  # the height binds
        w, h = max(1, (2 * width * room_h + height) // (2 * height)), room_h
    return Fitted(w, h, -(-w // cells.cell_width), -(-h // cells.cell_height))


def encode(data: bytes, protocol: Protocol, cells: Cells, *, tmux: bool = False,
           max_rows: int | None = None) -> str:
    """The text that draws image ``data`` fitted to ``cells`` (``fit``) with ``protocol``,
    ending with the cursor at the start of the line below it.

    Raises ``ImageNotDrawn`` (a ``SilicaError``) when ``data`` is no image silica can decode,
    or one over the decoding budget; nothing else for any bytes. Only escape sequences of
    the protocol, the characters and colours of ``blocks`` and line ends are written.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; one of {', '.join(PROTOCOLS)}")
    frame, turn, fitted = _decode(data, cells, max_rows)
    if protocol == "blocks":
        from silica.display.blocks import draw_blocks

        return draw_blocks(_scaled(frame, turn, (fitted.columns, 2 * fitted.rows), "RGBA"))
    if protocol == "sixel":
        return _sixel(frame, turn, fitted, tmux) + "\n"
    png = _png(_scaled(frame, turn, (fitted.width_px, fitted.height_px)))
    sequences = _kitty(png, fitted) if protocol == "kitty" else _iterm2(png, fitted, tmux)
    return "".join(tmux_wrap(s) if tmux else s for s in sequences) + "\n"


def tmux_wrap(sequence: str) -> str:
    """``sequence`` in tmux's passthrough: ``ESC P tmux;`` then the sequence with each ESC
    doubled, then ST. tmux hands the sequence itself to the terminal outside (with
    ``allow-passthrough`` on)."""
    return _TMUX_START + sequence.replace("\x1b", "\x1b\x1b") + _ST


def _decode(data: bytes, cells: Cells,
            max_rows: int | None) -> tuple[Image.Image, Image.Transpose | None, Fitted]:
    """The first frame of ``data``, decoded (8-bit L, LA, RGB or RGBA), what turns it
    upright per its EXIF orientation, and the size it is drawn at. Refused before decoding
    when over the budget. A JPEG is decoded at the smallest of its DCT scales (1/2, 1/4,
    1/8) that still holds the fitted size: a photo is drawn in a fraction of the time."""
    data = bytes(data)
    true_type = sniff_media_type(data)
    formats = budget.plugins(true_type) if true_type else None
    with warnings.catch_warnings():  # Pillow's bomb warning: the budget decides, quietly
        warnings.simplefilter("ignore")
        cost = budget.inspect(ImagePayload(data, None, "terminal"), LIMITS)
    if formats is None or cost is None:
        raise ImageNotDrawn("the image cannot be drawn: its bytes are no image silica can "
                            "decode (PNG, JPEG, GIF or WebP)")
    refusal = cost.refusal(LIMITS)
    if refusal is not None:
        raise ImageNotDrawn(f"the image cannot be drawn: {refusal}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            img = Image.open(io.BytesIO(data), formats=list(formats))
            img.seek(0)
            turn = orientation(img)
            width, height = img.size
            if turn in SWAPPING:
                width, height = height, width
            fitted = fit(width, height, cells, max_rows=max_rows)
            if img.format == "JPEG":
                stored = (fitted.width_px, fitted.height_px)
                img.draft(None, stored[::-1] if turn in SWAPPING else stored)
            img.load()
            frame = eight_bit(img)
    except Exception as exc:  # truncated, corrupt: one clear message, never a traceback
        raise ImageNotDrawn(f"the image cannot be drawn: it is truncated or corrupt "
                            f"({type(exc).__name__})") from None
    return frame, turn, fitted


def _scaled(frame: Image.Image, turn: Image.Transpose | None, size: tuple[int, int],
            mode: str | None = None) -> Image.Image:
    """``frame`` scaled to ``size`` (upright), alpha kept only where some pixel is not
    opaque; in ``mode`` if given. A new image holding pixels only (``info`` empty)."""
    alpha = budget.has_alpha(frame)
    stored = (size[1], size[0]) if turn in SWAPPING else size
    if stored[0] > frame.width or stored[1] > frame.height:  # a cell is more than the image
        work = frame.convert("RGBa" if alpha and frame.mode == "RGBA" else frame.mode)
        scaled = work.resize(stored, _RESAMPLE)
        scaled = scaled.convert(frame.mode) if scaled.mode != frame.mode else scaled
    else:
        scaled = budget.resize(frame, stored, alpha, resample=_RESAMPLE, reducing_gap=None)
    if turn is not None:
        scaled = scaled.transpose(turn)
    if not alpha and scaled.mode in ("LA", "RGBA"):
        scaled = scaled.convert(scaled.mode[:-1])
    if mode is not None and scaled.mode != mode:
        scaled = scaled.convert(mode)
    scaled.info.clear()  # Pillow copies the source's info (ICC profile, text): pixels only
    return scaled


def _png(img: Image.Image) -> bytes:
    """``img`` as a PNG, as silica writes one for a provider (rows unfiltered where that
    compresses better: flat screenshots, in a few milliseconds)."""
    from silica.images import encode as image_encode

    data = image_encode.encode(img, image_encode.Form("png"))
    assert data is not None  # no cap: always encoded
    return data


def _b64(data: bytes) -> str:
    import pybase64

    return pybase64.b64encode(data).decode("ascii")


def _kitty(png: bytes, fitted: Fitted) -> list[str]:
    encoded = _b64(png)
    chunks = [encoded[i : i + KITTY_CHUNK] for i in range(0, len(encoded), KITTY_CHUNK)]
    sequences = []
    for i, chunk in enumerate(chunks):
        more = int(i < len(chunks) - 1)
        keys = (f"a=T,f=100,q=2,c={fitted.columns},r={fitted.rows},m={more}" if i == 0
                else f"q=2,m={more}")
        sequences.append(f"\x1b_G{keys};{chunk}{_ST}")
    return sequences


def _iterm2(png: bytes, fitted: Fitted, tmux: bool) -> list[str]:
    """One ``File=`` sequence; through tmux, ``MultipartFile=``, ``FilePart=``s and
    ``FileEnd``, each short enough for tmux's passthrough."""
    args = (f"inline=1;size={len(png)};width={fitted.columns};height={fitted.rows};"
            "preserveAspectRatio=1")
    encoded = _b64(png)
    if not tmux:
        return [f"\x1b]1337;File={args}:{encoded}{_BEL}"]
    parts = [encoded[i : i + ITERM2_PART] for i in range(0, len(encoded), ITERM2_PART)]
    return [f"\x1b]1337;MultipartFile={args}{_BEL}",
            *(f"\x1b]1337;FilePart={part}{_BEL}" for part in parts),
            f"\x1b]1337;FileEnd{_BEL}"]


def _sixel(frame: Image.Image, turn: Image.Transpose | None, fitted: Fitted,
           tmux: bool) -> str:
    """The sixel sequence at the fitted size; through tmux, wrapped, and made smaller until
    that fits ``TMUX_MAX``."""
    from silica.display.sixel import sixel_sequence

    size = (fitted.width_px, fitted.height_px)
    while True:
        sequence = sixel_sequence(_scaled(frame, turn, size))
        if not tmux:
            return sequence
        wrapped = tmux_wrap(sequence)
        if len(wrapped) <= TMUX_MAX or size == (1, 1):
            return wrapped
        shrink = min(0.9, 0.95 * (TMUX_MAX / len(wrapped)) ** 0.5)
        size = (max(1, int(size[0] * shrink)), max(1, int(size[1] * shrink)))
