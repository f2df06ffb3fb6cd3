"""The sixel decoder is bounded by its input and the budget, whatever the bytes are.

Hostile streams need not have the cut points a decoder would like: one token can run for
megabytes (``#`` and digits), repeats can claim billions of columns, colour definitions can
go on forever, bands can be many and tiny, or never broken. Property tests build such
streams from adversarial pieces and check, with the chunk size shrunk to a few bytes, that
the image is the one the stream read in one piece gives (chunking changes nothing), that it
stays within the pixel budget, and that nothing but ``SixelError`` is ever raised. One test
measures the peak memory (``VmHWM``) of a child process decoding a 20 MB single-token stream.
"""

from __future__ import annotations

import io
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from silica.results import sixel
from silica.results.sixel import SixelError, decode_sixel, extract_sixel

MB = 1_000_000
PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BUDGET = 4096  # pixels: small, so the budget is reached often

digits = st.integers(0, 10**12).map(str) | st.text("0123456789", min_size=10, max_size=40)
params = st.lists(digits | st.just(""), max_size=12).map(";".join)
pieces = st.one_of(
    st.tuples(st.sampled_from("#!\""), params).map("".join),  # any token
    st.tuples(st.sampled_from("#!\""), st.integers(20, 200)).map(  # a token that runs on
        lambda t: t[0] + "1;" * t[1]),
    st.integers(0, 2**40).map(lambda n: f"!{n}~"),  # huge repeats
    st.builds(lambda r, a, b, c: f"#{r};2;{a};{b};{c}", *[st.integers(0, 2000)] * 4),
    st.text("?@ABC~_`o", min_size=1, max_size=30),  # sixel data, no band breaks
    st.sampled_from(["-", "$", "-" * 20, "$-" * 10]),  # many tiny bands
    st.builds(lambda w, h: f'"1;1;{w};{h}', st.integers(0, 10**6), st.integers(0, 10**6)),
    st.text("0123456789;", max_size=50),  # digits outside any token
    st.binary(max_size=8).map(lambda b: b.decode("latin-1")),  # anything
)
streams = st.lists(pieces, max_size=40).map("".join)


@contextmanager
def chunk_size(size: int):
    saved = sixel._CHUNK
    sixel._CHUNK = size
    try:
        yield
    finally:
        sixel._CHUNK = saved


def decoded(body: bytes):
    try:
        image = decode_sixel(body, max_pixels=BUDGET)
    except SixelError:  # why may name the size reached when it was refused: it differs
        return "refused"
    assert image.width * image.height <= BUDGET
    return image.mode, image.size, np.asarray(image).tobytes()


@PROPERTY
@given(streams, st.integers(1, 16))
def test_chunking_never_changes_the_image_and_the_budget_holds(stream, size):
    body = stream.encode("latin-1", "replace")
    whole = decoded(body)  # the stream in one chunk (it is far below the chunk size)
    with chunk_size(size):
        assert decoded(body) == whole


@PROPERTY
@given(streams, st.sampled_from(["\x1b\\", "\x9c", "", "\x1b[0m"]))
def test_any_stream_in_a_tools_output_gives_text_and_valid_images(stream, end):
    with chunk_size(8):
        result = extract_sixel(f"a\x1bP0;1q{stream}{end}z")
    assert result.text.startswith("a[sixel image") and len(result.images) <= 1
    for payload in result.images:
        with Image.open(io.BytesIO(payload.data)) as image:
            assert image.width * image.height <= sixel.MAX_PIXELS


def test_a_long_token_means_what_it_says_when_read_in_chunks():
    # the register, the colour and the repeat count of tokens far longer than a chunk
    body = b"#" + b"0" * 8 + b"3;2;" + b"0" * 40 + b";0;0" + b";7" * 30 + b"!4" + b";0" * 30 + b"~"
    with chunk_size(16):
        image = decode_sixel(body)
    assert image.size == (4, 6)
    assert np.asarray(image)[0].tolist() == [[255, 0, 0]] * 4  # 40 zeros: over 9 digits


# VmHWM of the child, not ru_maxrss: that would carry over the pytest worker's own peak.
PEAK = """
import sys
from silica.results.sixel import extract_sixel
data = b"\\x1bPq#" + b"1;" * (int(sys.argv[1]) // 2) + b"~\\x1b\\\\"
before = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) * 1024
result = extract_sixel(data)
assert result.text in ("[sixel image]", "[sixel image dropped: no pixels]"), result.text
peak = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) * 1024
print(before, peak)
"""


def test_a_20_mb_single_token_stream_decodes_in_bounded_memory():
    done = subprocess.run([sys.executable, "-c", PEAK, str(20 * MB)], capture_output=True,
                          text=True, cwd=Path(__file__).parent, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    before, peak = map(int, done.stdout.split())
    # the stream itself is 20 MB; decoding it may add at most as much again
    assert peak - before < 20 * MB, (before / MB, peak / MB)
