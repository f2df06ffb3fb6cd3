"""Sixel images: decoded exactly, bounded on hostile input, and extracted from a tool's output."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import script_tool, simple_spec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from silica.results.sixel import SixelError, decode_sixel, extract_sixel
from silica.tools.toolbox import Toolbox

ESC, ST = "\x1b", "\x1b\\"
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def encode(pixels: list[list[int]], palette: list[tuple[int, int, int]], p2: int = 0,
           hls: bool = False) -> str:
    """A reference encoder, pixel by pixel: ``pixels[y][x]`` is a register, -1 unpainted."""
    height, width = len(pixels), len(pixels[0])
    out = [f"{ESC}P0;{p2}q\"1;1;{width};{height}"]
    for n, (r, g, b) in enumerate(palette):
        out.append(f"#{n};1;{r};{g};{b}" if hls else f"#{n};2;{r};{g};{b}")
    for top in range(0, height, 6):
        lines = []
        for n in range(len(palette)):
            chars = []
            for x in range(width):
                bits = sum(1 << k for k in range(6)
                           if top + k < height and pixels[top + k][x] == n)
                chars.append(chr(63 + bits))
            line, i = [], 0
            while i < len(chars):  # runs of three or more as repeats
                j = i
                while j < len(chars) and chars[j] == chars[i]:
                    j += 1
                line.append(f"!{j - i}{chars[i]}" if j - i > 2 else chars[i] * (j - i))
                i = j
            lines.append(f"#{n}" + "".join(line))
        out.append("$".join(lines) + "-")
    return "".join(out) + ST


def body(sequence: str) -> bytes:
    return sequence[sequence.index("q") + 1 : -2].encode()


def percent(v: int) -> int:
    return (v * 255 + 50) // 100


images = st.integers(1, 14).flatmap(lambda w: st.integers(1, 20).flatmap(
    lambda h: st.tuples(
        st.lists(st.tuples(*[st.integers(0, 100)] * 3), min_size=1, max_size=5),
        st.lists(st.lists(st.integers(-1, 4), min_size=w, max_size=w), min_size=h, max_size=h),
    )))


@FAST
@given(images)
def test_a_random_image_decodes_back_exactly(case):
    palette, pixels = case
    pixels = [[v if v < len(palette) else -1 for v in row] for row in pixels]
    image = decode_sixel(body(encode(pixels, palette, p2=1)), p2=1)
    assert image.size == (len(pixels[0]), len(pixels)) and image.mode == "RGBA"
    got = np.asarray(image)
    for y, row in enumerate(pixels):
        for x, v in enumerate(row):
            want = (0, 0, 0, 0) if v < 0 else (*map(percent, palette[v]), 255)
            assert tuple(got[y, x]) == want


@FAST
@given(st.binary(max_size=300), st.sampled_from(["", "\x1b\\", "\x9c"]))
def test_garbage_never_raises_or_hangs(junk, end):
    text = "a\x1bPq" + junk.decode("latin-1") + end + "z\x90" + junk.decode("latin-1")
    result = extract_sixel(text)  # a hang would stall the test: it must come back
    for payload in result.images:
        Image.open(io.BytesIO(payload.data)).load()
    assert result.text.startswith("a[sixel image")


def test_background_is_register_0_unless_p2_is_1():
    opaque = decode_sixel(b'"1;1;2;1#0;2;0;100;0#1;2;100;0;0@', p2=0)
    assert opaque.mode == "RGB" and np.asarray(opaque)[0].tolist() == [[255, 0, 0], [0, 255, 0]]
    clear = decode_sixel(b'"1;1;2;1#1;2;100;0;0@', p2=1)
    assert np.asarray(clear)[0, 1].tolist() == [0, 0, 0, 0]


def test_hls_colours_use_dec_hues():
    # DEC hue 0 is blue, 120 red, 240 green
    seq = encode([[0, 1, 2]], [(0, 50, 100), (120, 50, 100), (240, 50, 100)], hls=True)
    got = np.asarray(decode_sixel(body(seq)))[0].tolist()
    assert got == [[0, 0, 255], [255, 0, 0], [0, 255, 0]]


def test_undefined_registers_use_the_vt340_palette():
    got = np.asarray(decode_sixel(b"#2~#15~"))[0].tolist()
    assert got == [[percent(80), percent(13), percent(13)], [percent(80)] * 3]


def test_the_image_grows_past_its_raster_attributes():
    image = decode_sixel(b'"1;1;1;1#1;2;100;100;100~~~-~')
    assert image.size == (3, 12)


def test_a_later_colour_wins_where_two_overlap():
    got = np.asarray(decode_sixel(b"#1;2;100;0;0~~$#2;2;0;0;100?~"))[0].tolist()
    assert got == [[255, 0, 0], [0, 0, 255]]


def test_the_sequence_becomes_a_marker_and_the_text_stays():
    seq = encode([[0, 0], [0, 0]], [(100, 0, 0)])
    result = extract_sixel(f"before {ESC}[1mbold{ESC}[0m {seq} after {ESC}P+q544e{ST}")
    assert result.text == f"before {ESC}[1mbold{ESC}[0m [sixel image] after {ESC}P+q544e{ST}"
    [payload] = result.images
    assert (payload.declared_type, payload.source) == ("image/png", "sixel")
    assert Image.open(io.BytesIO(payload.data)).size == (2, 2)


def test_eight_bit_dcs_and_st():
    result = extract_sixel("x\x90q#1;2;0;100;0~~\x9cy")
    assert result.text == "x[sixel image]y" and len(result.images) == 1


# --- hostile input: quick, bounded, only valid images out ----------------------------------

HOSTILE = {
    "huge raster": f'{ESC}P0;1q"1;1;200000;200000#1~{ST}',
    "huge repeat": f"{ESC}Pq!2147483647~{ST}",
    "register 99999": f"{ESC}Pq#99999;2;100;0;0~{ST}",
    "100k definitions": f"{ESC}Pq" + "#7;2;10;20;30" * 100_000 + f"~{ST}",
    "overdrawing": f"{ESC}Pq" + "!10000~$" * 100_000 + ST,
    "unterminated at the end": f"text {ESC}Pq#1~~~~",
    "unterminated mid-output": f"text {ESC}Pq#1~~~~{ESC}[31mred",
    "long digits": f"{ESC}Pq#{'9' * 50_000};2;{'1' * 9000}~!{'9' * 9000}~{ST}",
}


def test_hostile_input_is_answered_quickly():
    for name, text in HOSTILE.items():  # each comes back (a hang would stall the test)
        result = extract_sixel(text)
        for payload in result.images:
            Image.open(io.BytesIO(payload.data)).load()
        assert "\x1bP" not in result.text, name
    assert extract_sixel(HOSTILE["huge raster"]).text.startswith("[sixel image dropped: 200000x")
    assert extract_sixel(HOSTILE["unterminated at the end"]).text == (
        "text [sixel image dropped: unterminated at the end of the output]")
    assert extract_sixel(HOSTILE["unterminated mid-output"]).text == (
        f"text [sixel image dropped: cut off by another escape sequence]{ESC}[31mred")
    assert len(extract_sixel(HOSTILE["register 99999"]).images) == 1
    with pytest.raises(SixelError):
        decode_sixel(b"")


# VmHWM, not ru_maxrss: that would carry over the peak of the pytest worker that spawned it.
MEASURE = """
import sys
from silica.results.sixel import extract_sixel
from test_sixel import HOSTILE
for name in sys.argv[1:]:
    extract_sixel(HOSTILE[name])
