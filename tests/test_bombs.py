"""Decompression bombs and compute budgets, checked the way a user observes them.

Each hostile input is made here with Pillow (or zlib), written to a file, and put through
``build_result`` in a fresh ``python`` process, which reports the blocks it got and its own
peak memory (``ru_maxrss``). A bomb must come back as a notice, with no image block and no
base64 text, from a process that stayed under ``PEAK_LIMIT``. The peak is the process's
``VmHWM`` (``ru_maxrss`` would carry over the peak of the pytest process that spawned it).
No test asserts a time.
"""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import sys
import zlib
from pathlib import Path

import images_corpus as corpus
import pytest
from PIL import Image, ImageDraw

from silica.blocks import ImageBlock, TextBlock
from silica.images.check import prepare_image
from silica.images.limits import ANTHROPIC, MB, ImageLimits
from silica.images.payload import ImagePayload
from silica.plugins import get_plugin_manager
from silica.results import pipeline
from silica.results.pipeline import build_result
from silica.tools.model import RawOutput

REPO = Path(__file__).resolve().parent.parent
PEAK_LIMIT = 300_000_000  # bytes: what any one of these may take, interpreter included
BOMB_SIZE = (10000, 9999)  # just under the 100 MP pixel limit, so only the new budget stops it
KITTY_ROWS = 67108864  # s=1,v=KITTY_ROWS: 64M one-pixel rows
BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{120,}")

# Runs build_result on the stdout in argv[1]; prints its blocks and the process's peak memory.
RUNNER = """
import json, sys
from pathlib import Path
from silica.plugins import get_plugin_manager
from silica.results.pipeline import build_result
from silica.tools.model import RawOutput

stdout = Path(sys.argv[1]).read_bytes()
result = build_result(RawOutput(stdout, b"", 0, 0.1), get_plugin_manager())
blocks = [{"type": b.type, "text": getattr(b, "text", None), "width": getattr(b, "width", None)}
          for b in result.blocks]
status = Path("/proc/self/status").read_text()
peak = int(status.split("VmHWM:")[1].split()[0]) * 1024
print(json.dumps({"blocks": blocks, "peak": peak}))
"""


