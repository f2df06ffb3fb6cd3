"""Images a tool drew as sixel graphics, taken out of its text.

A sixel image is a DCS string: ``ESC P <P1;P2;P3> q <data> ESC \\`` (or the 8-bit
``U+0090 ... U+009C``). Its data paints bands six pixels high, one column of six bits per
character (``?`` to ``~``), in the colour register last selected with ``#n``.

The decoder works on the whole stream at once with numpy, a chunk (~1 MiB) at a time: each
byte's column comes from a running sum of widths (1, or a repeat's count) reset at ``$``
and ``-``, its band from a running count of ``-``, its colour from the last ``#n`` before
it; the painted cells are then written into an index canvas with one fancy assignment per
batch. Python loops only over ``#``, ``!`` and ``"`` tokens, never over pixels.

Memory is bounded by the chunk whatever the bytes are: a chunk ends where no token is cut
(``_cut``), and a token whose parameters run on past a chunk (``#`` and megabytes of digits
and ``;``) is read in place, up to the parameters that count, and handed on as the short
token that means the same (``_short``).
"""

from __future__ import annotations

import colorsys
import io
import re
from collections.abc import Iterator

import numpy as np
from PIL import Image

from silica.images.limits import ImageLimits
from silica.images.payload import Extraction, ImagePayload
from silica.results.escapes import (
    MAX_DECODED_BYTES,
    Cut,
    Gathered,
    Output,
    find_escape,
    find_pair,
    match_end,
    output_bytes,
    seal,
)

__all__ = ["MAX_PIXELS", "SixelError", "cut_sixel", "decode_sixel", "extract_sixel"]

REGISTERS = 1024
"""Colour registers; a higher register number is folded into range (``n % 1024``)."""

BYTES_PER_PIXEL = 12
"""What a decoded pixel holds at the peak: its register (2), RGBA (4), Pillow's copy (4) and
the PNG (~2)."""

MAX_PIXELS = MAX_DECODED_BYTES // BYTES_PER_PIXEL
"""Width x height past which an image is refused before its canvas is allocated (~16.7 MP
under the default 192 MiB budget of one image)."""

MAX_WORK = 2 * MAX_PIXELS
"""Cells (a column of one band in one colour) painted per image (2 per pixel of the budget);
a legitimate image paints each pixel about once, so more is overdrawing meant to burn time."""

MAX_BODY = 64 * 1024 * 1024
"""Characters of sixel data past which a sequence is dropped unread."""

_CHUNK = 1 << 20  # bytes decoded at once: bounds the per-byte arrays (~50 bytes a byte)
_BATCH = 1 << 19  # cells painted at once: bounds the expanded index arrays
_PARAMS = re.compile(rb"[0-9;]*")
_COUNTED = 5  # parameters a token is read for (#: register, system and three values)
_START = re.compile(rb"(?:\x1bP|\xc2\x90)([0-9;]*)q")  # ESC P, or U+0090 in UTF-8
_END = re.compile(rb"\x1b|\xc2\x9c")  # ESC (ST, or another sequence), or U+009C
_DCS, _DCS_C1 = b"\x1bP", "\x90".encode()
_ROWS = np.array([v.bit_length() for v in range(64)])  # rows a six-bit column reaches
_VT340 = [  # the VT340's 16 default colours, in percent; register n starts as n % 16
    (0, 0, 0), (20, 20, 80), (80, 13, 13), (20, 80, 20), (80, 20, 80), (20, 80, 80),
    (80, 80, 20), (53, 53, 53), (26, 26, 26), (33, 33, 60), (60, 26, 26), (33, 60, 33),
    (60, 33, 60), (33, 60, 60), (60, 60, 33), (80, 80, 80),
]


class SixelError(ValueError):
    """Why a sixel image cannot be had: a short reason, fit for a notice. ``cost``: the
    decoding work spent before it was refused (bytes of the budget)."""

    cost = 0


def _percent(value: int) -> int:
    return (min(value, 100) * 255 + 50) // 100


def _params(raw: bytes | bytearray, start: int = 0, stop: int | None = None) -> list[int]:
    """Numbers of ``raw[start:stop]``, ``1;2;;3`` (empty: 0), the first ``_COUNTED`` of them
    (no token reads more); a number over nine digits reads as 999,999,999. Reads no further
    than those, and copies none longer than nine digits."""
    stop = len(raw) if stop is None else stop
    values: list[int] = []
    while len(values) < _COUNTED:
        end = raw.find(b";", start, stop)
        if end < 0:
            end = stop
        size = end - start
        values.append(999_999_999 if size > 9 else int(raw[start:end] or b"0"))
        if end == stop:
            break
        start = end + 1
    return values


