"""Every escape-sequence extractor (kitty, iTerm2, sixel) is bounded by its input and the
image budget, whatever the byte pattern.

A hostile tool can repeat one small shape millions of times: a chunk of a transfer that never
ends, text between queries, placeholders, tiny images, file parts. Hypothesis builds such a
shape from adversarial pieces and repeats it to about 300 kB; the memory the extraction
allocates (``tracemalloc`` peak: Python objects and buffers, numpy's included) must stay
within a few times the input, so no piece of output may cost an object of its own. The
text left is never longer than the input plus one marker per piece, and each image that
comes out is within the budget.
"""

from __future__ import annotations

import base64
import io
import zlib

from conftest import traced_peak
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from silica.results.escapes import MAX_IMAGE_BYTES, MAX_IMAGES, MAX_OUTPUT_DECODED_BYTES
from silica.results.iterm2 import cut_iterm2
from silica.results.kitty import cut_kitty
from silica.results.sixel import cut_sixel

PROPERTY = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SIZE = 100_000  # bytes each shape is repeated to
PNG_1PX = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGNgYGAAAAAEAAH2"
           "FzhVAAAAAElFTkSuQmCC")

b64 = st.sampled_from(["", "A", "AAAA", "AA==", "A" * 64, PNG_1PX, "!!", "AAAA\n"])
end = st.sampled_from(["\x1b\\", "\x07", "", "\x1b"])
text = st.sampled_from(["", "x", "line\n", "\x1b[31m", "\U0010eeee\u0305", "\xe9"])
kitty_pieces = st.one_of(
    st.builds(lambda k, d, e: f"\x1b_G{k};{d}{e}", st.sampled_from(
        ["a=T,f=100,m=1", "m=1", "m=0", "a=q", "a=T,f=100", "a=T,f=100,i=7", "a=d,d=i,i=7",
         "a=f,m=1", "a=T,t=f", "f=32,s=1,v=1", "a=T,f=24,s=100000,v=100000,o=z", ""]), b64, end),
    text,
    st.builds(lambda d: f"\x1bPtmux;\x1b\x1b_Gm=1;{d}\x1b\x1b\\\x1b\\", b64),
)
iterm_pieces = st.one_of(
    st.builds(lambda a, d, e: f"\x1b]1337;File={a}:{d}{e}", st.sampled_from(
        ["inline=1", "name=eA==;inline=1", "", "size=9999999999"]), b64, end),
    st.builds(lambda e: f"\x1b]1337;MultipartFile=inline=1{e}", end),
    st.builds(lambda d, e: f"\x1b]1337;FilePart={d}{e}", b64, end),
    st.builds(lambda e: f"\x1b]1337;FileEnd{e}", end),
    text,
)
sixel_pieces = st.one_of(
    st.sampled_from(["\x1bPq", "\x1bP0;1;0q", "\x90q", "\x1b\\", "\x9c", "~", "-", "$",
                     "#1;2;100;0;0", "!99999~", '"1;1;99;99', "#" + "1;" * 50, "?"]),
    text,
)


def bounded(cut, shape: str, per_byte: int = 4) -> None:
    data = (shape * (SIZE // max(1, len(shape.encode())) + 1)).encode("utf-8", "surrogatepass")
    result, peak = traced_peak(lambda: cut(data))
    # the images and the text left are in the peak: the input is not (it was made before);
    # a decoded sixel image costs its pixels on top (canvas, colours, PNG), ~40 bytes each
    pixels = max((pixels_of(p.data) for p in result.images if p.source == "sixel"), default=0)
    assert peak < per_byte * len(data) + 40 * pixels + 2_000_000, (peak, len(data), shape[:200])
    assert len(result.data) <= len(data) + 200 * (data.count(b"\x1b") + data.count(b"\x90"))
    assert len(result.images) <= MAX_IMAGES
    assert sum(len(p.data) for p in result.images) <= MAX_IMAGE_BYTES


@PROPERTY
@given(st.lists(kitty_pieces, min_size=1, max_size=6).map("".join))
def test_kitty_is_bounded_whatever_shape_repeats(shape):
    bounded(cut_kitty, shape)


@PROPERTY
@given(st.lists(iterm_pieces, min_size=1, max_size=6).map("".join))
def test_iterm2_is_bounded_whatever_shape_repeats(shape):
    bounded(cut_iterm2, shape)


@PROPERTY
@given(st.lists(sixel_pieces, min_size=1, max_size=8).map("".join))
def test_sixel_is_bounded_whatever_shape_repeats(shape):
    bounded(cut_sixel, shape, per_byte=60)  # numpy works on a chunk at once: ~50 bytes a byte


def pixels_of(png: bytes) -> int:
    with Image.open(io.BytesIO(png)) as image:
        return image.width * image.height


# A small sequence that costs much decoding, repeated: the output's budget runs out.
def test_repeated_sixel_images_stop_at_the_decoding_budget_of_one_output():
    result = cut_sixel(b"\x1bPq!1000000~\x1b\\" * 20)  # 6 MP each: 72 MB of the budget
    # the last may pass the budget: it is checked before it is decoded
    assert 0 < len(result.images) <= MAX_OUTPUT_DECODED_BYTES // (6_000_000 * 12) + 1
    assert result.data.count(b"[sixel image dropped: ") + len(result.images) == 20


def test_repeated_kitty_zlib_images_stop_at_the_decoding_budget_of_one_output():
    squeezed = base64.b64encode(zlib.compress(bytes(4000 * 4000 * 4), 9)).decode()
    one = f"\x1b_Ga=T,f=32,s=4000,v=4000,o=z;{squeezed}\x1b\\"  # 128 MB of work, ~90 kB
    result = cut_kitty((one * 12).encode())
    assert 0 < len(result.images) <= MAX_OUTPUT_DECODED_BYTES // (4000 * 4000 * 8) + 1
    assert b"over the decoding budget of one output" in result.data