def encode(img: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    img.save(buffer, fmt, **options)
    return buffer.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def json_stdout(*images: bytes) -> bytes:
    return json.dumps({"images": [{"base64": b64(data)} for data in images]}).encode()


def zlib_of_zeros(size: int) -> bytes:
    """``zlib.compress(bytes(size))``, made 1 MiB at a time (never ``size`` bytes at once)."""
    compressor, block = zlib.compressobj(9), bytes(1 << 20)
    parts = [compressor.compress(block) for _ in range(size >> 20)]
    return b"".join(parts) + compressor.compress(bytes(size & ((1 << 20) - 1))) + compressor.flush()


def run_isolated(tmp_path: Path, stdout: bytes) -> tuple[list[dict], int]:
    """``build_result`` over ``stdout`` in a fresh process: its blocks, and its peak bytes."""
    source = tmp_path / "stdout.bin"
    source.write_bytes(stdout)
    done = subprocess.run([sys.executable, "-c", RUNNER, str(source)], capture_output=True,
                          text=True, cwd=REPO, check=True)
    report = json.loads(done.stdout)
    return report["blocks"], report["peak"]


def assert_refused(blocks: list[dict], stdout: bytes, *words: str) -> str:
    """No image came out, only text; no base64 in it; one notice names every one of words."""
    assert blocks and all(block["type"] == "text" for block in blocks), blocks
    text = "\n".join(block["text"] for block in blocks)
    assert not BASE64_RUN.search(text), text[:300]
    for match in re.finditer(rb'"base64": "([^"]+)"', stdout):
        assert match.group(1).decode() not in text
    notices = [line for line in text.splitlines() if "dropped:" in line]
    assert notices, text
    assert any(all(w.lower() in line.lower() for w in words) for line in notices), notices
    return text


# -- the bombs ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def webp_bomb() -> bytes:
    """A lossless WebP of 10000x9999 RGBA, one flat colour: a few dozen bytes, 1.6 GB once
    libwebp and Pillow have decoded it."""
    return encode(Image.new("RGBA", BOMB_SIZE, (10, 20, 30, 128)), "WEBP", lossless=True,
                  quality=0, method=0)


@pytest.fixture(scope="module")
def png16_bomb() -> bytes:
    """A 16-bit greyscale PNG of 10000x9999: 200 MB decoded, ~1.1 GB through an 8-bit
    conversion that holds full-size 32-bit copies."""
    return encode(Image.new("I;16", BOMB_SIZE, 3000), "PNG")


@pytest.fixture(scope="module")
def float_tiff_bomb() -> bytes:
    """A float (mode F) TIFF of 10000x9999: 400 MB decoded, more to scale it to 8 bits."""
    return encode(Image.new("F", BOMB_SIZE, 0.5), "TIFF", compression="tiff_deflate")


def kitty(keys: str, payload: bytes) -> bytes:
    return f"\x1b_G{keys};{b64(payload)}\x1b\\".encode()


def test_webp_bomb_is_refused_from_its_header(tmp_path, webp_bomb):
    assert len(webp_bomb) < 10_000
    stdout = json_stdout(webp_bomb)
    blocks, peak = run_isolated(tmp_path, stdout)
    assert_refused(blocks, stdout, "[image dropped:", "WebP", "10000x9999", "max_decoded_bytes",
                   "not decoded")
    assert peak < PEAK_LIMIT


def test_sixteen_bit_png_bomb_is_refused(tmp_path, png16_bomb):
    stdout = json_stdout(png16_bomb)
    blocks, peak = run_isolated(tmp_path, stdout)
    assert_refused(blocks, stdout, "[image dropped:", "PNG", "10000x9999", "max_decoded_bytes")
    assert peak < PEAK_LIMIT


def test_float_tiff_bomb_is_refused(tmp_path, float_tiff_bomb):
    stdout = json_stdout(float_tiff_bomb)
    blocks, peak = run_isolated(tmp_path, stdout)
    assert_refused(blocks, stdout, "[image dropped:", "TIFF", "10000x9999", "max_decoded_bytes")
    assert peak < PEAK_LIMIT


def test_five_webp_bombs_in_one_result_are_all_refused(tmp_path, webp_bomb):
    stdout = json_stdout(*[webp_bomb] * 5)
    blocks, peak = run_isolated(tmp_path, stdout)
    text = assert_refused(blocks, stdout, "[image dropped:", "WebP", "max_decoded_bytes")
    assert text.count("[image dropped:") == 5
    assert peak < PEAK_LIMIT


@pytest.mark.parametrize("fmt", ["32", "24"])
def test_kitty_zlib_bomb_of_one_pixel_rows_is_refused_before_inflating(tmp_path, fmt):
    channels = 4 if fmt == "32" else 3
    squeezed = zlib_of_zeros(KITTY_ROWS * channels)
    stdout = b"before " + kitty(f"a=T,f={fmt},s=1,v={KITTY_ROWS},o=z", squeezed) + b" after"
    blocks, peak = run_isolated(tmp_path, stdout)
    text = assert_refused(blocks, stdout, "[kitty image dropped:", f"v={KITTY_ROWS}", "budget")
    assert text.startswith("before ") and text.endswith(" after")
    assert peak < PEAK_LIMIT


def test_kitty_zlib_bomb_of_a_png_stops_inflating_at_the_budget(tmp_path):
    squeezed = zlib_of_zeros(1024 * MB)  # 1 GiB of zeros in ~1 MB
    stdout = kitty("a=T,f=100,o=z", squeezed)
    blocks, peak = run_isolated(tmp_path, stdout)
    assert_refused(blocks, stdout, "[kitty image dropped:", "once decompressed")
    assert peak < PEAK_LIMIT


def test_kitty_zlib_pixels_that_inflate_past_their_size_are_refused():
    from silica.results.kitty import extract_kitty

    squeezed = zlib.compress(bytes(4 * 4 * 4 * 1000))  # a thousand times s=4 v=4
    result = extract_kitty(kitty("a=T,f=32,s=4,v=4,o=z", squeezed).decode())
    assert result.images == []
    assert "more than 64 bytes" in result.text and "s=4 v=4" in result.text


def test_kitty_raw_pixels_of_a_large_image_still_come_out_whole():
    from silica.results.kitty import extract_kitty

    img = corpus.gradient((1500, 1000)).convert("RGBA")
    raw = img.tobytes()
    result = extract_kitty(kitty("a=T,f=32,s=1500,v=1000,o=z", zlib.compress(raw)).decode())
    (image,) = result.images
    decoded = Image.open(io.BytesIO(image.data))
    assert decoded.size == (1500, 1000) and decoded.tobytes() == raw


# -- what still passes ----------------------------------------------------------------------


def result_of(stdout: bytes, limits: ImageLimits = ANTHROPIC, deadline: float | None = None):
    return build_result(RawOutput(stdout, b"", 0, 0.1), get_plugin_manager(), limits, deadline)


def test_a_large_legitimate_png_still_becomes_an_image():
    shot = corpus.screenshot_png((3840, 2160))
    blocks = result_of(json_stdout(shot)).blocks
    (image,) = [b for b in blocks if isinstance(b, ImageBlock)]
    assert (image.width, image.height) == (1429, 804)  # fitted to 1568 px, 1.15 MP
    assert not any(isinstance(b, TextBlock) and "dropped" in b.text for b in blocks)


def test_an_8k_rgba_screenshot_passes_and_stays_under_the_peak(tmp_path):
    size = (7680, 4320)
    shot = Image.linear_gradient("L").resize(size).convert("RGBA")
    draw = ImageDraw.Draw(shot)
    for i in range(40):  # windows, some see-through (premultiplied scaling)
        box = (100 + 180 * i, 80 + 90 * i, 1800 + 180 * i, 1200 + 70 * i)
        draw.rectangle(box, fill=(40 * i % 255, 90, 200 - 4 * i, 255 if i % 3 else 160))
    stdout = json_stdout(encode(shot, "PNG", compress_level=1))
    blocks, peak = run_isolated(tmp_path, stdout)
    assert [b["type"] for b in blocks] == ["image"], blocks
    assert blocks[0]["width"] == 1429
    assert peak < PEAK_LIMIT


def test_the_pixel_limit_still_applies_within_the_byte_budget(webp_bomb):
    roomy = ANTHROPIC.replace(max_decoded_bytes=1 << 40, max_pixels=50_000_000)
    for data in (webp_bomb, corpus.bomb_png(8000, 8000)):
        block = prepare_image(ImagePayload(data, None, "test"), roomy)
        assert isinstance(block, TextBlock)
        assert "megapixel safety limit" in block.text and "not decoded" in block.text
    (notice,) = result_of(json_stdout(webp_bomb), roomy).blocks
    assert "megapixel safety limit" in notice.text


def test_the_byte_budget_is_a_limit_of_its_own():
    tight = ANTHROPIC.replace(max_decoded_bytes=20 * MB)
    block = prepare_image(ImagePayload(corpus.screenshot_png((3840, 2160)), None, "t"), tight)
    assert isinstance(block, TextBlock) and block.text.startswith("[image dropped:")
    assert "3840x2160" in block.text and "20 MiB budget" in block.text
    assert "Emit a smaller image" in block.text


def test_an_animation_over_the_budget_is_sent_as_its_first_frame():
    gif = corpus.animated_gif((800, 600), frames=30)  # 30 frames of 1.9 MB each, decoded
    whole = prepare_image(ImagePayload(gif, None, "t"))
    assert isinstance(whole, ImageBlock) and whole.data == gif and whole.source == "t"
    tight = ANTHROPIC.replace(max_decoded_bytes=30 * MB)
    first = prepare_image(ImagePayload(gif, None, "t"), tight)
    assert isinstance(first, ImageBlock) and first.source == "t (first frame of 30)"


# -- the budget of one result ---------------------------------------------------------------


def small_pngs(count: int) -> list[bytes]:
    return [encode(Image.new("RGB", (20, 10), (i, 0, 0)), "PNG") for i in range(count)]


def test_images_past_the_count_are_dropped_with_one_notice():
    pngs = small_pngs(25)
    blocks = result_of(json_stdout(*pngs)).blocks
    images = [b for b in blocks if isinstance(b, ImageBlock)]
    assert [i.data for i in images] == pngs[:20]
    (notice,) = [b for b in blocks if isinstance(b, TextBlock) and "dropped" in b.text]
    assert notice.text.startswith("[image dropped: this result holds 25 images")
    assert "limit of 20" in notice.text and "last 5 images were not checked" in notice.text
    assert "max_images_per_result" in notice.text


def test_the_count_limit_comes_from_the_limits():
    limits = ANTHROPIC.replace(max_images_per_result=1)
    blocks = result_of(json_stdout(*small_pngs(3)), limits).blocks
    assert [type(b).__name__ for b in blocks] == ["ImageBlock", "TextBlock"]
    assert "the last 2 images were not checked" in blocks[-1].text


def test_images_past_the_result_byte_budget_are_dropped_and_a_small_one_still_fits():
    big = corpus.screenshot_png((3840, 2160))
    small = small_pngs(1)[0]
    from silica.images import budget

    one_big = budget.inspect(ImagePayload(big, None, "json"), ANTHROPIC)
    assert one_big is not None
    limits = ANTHROPIC.replace(max_result_decoded_bytes=one_big.bytes * 3 // 2)
    blocks = result_of(json_stdout(big, big, big, small), limits).blocks
    kinds = [type(b).__name__ for b in blocks]
    assert kinds == ["ImageBlock", "TextBlock", "ImageBlock"], kinds
    notice = blocks[1].text
    assert notice.startswith("[image dropped: 2 images were not decoded or sent")
    assert "max_result_decoded_bytes" in notice
    assert blocks[2].data == small


def test_a_passed_deadline_drops_every_image_with_a_notice():
    stdout = b"some text\n" + json_stdout(*small_pngs(3))
    blocks = result_of(stdout, deadline=0.0).blocks
    assert not any(isinstance(b, ImageBlock) for b in blocks)
    (notice,) = [b for b in blocks if "dropped" in b.text]
    assert notice.text.startswith("[image dropped: the call's time ran out while checking images")
    assert "3 images were not checked or sent" in notice.text


def test_a_deadline_that_passes_midway_drops_the_rest(monkeypatch):
    clock = iter([10.0, 10.0, 99.0, 99.0])

    class Clock:
        @staticmethod
        def monotonic() -> float:
            return next(clock)

    monkeypatch.setattr(pipeline, "time", Clock)
    pngs = small_pngs(4)
    blocks = result_of(json_stdout(*pngs), deadline=50.0).blocks
    assert [b.data for b in blocks if isinstance(b, ImageBlock)] == pngs[:2]
    assert "2 images were not checked or sent" in blocks[-1].text


def test_a_deadline_still_ahead_changes_nothing():
    import time

    pngs = small_pngs(2)
    blocks = result_of(json_stdout(*pngs), deadline=time.monotonic() + 3600).blocks
    assert [b.data for b in blocks if isinstance(b, ImageBlock)] == pngs


def test_the_budgets_can_be_set_in_config(home):
    from silica.config import load_settings

    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        "[images]\nmax_decoded_bytes = 1000000\nmax_images_per_result = 3\n"
        "max_result_decoded_bytes = 5000000\n")
    limits = load_settings(home, {}).images.apply(ANTHROPIC)
    assert (limits.max_decoded_bytes, limits.max_images_per_result,
            limits.max_result_decoded_bytes) == (1_000_000, 3, 5_000_000)
    with pytest.raises(ValueError):
        ANTHROPIC.replace(max_images_per_result=0)


# -- formats whose header hides the cost ----------------------------------------------------


def test_a_qoi_is_charged_for_the_time_pillow_takes_to_decode_it_in_python():
    noise = corpus.noise((1800, 1800))  # ~10 MB of QOI: ~7 s in Pillow's Python decoder
    block = prepare_image(ImagePayload(encode(noise, "QOI"), None, "t"))
    assert isinstance(block, TextBlock) and "max_decoded_bytes" in block.text
    assert "in Python" in block.text
    small = prepare_image(ImagePayload(encode(corpus.gradient((64, 48)), "QOI"), None, "t"))
    assert isinstance(small, ImageBlock)


def test_an_ico_entry_larger_than_its_directory_says_is_refused_undecoded():
    png = corpus.bomb_png(9000, 9000)  # the directory below says 16x16
    entry = bytes([16, 16, 0, 0]) + (1).to_bytes(2, "little") + (32).to_bytes(2, "little")
    entry += len(png).to_bytes(4, "little") + (6 + 16).to_bytes(4, "little")
    ico = b"\x00\x00\x01\x00\x01\x00" + entry + png
    block = prepare_image(ImagePayload(ico, None, "t"))
    assert isinstance(block, TextBlock) and "9000x9000" in block.text
    assert "not decoded" in block.text


def test_a_progressive_jpeg_is_charged_for_its_coefficients():
    from silica.images import budget

    photo = corpus.gradient((8000, 6000))  # drafted to 1/4 when decoded: 12 MB of pixels
    baseline = budget.inspect(ImagePayload(encode(photo, "JPEG"), None, "t"), ANTHROPIC)
    progressive = budget.inspect(
        ImagePayload(encode(photo, "JPEG", progressive=True), None, "t"), ANTHROPIC)
    assert baseline is not None and progressive is not None
    assert baseline.bytes < 100 * MB
    # libjpeg holds 48 MP of coefficients at 4:2:0 (1.5 samples a pixel), 2 bytes each
    assert progressive.bytes >= 2 * 48_000_000 * 3 // 2
