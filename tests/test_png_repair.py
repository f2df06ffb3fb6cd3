"""A PNG whose ancillary chunk is damaged is shown, as libpng shows it; a damaged critical
chunk is still refused."""

from __future__ import annotations

import io
import struct
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from silica.blocks import ImageBlock, TextBlock
from silica.images.check import prepare_image
from silica.images.payload import ImagePayload
from silica.images.png_repair import drop_damaged_ancillary
from silica.plugins import get_plugin_manager
from silica.results.pipeline import build_result
from silica.tools.model import RawOutput


def png(size=(24, 16), color=(200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


def chunk(kind: bytes, body: bytes, crc: int | None = None) -> bytes:
    crc = zlib.crc32(kind + body) if crc is None else crc
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


def after_ihdr(data: bytes, extra: bytes) -> bytes:
    return data[:33] + extra + data[33:]  # signature (8) + IHDR (25)


def test_a_bad_iccp_checksum_is_dropped_and_the_picture_sent():
    icc = b"sRGB\x00\x00" + zlib.compress(b"profile" * 20)
    data = after_ihdr(png(), chunk(b"iCCP", icc, crc=0xDEADBEEF))
    block = prepare_image(ImagePayload(data, "image/png", "mcp"))
    assert isinstance(block, ImageBlock), block
    assert (block.width, block.height) == (24, 16)
    assert block.source == "mcp (damaged iCCP chunk dropped)"
    with Image.open(io.BytesIO(block.data)) as img:
        assert img.convert("RGB").getpixel((3, 3)) == (200, 30, 30)


def test_a_damaged_critical_chunk_is_still_refused():
    data = bytearray(png())
    data[29] ^= 0xFF  # the IHDR checksum
    block = prepare_image(ImagePayload(bytes(data), "image/png", "t"))
    assert isinstance(block, TextBlock) and block.text.startswith("[image dropped:")


def test_through_a_tool_result_the_salvaged_image_is_a_block_not_text():
    import base64
    import json

    data = after_ihdr(png(), chunk(b"tEXt", b"Comment\x00hi", crc=1))
    printed = json.dumps({"base64": base64.b64encode(data).decode()}).encode()
    result = build_result(RawOutput(printed, b"", 0, 0.1), get_plugin_manager())
    assert [type(b).__name__ for b in result.blocks] == ["ImageBlock"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(
    # damaged: any ancillary type, any body, a wrong checksum
    st.tuples(st.sampled_from([b"tEXt", b"gAMA", b"iCCP", b"zTXt", b"pHYs", b"eXIf"]),
              st.binary(max_size=40), st.just(False)),
    # intact: a well-formed text chunk
    st.tuples(st.just(b"tEXt"), st.from_regex(rb"\A[A-Za-z]{1,20}\x00[ -~]{0,30}\Z"),
              st.just(True))), max_size=5))
def test_any_mix_of_intact_and_damaged_ancillary_chunks_gives_the_picture(extras):
    extra = b"".join(chunk(kind, body, None if good else zlib.crc32(kind + body) ^ 1)
                     for kind, body, good in extras)
    data = after_ihdr(png(), extra)
    repaired, dropped = drop_damaged_ancillary(data)
    assert dropped == [k.decode() for k, _, good in extras if not good]
    assert all(chunk(k, b) in repaired for k, b, good in extras if good)
    block = prepare_image(ImagePayload(data, "image/png", "t"))
    assert isinstance(block, ImageBlock), block
    assert (block.width, block.height) == (24, 16)
