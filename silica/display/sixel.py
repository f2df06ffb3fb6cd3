"""Sixel images encoded by libsixel, through ctypes.

libsixel (Debian's ``libsixel1``, the maintained libsixel 1.10 line) builds a palette of at
most 256 colours for the image (median cut, high quality), maps it with Atkinson's error
diffusion and writes the DCS sequence at the image's exact size, raster attributes first.
Chosen over libchafa's sixel encoder, which is faster but rounds the height down to a
multiple of six and matched fewer pixels on screenshots (88% against 99% within 8 levels a
channel, 704x440). The library is opened by its file name, not looked up with
``ctypes.util.find_library``, which starts a process.

An image with transparency is flattened onto white first, as silica flattens one for a
provider that takes no alpha: a terminal's background colour is unknown, and white keeps
dark lines and text visible.
"""

from __future__ import annotations

import ctypes
import functools
import re

from PIL import Image

from silica.errors import SilicaError

__all__ = ["SixelUnavailable", "sixel_available", "sixel_sequence"]

LIBRARY_NAMES = ("libsixel.so.1", "libsixel.1.dylib", "libsixel.dylib", "libsixel.so")
COLOURS = 256

_PIXELFORMAT_RGB888 = 0x03
_LARGE_AUTO, _REP_AUTO, _QUALITY_HIGH = 0, 0, 1
_DIFFUSE_ATKINSON = 2
_WRITE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)
_SEQUENCE = re.compile(rb"\x1bP[0-9;]*q[\x20-\x7e]*\x1b\\")  # nothing else is passed on
# libsixel 1.10 starts an image under six rows with a graphics new line ("-"), after its
# palette: the image would be drawn six rows down. Taken out where it stands there.
_SHORT_START = re.compile(rb'(\x1bPq"1;1;[0-9]+;[0-9]+(?:#[0-9]+;2;[0-9]+;[0-9]+;[0-9]+)*)-')


class SixelUnavailable(SilicaError):
    """libsixel is not installed, so sixel images cannot be drawn."""


@functools.cache
def _library() -> ctypes.CDLL | None:
    for name in LIBRARY_NAMES:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        pointer, out = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
        lib.sixel_output_new.argtypes = [out, _WRITE, pointer, pointer]
        lib.sixel_dither_new.argtypes = [out, ctypes.c_int, pointer]
        lib.sixel_dither_initialize.argtypes = [pointer, ctypes.c_char_p, ctypes.c_int,
                                                ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                                ctypes.c_int, ctypes.c_int]
        lib.sixel_dither_set_diffusion_type.argtypes = [pointer, ctypes.c_int]
        lib.sixel_encode.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                     pointer, pointer]
        lib.sixel_dither_unref.argtypes = [pointer]
        lib.sixel_output_unref.argtypes = [pointer]
        return lib
    return None


def sixel_available() -> bool:
    """Whether libsixel can be loaded here, so ``sixel_sequence`` can draw."""
    return _library() is not None


def sixel_sequence(img: Image.Image) -> str:
    """The sixel sequence (``ESC P q ... ESC \\``) that draws ``img`` at its own size, in at
    most 256 colours.

    Raises ``SixelUnavailable`` when libsixel is not installed, ``SilicaError`` if it fails.
    """
    lib = _library()
    if lib is None:
        raise SixelUnavailable("sixel images need libsixel: install it (Debian and Ubuntu: "
                               "apt-get install libsixel1; macOS: brew install libsixel), or "
                               'choose another protocol ([display] images = "blocks")')
    if img.mode in ("LA", "RGBA"):
        rgba = img.convert("RGBA")
        img = Image.new("RGB", img.size, "white")
        img.paste(rgba, mask=rgba.getchannel("A"))
    pixels = img.convert("RGB").tobytes()
    width, height = img.size
    chunks: list[bytes] = []

    @_WRITE
    def write(data: int, size: int, _priv: int) -> int:
        chunks.append(ctypes.string_at(data, size))
        return size

    output, dither = ctypes.c_void_p(), ctypes.c_void_p()
    try:
        status = lib.sixel_output_new(ctypes.byref(output), write, None, None)
        status = status or lib.sixel_dither_new(ctypes.byref(dither), COLOURS, None)
        status = status or lib.sixel_dither_initialize(
            dither, pixels, width, height, _PIXELFORMAT_RGB888, _LARGE_AUTO, _REP_AUTO,
            _QUALITY_HIGH)
        if not status:
            lib.sixel_dither_set_diffusion_type(dither, _DIFFUSE_ATKINSON)
            status = lib.sixel_encode(pixels, width, height, 1, dither, output)
    finally:
        if dither:
            lib.sixel_dither_unref(dither)
        if output:
            lib.sixel_output_unref(output)
    sequence = b"".join(chunks)
    if height < 6:
        sequence = _SHORT_START.sub(rb"\1", sequence, count=1)
    if status or not _SEQUENCE.fullmatch(sequence):
        raise SilicaError(f"libsixel could not encode a {width}x{height} image "
                          f"(status {status:#x})")
    return sequence.decode("ascii")