def _short(kind: bytes, params: list[int]) -> bytes:
    """The short token that means what ``kind`` with ``params`` means."""
    return kind + b";".join(b"%d" % v for v in params)


def _cut(data: bytes | bytearray, pos: int, end: int, stop: int) -> int:
    """Where the chunk of ``data`` that begins at ``pos`` may end, at ``end`` or before it
    (the data ends at ``stop``): no token is split, and the character a ``!`` repeats stays
    with it. ``pos`` when a token begins at ``pos`` and runs on past ``end``."""
    if end >= stop:
        return stop
    last = max(data.rfind(c, pos, end) for c in (b"!", b"#", b'"'))
    if last < 0:
        return end
    if match_end(_PARAMS, data, last + 1, end) < end:  # it ends here, and what follows it
        return end
    return last


class _Canvas:
    """Register indices (0: never painted, else register + 1), grown as the image grows."""

    def __init__(self, max_pixels: int) -> None:
        self.max_pixels = max_pixels
        self.data = np.zeros((0, 0), np.uint16)
        self.width = self.height = 0  # what the image covers

    def need(self, width: int, height: int) -> None:
        """Make room for ``width`` x ``height``; refused past the budget, before allocating."""
        width, height = max(width, self.width), max(height, self.height)
        if width * height > self.max_pixels:
            raise SixelError(f"{width}x{height} px is over the decoding budget "
                             f"({self.max_pixels:,} px)")
        self.width, self.height = width, height
        cap_h, cap_w = self.data.shape
        if height <= cap_h and width <= cap_w:
            return
        # grow by half again where the budget allows, so bands arriving one by one are cheap
        new_w = max(width, min(cap_w * 3 // 2, self.max_pixels // max(height, 1)))
        new_h = max(height, min(cap_h * 3 // 2, self.max_pixels // max(new_w, 1)))
        grown = np.zeros((new_h, new_w), np.uint16)
        # The room kept may be narrower one way than before: only what is painted is copied.
        keep_h, keep_w = min(cap_h, new_h), min(cap_w, new_w)
        grown[:keep_h, :keep_w] = self.data[:keep_h, :keep_w]
        self.data = grown


class _Decoder:
    def __init__(self, max_pixels: int) -> None:
        self.canvas = _Canvas(max_pixels)
        vt340 = [tuple(_percent(v) for v in rgb) for rgb in _VT340]
        self.palette = [vt340[n % 16] for n in range(REGISTERS)]  # a list: cheap to set
        self.x = self.band = self.colour = 0
        self.raster: tuple[int, int] | None = None
        self.work = 0

    def token(self, kind: bytes, raw: bytes) -> int | None:
        """Apply a ``#`` or ``"`` token; a ``!`` token's count (capped to the widest row)."""
        if kind == b"#" and raw.isdigit() and len(raw) < 10:  # the common case: a selection
            self.colour = int(raw) % REGISTERS
            return None
        if kind == b"!" and raw.isdigit() and len(raw) < 10:  # the common repeat
            return min(max(int(raw), 1), self.canvas.max_pixels)
        values = _params(raw)
        if kind == b"!":
            return min(max(values[0], 1), self.canvas.max_pixels)
        if kind == b'"':
            if self.raster is None and len(values) >= 4:
                self.raster = (values[2], values[3])
                self.canvas.need(values[2], values[3])
            return None
        reg = values[0] % REGISTERS
        self.colour = reg
        if len(values) >= 5:
            a, b, c = values[2], values[3], values[4]
            if values[1] == 2:
                self.palette[reg] = (_percent(a), _percent(b), _percent(c))
            elif values[1] == 1:  # DEC hue: 0 is blue, 120 red, 240 green
                rgb = colorsys.hls_to_rgb(((a + 240) % 360) / 360, min(b, 100) / 100,
                                          min(c, 100) / 100)
                self.palette[reg] = tuple(round(v * 255) for v in rgb)
        return None

    def tokens(self, data: bytes, arr: np.ndarray, six: np.ndarray,
               width: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Apply the chunk's tokens, all at once: a ``!`` sets the width of the character it
        repeats, a ``#`` selects (and may define) a register, a ``"`` sets the raster. The
        positions where a selection takes effect, and the registers selected there.

        A token is its introducer and the run of digits and ``;`` after it. The common ones,
        ``#n`` and ``!n`` with at most nine digits, are read with array arithmetic; the rest
        (parameters, long numbers, ``"``) one by one with ``token``, in stream order."""
        n = len(arr)
        at = np.flatnonzero((arr == 33) | (arr == 34) | (arr == 35))  # ! " #
        if not len(at):
            return at, at
        digit = (arr >= 48) & (arr <= 57)
        stops = np.append(np.flatnonzero(~(digit | (arr == 59))), n)  # not a parameter
        ends = stops[np.searchsorted(stops, at, side="right")]  # each token's end
        size = ends - at - 1
        kinds = arr[at]
        semis = np.concatenate(([0], np.cumsum(arr == 59, dtype=np.int32)))
        simple = (semis[ends] == semis[at + 1]) & (size < 10) & (kinds != 34)
        value = np.zeros(len(at), np.int64)
        for k in range(9):  # digit k of each simple token, where it has one
            has = simple & (size > k)
            if not has.any():
                break
            value = np.where(has, value * 10 + arr[np.minimum(at + 1 + k, n - 1)] - 48, value)
        rare = np.flatnonzero(~simple)
        if len(rare):  # the rare ones, in order
            found = []
            for start, end in zip(at[rare].tolist(), ends[rare].tolist(), strict=True):
                count = self.token(data[start : start + 1], data[start + 1 : end])
                found.append(self.colour if count is None else count)
            value[rare] = found
        repeats = kinds == 33
        value[repeats] = np.clip(value[repeats], 1, self.canvas.max_pixels)
        value[simple & ~repeats] %= REGISTERS
        hit = repeats & (ends < n)
        hit[hit] = six[ends[hit]]
        width[ends[hit]] = value[hit]
        selects = kinds == 35
        if selects.any():
            self.colour = int(value[selects][-1])
        return ends[selects], value[selects]

    def chunk(self, data: bytes) -> None:
        arr = np.frombuffer(data, np.uint8)
        n = len(arr)
        six = (arr >= 63) & (arr <= 126)
        width = six.astype(np.int64)
        first_colour = self.colour
        sel_pos, sel_reg = self.tokens(data, arr, six, width)
        reset = (arr == 36) | (arr == 45)
        bands = self.band + np.cumsum(arr == 45)
        total = np.cumsum(width)
        start = total - width
        index = np.arange(n)
        last = np.maximum.accumulate(np.where(reset, index, -1))
        base = np.where(last >= 0, total[np.maximum(last, 0)], -self.x)
        x = start - base
        if n:
            self.x = int(total[-1] - base[-1])
            self.band = int(bands[-1])
        painted = six & (arr != 63) & (width > 0)
        if not painted.any():
            if six.any():
                self.canvas.need(int((x + width)[six].max()), 0)
            return
        colours = np.concatenate(([first_colour], sel_reg)).astype(np.uint16)
        which = np.searchsorted(sel_pos, index[painted], side="right")
        colour = colours[which]
        p_x, p_w, p_band = x[painted], width[painted], bands[painted]
        p_bits = arr[painted] - 63
        self.work += int(p_w.sum())
        if self.work > 2 * self.canvas.max_pixels:
            raise SixelError(f"over {2 * self.canvas.max_pixels:,} cells painted (overdrawing)")
        top = int(p_band.max())
        high = int(_ROWS[p_bits[p_band == top]].max())
        self.canvas.need(int((x + width)[six].max()), 6 * top + high)
        self._paint(p_band, p_x, p_w, p_bits, colour + 1)

    def _paint(self, band, x, w, bits, colour) -> None:
        """Cells in stream order, so a later colour wins where two overlap."""
        data = self.canvas.data
        stride = data.shape[1]
        flat = data.reshape(-1)
        ends = np.cumsum(w)
        lo = 0
        while lo < len(w):  # batches of about _BATCH cells
            hi = int(np.searchsorted(ends, (ends[lo - 1] if lo else 0) + _BATCH, "right"))
            hi = max(hi, lo + 1)
            bw = w[lo:hi]
            owner = np.repeat(np.arange(lo, hi), bw)
            offset = np.arange(len(owner)) - np.repeat(np.cumsum(bw) - bw, bw)
            top = band[owner] * (6 * stride) + x[owner] + offset  # each cell's top pixel
            cell_bits, cell_colour = bits[owner], colour[owner]
            for k in range(6):  # a row at a time: no pixel is in two rows, order holds
                on = (cell_bits & (1 << k)).astype(bool)
                flat[top[on] + k * stride] = cell_colour[on]
            lo = hi

    def cost(self) -> int:
        """The work done so far, in bytes of the budget: the canvas and the cells painted."""
        return self.canvas.data.size * BYTES_PER_PIXEL + self.work * 2

    def indices(self) -> np.ndarray:
        """The canvas the image covers (register + 1 a pixel, 0 where none painted)."""
        canvas = self.canvas
        if self.raster:  # the raster attributes are the least the image covers
            canvas.need(*self.raster)
        if not canvas.width or not canvas.height:
            raise SixelError("no pixels")
        return canvas.data[: canvas.height, : canvas.width]

    def lut(self, transparent: bool) -> np.ndarray:
        """Colour by canvas value: RGBA (unpainted: clear) if ``transparent``, else RGB
        (unpainted: register 0)."""
        palette = np.asarray(self.palette, np.uint8)
        if transparent:
            lut = np.zeros((REGISTERS + 1, 4), np.uint8)
            lut[1:, :3], lut[1:, 3] = palette, 255
            return lut
        return np.concatenate([palette[:1], palette])

    def image(self, transparent: bool) -> Image.Image:
        indices = self.indices()
        return Image.fromarray(self.lut(transparent)[indices], "RGBA" if transparent else "RGB")

    def png(self, transparent: bool) -> bytes:
        """The image as PNG: with a palette when at most 256 canvas values occur (a byte a
        pixel to compress, not three or four), else as ``image`` gives it. Either way it
        decodes to the pixels ``image`` has."""
        indices = self.indices()
        used = np.flatnonzero(np.bincount(indices.reshape(-1), minlength=REGISTERS + 1))
        if len(used) > 256:
            image = self.image(transparent)
        else:
            remap = np.zeros(REGISTERS + 1, np.uint8)
            remap[used] = np.arange(len(used))
            image = Image.fromarray(remap[indices], "L")
            colours = self.lut(transparent)[used]
            image.putpalette(colours[:, :3].tobytes())
            if transparent:
                image.info["transparency"] = colours[:, 3].tobytes()
        buf = io.BytesIO()
        image.save(buf, "PNG", compress_level=1)
        return buf.getvalue()


def _chunks(data: bytes | bytearray, pos: int, stop: int) -> Iterator[bytes]:
    """``data[pos:stop]`` in chunks of at most about ``_CHUNK`` bytes that split no token; a
    token longer than that comes as its short form, at the head of the next chunk (or alone:
    then nothing followed it that it could repeat)."""
    head = b""
    while pos < stop:
        end = _cut(data, pos, min(pos + _CHUNK, stop), stop)
        if end > pos:
            yield head + data[pos:end]
            head, pos = b"", end
            continue
        if head:
            yield head
        end = match_end(_PARAMS, data, pos + 1, stop)
        head = _short(bytes(data[pos : pos + 1]), _params(data, pos + 1, end))
        pos = end
    if head:
        yield head


def decode_sixel(body: bytes | bytearray, *, p2: int = 0, max_pixels: int = MAX_PIXELS,
                 start: int = 0, stop: int | None = None) -> Image.Image:
    """The image that sixel ``body`` (the data after ``q``, without the terminator) draws.

    ``p2`` is the DCS's second parameter: 1 leaves unpainted pixels transparent (RGBA),
    anything else paints them with register 0 (RGB). Raises ``SixelError`` with a short
    reason, never anything else; the canvas is refused before it is allocated when it
    would pass ``max_pixels``. Time is bounded by the body's size and ``MAX_WORK``, memory by
    ``_CHUNK`` and the canvas, whatever the bytes are. The body is ``body[start:stop]``, read
    in place.
    """
    return _decode(body, max_pixels, start, stop).image(transparent=p2 == 1)


def _decode(body: bytes | bytearray, max_pixels: int, start: int,
            stop: int | None) -> _Decoder:
    """``decode_sixel``'s work, the image left on the decoder's canvas; the same errors."""
    stop = len(body) if stop is None else stop
    if stop - start > MAX_BODY:
        raise SixelError(f"over {MAX_BODY // (1024 * 1024)} MiB of sixel data")
    decoder = _Decoder(max_pixels)
    try:
        for chunk in _chunks(body, start, stop):
            decoder.chunk(chunk)
        decoder.indices()  # the size it covers, checked against the budget
        return decoder
    except SixelError as exc:
        exc.cost = decoder.cost()  # the work done before it was refused
        raise


def extract_sixel(output: str | Output) -> Extraction:
    """Take the images that sixel sequences carry out of ``output``: the text a tool printed,
    or its bytes (then decoded as UTF-8, bad bytes replaced, once the images are out).

    Callers may rely on this: it never raises; every ``ESC P ... q`` (or ``U+0090``) sixel
    sequence is removed and leaves ``[sixel image]`` where it was, its image coming out as
    an ``ImagePayload`` (PNG, ``source="sixel"``), in order; one that can't be decoded leaves
    ``[sixel image dropped: reason]``. A sequence cut off by another ESC ends there (the
    text from that ESC on is kept); one unterminated at the end of the text is dropped.
    Every other character stays as it was. Bytes give the text that their decoding would
    give; the 8-bit forms are the characters U+0090 and U+009C (in UTF-8, ``C2 90`` and
    ``C2 9C``), as in the decoded text.
    """
    if isinstance(output, str) and "\x1bP" not in output and "\x90" not in output:
        return Extraction(text=output, images=[])
    return cut_sixel(*output_bytes(output)).extraction()


def cut_sixel(data: bytes | bytearray, errors: str = "replace",
              limits: ImageLimits | None = None) -> Cut:
    """``extract_sixel`` on output bytes, the text left as bytes (``Cut``): what the result
    pipeline runs. ``errors``: how ``data`` decodes (see ``Cut``); ``limits``: the decoding
    budgets (see ``Gathered``: a canvas over ``max_decoded_bytes`` is refused before it is
    allocated). What it keeps is bounded as every extractor's is (``Gathered``): markers
    past 100 and images past the caps are counted, not kept."""
    gathered = _Sixels(errors, limits)
    out = gathered.out
    view, pos = memoryview(data), 0
    dcs = c1 = -2  # where the next ESC P and U+0090 are (-2: not looked for, -1: none left)
    found = False
    while True:
        if dcs == -2 or 0 <= dcs < pos:
            dcs = find_escape(data, _DCS, pos, rare=1)
        if c1 == -2 or 0 <= c1 < pos:
            c1 = find_pair(data, _DCS_C1, pos)
        at = c1 if dcs < 0 or 0 <= c1 < dcs else dcs
        if at < 0:
            break
        m = _START.match(data, at)
        if m is None:  # a DCS, but no sixel: look on from the byte after it
            if at == dcs:
                dcs = find_escape(data, _DCS, at + 1, rare=1)
            else:
                c1 = find_pair(data, _DCS_C1, at + 1)
            continue
        found = True
        out.append(seal(view[pos : m.start()]))
        end = _END.search(data, m.end())
        if end is None:
            out.append(gathered.note("sixel image dropped: unterminated at the end of the output"))
            pos = len(data)
            break
        stop = end.start()
        if data[stop] == 0xC2 or data.startswith(b"\x1b\\", stop):  # U+009C, or ST
            pos = stop + 2
        else:  # another escape sequence begins: this one was cut off
            out.append(gathered.note("sixel image dropped: cut off by another escape sequence"))
            pos = stop
            continue
        params = m.group(1).split(b";")
        p2 = int(params[1]) if len(params) > 1 and params[1][:3].isdigit() else 0
        if gathered.full:  # no decoding: it could not be kept
            out.append(gathered.note(gathered.over_budget()))
            continue
        room = min(gathered.max_decoded, gathered.left) // BYTES_PER_PIXEL
        try:  # read in place: bytes past ASCII are no sixel data, whatever they decode to
            decoder = _decode(data, room, m.end(), stop)
            gathered.spend(decoder.canvas.width * decoder.canvas.height * BYTES_PER_PIXEL)
            png = decoder.png(transparent=p2 == 1)
        except SixelError as exc:
            gathered.spend(exc.cost)
            out.append(gathered.note(f"sixel image dropped: {exc}"))
            continue
        except Exception as exc:  # noqa: BLE001 - a notice, never a crash
            out.append(gathered.note(f"sixel image dropped: {type(exc).__name__}"))
            continue
        if gathered.add_image(ImagePayload(png, "image/png", "sixel")) >= 0:
            out.append(b"[sixel image]")
    if not found:  # no sixel: the output as it was
        return Cut(data, [], errors)
    out.append(view[pos:])
    return gathered.result()


class _Sixels(Gathered):
    source = "sixel"
