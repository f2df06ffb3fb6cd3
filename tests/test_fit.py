"""Fitting never makes an image worse than it was: what a user sees of ``prepare_image``'s
choice of encoding (``silica.images.encode``).

Every image that comes out decodes with Pillow to the size its block says. An image that
fits the provider's limits comes back byte for byte unless a re-encoding is smaller; one that
is scaled down is never sent bigger than it came; pixels change only where scaling changes
them, unless ``lossy`` is allowed; transparency is kept.
"""

from __future__ import annotations

import base64
import io
import json
import random
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageChops, ImageDraw, ImageFilter, ImageFont

from silica.blocks import ImageBlock
from silica.config import ConfigError, load_settings
from silica.images import encode
from silica.images.check import prepare_image
from silica.images.limits import ANTHROPIC, OLLAMA, OPENAI, ImageLimits
from silica.images.payload import ImagePayload


def fit(data: bytes, limits: ImageLimits = ANTHROPIC, **kw) -> ImageBlock:
    block = prepare_image(ImagePayload(data, None, "test"), limits, **kw)
    assert isinstance(block, ImageBlock), block
    return block


def opened(block: ImageBlock) -> Image.Image:
    """``block`` decoded with Pillow; it must be the size the block says."""
    img = Image.open(io.BytesIO(block.data))
    img.load()
    assert img.size == (block.width, block.height)
    assert Image.MIME[img.format] == block.media_type
    return img


def saved(img: Image.Image, fmt: str = "PNG", **options) -> bytes:
    buffer = io.BytesIO()
    img.save(buffer, fmt, **options)
    return buffer.getvalue()


def same_pixels(a: Image.Image, b: Image.Image) -> bool:
    a, b = a.convert("RGBA"), b.convert("RGBA")
    return a.size == b.size and ImageChops.difference(a, b).getbbox(alpha_only=False) is None


