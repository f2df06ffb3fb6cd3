"""Salvaging a PNG whose ancillary chunks are damaged, as libpng does.

libpng (and so every browser) skips an ancillary chunk (``iCCP``, ``tEXt``, ``gAMA``...;
its type starts with a lowercase letter) whose CRC is wrong and shows the picture; Pillow
refuses the whole file. ``drop_damaged_ancillary`` removes such chunks so the picture can be
decoded. A damaged critical chunk (``IHDR``, ``PLTE``, ``IDAT``, ``IEND``) is left alone:
what happens to it is decided where the image is checked.
"""

from __future__ import annotations

import struct
import zlib

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def drop_damaged_ancillary(data: bytes) -> tuple[bytes, list[str]]:
    """``data`` without its ancillary chunks whose CRC is wrong, and their types.

    Returns ``data`` itself and ``[]`` when nothing was dropped, or when the chunk layout is
    broken (a length that runs past the end): that is not damage this can mend.
    """
    if not data.startswith(PNG_SIGNATURE):
        return data, []
    kept: list[bytes] = [PNG_SIGNATURE]
    dropped: list[str] = []
    position = len(PNG_SIGNATURE)
    while position + 12 <= len(data):
        (length,) = struct.unpack(">I", data[position:position + 4])
        end = position + 12 + length
        if end > len(data):
            return data, []
        kind = data[position + 4:position + 8]
        (crc,) = struct.unpack(">I", data[end - 4:end])
        ancillary = bool(kind[0] & 0x20)  # bit 5 of the first letter: lowercase
        if ancillary and zlib.crc32(data[position + 4:end - 4]) != crc:
            dropped.append(kind.decode("latin-1"))
        else:
            kept.append(data[position:end])
        position = end
        if kind == b"IEND":
            break
    if not dropped:
        return data, []
    return b"".join(kept), dropped