with open("/proc/self/status") as status:
    print(status.read().split("VmHWM:")[1].split()[0])
"""


def test_hostile_input_peaks_under_600_mb():
    names = ["huge raster", "huge repeat", "register 99999", "100k definitions", "overdrawing"]
    done = subprocess.run([sys.executable, "-c", MEASURE, *names], capture_output=True,
                          text=True, cwd=__file__.rsplit("/", 1)[0], timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) < 600 * 1024  # KiB


# --- through the Toolbox ---------------------------------------------------------------------


def test_a_sixel_and_a_kitty_image_in_one_tools_output(user_tools):
    import base64

    buf = io.BytesIO()
    Image.new("RGB", (9, 4), (0, 128, 255)).save(buf, "PNG")
    kitty = f"{ESC}_Ga=T,f=100;{base64.b64encode(buf.getvalue()).decode()}{ST}"
    sixel = encode([[0] * 5] * 7, [(100, 0, 0)])
    out = f"one\n{sixel}\ntwo\n{kitty}\nthree\n"
    script_tool(user_tools, "both.py", simple_spec("both"),
                body=f"import sys\nsys.stdout.write({out!r})\n")
    result = Toolbox().call("both", {})
    assert not result.is_error
    assert result.text == "one\n[sixel image]\ntwo\n\nthree\n"
    assert sorted((i.width, i.height) for i in result.images) == [(5, 7), (9, 4)]


# --- real encoders ---------------------------------------------------------------------------


def picture(width: int, height: int) -> Image.Image:
    x = np.linspace(0, 255, width, dtype=np.uint8)[None, :].repeat(height, 0)
    y = np.linspace(0, 255, height, dtype=np.uint8)[:, None].repeat(width, 1)
    return Image.fromarray(np.dstack([x, y, 255 - x // 2]), "RGB")


def close_share(a: Image.Image, b: Image.Image) -> float:
    assert a.size == b.size
    diff = np.abs(np.asarray(a.convert("RGB"), np.int16) - np.asarray(b.convert("RGB"), np.int16))
    return float((diff.max(axis=2) <= 8).mean())


@pytest.mark.skipif(not shutil.which("img2sixel") or not shutil.which("sixel2png"),
                    reason="libsixel-bin is not installed")
def test_img2sixel_output_matches_libsixels_decode(tmp_path):
    picture(320, 200).save(tmp_path / "in.png")
    stream = subprocess.run(["img2sixel", str(tmp_path / "in.png")], capture_output=True,
                            check=True).stdout
    (tmp_path / "in.six").write_bytes(stream)
    subprocess.run(["sixel2png", "-i", str(tmp_path / "in.six"), "-o",
                    str(tmp_path / "ref.png")], check=True)
    result = extract_sixel(stream.decode())
    [payload] = result.images
    mine = Image.open(io.BytesIO(payload.data))
    assert close_share(mine, Image.open(tmp_path / "ref.png")) >= 0.98


@pytest.mark.skipif(not shutil.which("chafa"), reason="chafa is not installed")
def test_chafa_sixels_decode(tmp_path):
    picture(320, 200).save(tmp_path / "in.png")
    stream = subprocess.run(["chafa", "-f", "sixels", "--size", "40x12", str(tmp_path / "in.png")],
                            capture_output=True, check=True).stdout.decode()
    result = extract_sixel(stream)
    assert len(result.images) == 1 and "dropped" not in result.text
    mine = Image.open(io.BytesIO(result.images[0].data)).convert("RGBA").convert("RGB")
    # the colours are the picture's: compare with it scaled to the decoded size
    assert close_share(mine, picture(320, 200).resize(mine.size)) >= 0.5


def test_an_8bit_dcs_sixel_without_any_esc_is_found_in_a_tool_result():
    from silica.plugins import get_plugin_manager
    from silica.results.pipeline import build_result
    from silica.tools.model import RawOutput

    out = "before \x90q\"1;1;4;6#1;2;100;0;0#1~~~~\x9c after".encode()
    result = build_result(RawOutput(out, b"", 0, 0.1), get_plugin_manager())
    [image] = result.images
    assert (image.width, image.height) == (4, 6)
    assert "[sixel image]" in result.text and "\x90" not in result.text