def screenshot(size: tuple[int, int] = (1920, 1080), seed: int = 0) -> bytes:
    """A desktop with an editor of anti-aliased code, a chart and a gradient panel."""
    rng = random.Random(seed)
    width, height = size
    img = Image.new("RGB", size, (40, 44, 52))
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=14)
    draw.rectangle((0, 0, 260, height), fill=(33, 37, 43))
    words = ["def", "return", "self", "image", "width", "height", "import", "for", "in"]
    colours = [(198, 120, 221), (97, 175, 239), (152, 195, 121), (229, 192, 123)]
    for line in range(height // 22):
        x = 280 + 28 * rng.randrange(4)
        for _ in range(rng.randrange(3, 10)):
            word = rng.choice(words) + rng.choice(["", "(", ":", ","])
            draw.text((x, 10 + line * 22), word, fill=rng.choice(colours), font=font)
            x += int(draw.textlength(word + " ", font=font))
    ramp = Image.linear_gradient("L").resize((500, 300))
    img.paste(Image.merge("RGB", (ramp, ramp.rotate(90), ramp.rotate(180))), (1300, 100))
    for i in range(12):
        bar = rng.randrange(40, 300)
        draw.rectangle((1300 + i * 40, 800 - bar, 1330 + i * 40, 800), fill=colours[i % 4])
    return saved(img)


def flat_ui(size: tuple[int, int] = (1280, 720), mode: str = "RGB") -> Image.Image:
    """Panels and buttons in a few flat colours, text without anti-aliasing."""
    img = Image.new(mode, size, (238, 240, 244, 255))
    draw = ImageDraw.Draw(img)
    draw.fontmode = "1"
    font = ImageFont.load_default_imagefont()
    draw.rectangle((0, 0, size[0], 48), fill=(32, 42, 68, 255))
    for row in range(12):
        draw.text((40, 70 + row * 48), f"Option {row}: on", fill=(40, 44, 52, 255), font=font)
        draw.rectangle((600, 64 + row * 48, 660, 92 + row * 48), fill=(52, 168, 83, 255))
    return img


@cache
def photo(size: tuple[int, int] = (1600, 1200), seed: int = 2) -> Image.Image:
    """Soft shapes over gradients with a little grain: JPEG's kind of picture (1.9 MP: the
    default targets scale it down)."""
    rng = random.Random(seed)
    img = Image.merge("RGB", [Image.linear_gradient("L").rotate(a).resize(size)
                              for a in (0, 90, 180)])
    draw = ImageDraw.Draw(img)
    for _ in range(30):
        x, y, r = rng.randrange(size[0]), rng.randrange(size[1]), rng.randrange(40, 400)
        draw.ellipse((x - r, y - r, x + r, y + r), fill=tuple(rng.randrange(256) for _ in "rgb"))
    grain = Image.merge("RGB", [Image.effect_noise(size, 10) for _ in "rgb"])
    return Image.blend(img.filter(ImageFilter.BoxBlur(4)), grain, 0.1)


# -- an image that fits comes back as it came ---------------------------------------------


@pytest.mark.parametrize("data", [
    pytest.param(lambda: saved(photo((800, 600))), id="photo PNG"),
    pytest.param(lambda: saved(photo((1200, 800)), "JPEG", quality=80), id="JPEG"),
    pytest.param(lambda: screenshot((1280, 720)), id="screenshot PNG"),
    pytest.param(lambda: saved(flat_ui().quantize(64)), id="palette PNG"),
    pytest.param(lambda: saved(photo((600, 400)), "WEBP"), id="WebP"),
])
def test_an_image_that_fits_comes_back_byte_identical(data) -> None:
    data = data()
    block = fit(data)
    opened(block)
    assert block.data == data
    assert block.original_bytes is None


def test_a_png_written_at_zlibs_fastest_level_is_sent_smaller_with_the_same_pixels() -> None:
    img = photo((1000, 700))
    data = saved(img, compress_level=1)
    block = fit(data)
    assert block.media_type == "image/png"
    assert len(block.data) <= 0.9 * len(data)
    assert block.original_bytes == len(data)
    assert same_pixels(opened(block), img)


# -- a scaled image is never bigger --------------------------------------------------------


@pytest.mark.parametrize("limits", [ANTHROPIC, OPENAI, OLLAMA], ids=["anthropic", "openai",
                                                                     "ollama"])
def test_a_downscaled_screenshot_is_no_larger_than_the_input(limits: ImageLimits) -> None:
    data = screenshot()
    block = fit(data, limits)
    img = opened(block)
    assert block.media_type == "image/png" and img.mode in ("RGB", "P")
    assert (block.width, block.height) < (1920, 1080)
    assert block.width * block.height <= 1_150_000 or limits is OPENAI
    assert len(block.data) <= len(data)
    assert block.original_bytes == len(data)


def test_an_image_that_would_grow_when_scaled_is_sent_as_it_came() -> None:
    """A tiled pattern compresses to little at full size; scaled by 0.74 its tiles no
    longer repeat byte for byte, and every encoding of it is bigger than the input."""
    tile = Image.frombytes("RGB", (64, 64), random.Random(1).randbytes(64 * 64 * 3))
    img = Image.new("RGB", (1920, 1080))
    for x in range(0, 1920, 64):
        for y in range(0, 1080, 64):
            img.paste(tile, (x, y))
    data = saved(img)
    for lossy in (False, True):
        block = fit(data, lossy=lossy)
        assert block.data == data and (block.width, block.height) == (1920, 1080)
        assert block.original_bytes is None
        opened(block)


def test_an_image_over_the_hard_limits_is_still_fitted() -> None:
    """Only an image that fits may be sent as it came: one over 8000 px is scaled."""
    data = saved(Image.new("RGB", (9000, 300), (200, 30, 30)))
    block = fit(data, ANTHROPIC.replace(target_long_side=None, target_megapixels=None))
    assert max(opened(block).size) == 8000


# -- palette only when lossless -------------------------------------------------------------


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_a_flat_image_gets_a_palette_that_keeps_every_pixel(mode: str) -> None:
    img = flat_ui(mode=mode)
    if mode == "RGBA":  # a translucent band and a fully transparent corner
        ImageDraw.Draw(img).rectangle((0, 300, 1280, 340), fill=(255, 0, 0, 128))
        ImageDraw.Draw(img).rectangle((1100, 600, 1280, 720), fill=(0, 0, 0, 0))
    data = saved(img)
    block = fit(data)
    out = opened(block)
    assert out.mode == "P" and block.media_type == "image/png"
    assert len(block.data) <= 0.9 * len(data)
    assert same_pixels(out, img)
    if mode == "RGBA":
        assert out.convert("RGBA").getpixel((10, 320)) == (255, 0, 0, 128)
        assert out.convert("RGBA").getpixel((1200, 700))[3] == 0


def test_an_image_of_many_colours_gets_no_palette_without_lossy() -> None:
    img = photo((1000, 700))
    block = fit(saved(img, compress_level=1))  # worth re-encoding, but not to a palette
    out = opened(block)
    assert out.mode == "RGB"
    assert same_pixels(out, img)


def test_a_scaled_screenshot_of_many_colours_gets_256_colours_only_when_lossy() -> None:
    data = screenshot()
    strict, lossy = fit(data), fit(data, lossy=True)
    assert opened(strict).mode == "RGB"
    assert len(lossy.data) < len(strict.data)
    assert (lossy.width, lossy.height) == (strict.width, strict.height)
    assert opened(lossy).mode == "P" or lossy.media_type == "image/jpeg"


# -- JPEG only where allowed; transparency kept -------------------------------------------------


def test_no_jpeg_unless_lossy_is_allowed() -> None:
    data = saved(photo(), compress_level=1)  # scaled anyway: how it was written is moot
    strict = fit(data)
    assert strict.media_type == "image/png"
    lossy = fit(data, lossy=True)
    assert lossy.media_type == "image/jpeg"
    assert len(lossy.data) < len(strict.data)
    assert opened(lossy).size == opened(strict).size == (strict.width, strict.height)


def test_a_photo_that_came_as_jpeg_stays_jpeg() -> None:
    data = saved(photo(), "JPEG", quality=92)
    block = fit(data)
    assert block.media_type == "image/jpeg" and len(block.data) < len(data)
    assert block.width * block.height <= 1_150_000
    opened(block)


@pytest.mark.parametrize("lossy", [False, True])
def test_transparency_is_kept_and_never_made_jpeg(lossy: bool) -> None:
    img = photo().convert("RGBA")
    ImageDraw.Draw(img).rectangle((0, 0, 800, 1200), fill=(0, 0, 0, 0))
    block = fit(saved(img, compress_level=1), lossy=lossy)
    assert block.media_type == "image/png"
    out = opened(block).convert("RGBA")
    assert out.getpixel((10, 10))[3] == 0  # the transparent half
    assert out.getpixel((block.width - 10, 10))[3] == 255


def test_an_opaque_alpha_band_is_dropped_not_kept() -> None:
    img = photo().convert("RGBA")  # every pixel opaque
    block = fit(saved(img, compress_level=1), lossy=True)
    assert block.media_type == "image/jpeg"
    assert opened(block).mode == "RGB"


# -- the property: lossless unless lossy, never bigger -----------------------------------------


@st.composite
def small_images(draw) -> Image.Image:
    mode = draw(st.sampled_from(["L", "LA", "RGB", "RGBA"]))
    width, height = draw(st.integers(1, 48)), draw(st.integers(1, 48))
    count = draw(st.integers(1, 300))
    rng = random.Random(draw(st.integers(0, 2**32)))
    channels = len(mode)
    colours = [bytes(rng.randrange(256) for _ in range(channels)) for _ in range(count)]
    pixels = b"".join(rng.choice(colours) for _ in range(width * height))
    return Image.frombytes(mode, (width, height), pixels)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(img=small_images(), level=st.sampled_from([0, 1, 6, 9]))
def test_an_image_needing_no_scaling_keeps_its_pixels_and_never_grows(img, level) -> None:
    data = saved(img, compress_level=level)
    block = fit(data)
    assert len(block.data) <= len(data)
    assert same_pixels(opened(block), img)
    assert (block.data == data) == (block.original_bytes is None)


# -- the encoder on its own (what other callers use) --------------------------------------------


def test_smallest_picks_among_the_allowed_forms() -> None:
    flat = flat_ui()
    best = encode.smallest(flat, {"image/png", "image/jpeg"})
    assert best is not None and best.form == encode.Form("palette")
    assert same_pixels(Image.open(io.BytesIO(best.data)), flat)
    busy = photo((800, 600))
    assert encode.smallest(busy, {"image/png", "image/jpeg"}).form == encode.Form("png")
    lossy = encode.smallest(busy, {"image/png", "image/jpeg"}, lossy=True)
    assert lossy.media_type == "image/jpeg"
    assert encode.smallest(busy, {"image/png"}, lossy=True).media_type == "image/png"


def test_smallest_falls_back_to_lower_jpeg_qualities_then_gives_up() -> None:
    busy = photo((800, 600))
    png = encode.smallest(busy, {"image/png", "image/jpeg"})
    squeezed = encode.smallest(busy, {"image/png", "image/jpeg"}, max_bytes=len(png.data) // 4)
    assert squeezed is not None and squeezed.media_type == "image/jpeg"
    assert encode.smallest(busy, {"image/png", "image/jpeg"}, max_bytes=100) is None
    assert encode.smallest(busy, {"image/png", "image/jpeg"}, max_bytes=len(png.data) // 4,
                           fallback=False) is None


# -- config and what the user is shown ------------------------------------------------------


def test_lossy_is_a_config_key_carried_in_the_limits(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[images]\nlossy = true\ntarget_long_side = 1000\n")
    images = load_settings(tmp_path, {}).images
    assert images.lossy is True
    assert images.apply(ANTHROPIC) == ANTHROPIC.replace(target_long_side=1000, lossy=True)
    assert load_settings(tmp_path / "none", {}).images.lossy is False
    (tmp_path / "config.toml").write_text("[images]\nlossy = \"sometimes\"\n")
    with pytest.raises(ConfigError, match="lossy"):
        load_settings(tmp_path, {})


def test_the_terminal_line_reports_bytes_before_and_after(tmp_path: Path) -> None:
    data = screenshot()
    script = tmp_path / "shot.py"
    payload = json.dumps({"base64": base64.b64encode(data).decode(), "media_type": "image/png"})
    (tmp_path / "payload.json").write_text(payload)
    script.write_text("import sys\nsys.stdout.write(open(sys.argv[1]).read())\n")
    done = subprocess.run([sys.executable, "-m", "silica", "exec", "--save-images",
                           str(tmp_path / "shots"), "--", sys.executable, str(script),
                           str(tmp_path / "payload.json")],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    line = next(part for part in done.stdout.splitlines() if part.startswith("[image:"))
    assert f"(fitted from {len(data):,})" in line
    [shot] = (tmp_path / "shots").glob("*.png")
    assert shot.stat().st_size <= len(data)
    assert f"{shot.stat().st_size:,} bytes" in line


def test_images_lossy_in_config_reaches_every_fit(tmp_path) -> None:
    """``[images] lossy = true`` travels in the provider's limits, so tool results, uploads
    and requests are all fitted with it, not only the callers that pass ``lossy=``."""
    from silica.config import load_settings

    (tmp_path / "config.toml").write_text("[images]\nlossy = true\n", encoding="utf-8")
    limits = load_settings(home=tmp_path, environ={}).images.apply(ANTHROPIC)
    data = saved(photo(), compress_level=1)
    assert fit(data, limits).media_type == "image/jpeg"
    assert fit(data, load_settings(home=tmp_path / "none", environ={}).images.apply(ANTHROPIC)
               ).media_type == "image/png"
