"""prepare_image, ImageLimits and estimate_tokens, checked the way a user would observe them.

Every outcome is either an ImageBlock the provider would accept (decodes fully, its bytes
sniff as its media type, the type is accepted, sides and base64 size within limits) or a
TextBlock notice that starts ``[image dropped:`` and names the reason.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import images_corpus as corpus
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from silica.blocks import ImageBlock, TextBlock
from silica.images import check
from silica.images.check import prepare_image
from silica.images.limits import ANTHROPIC, OLLAMA, OPENAI, ImageLimits, for_provider
from silica.images.payload import ImagePayload
from silica.images.sniff import normalize_media_type, sniff_media_type
from silica.images.tokens import estimate_tokens

PRESETS = {"anthropic": ANTHROPIC, "openai": OPENAI, "ollama": OLLAMA}
NO_TARGETS = {"target_long_side": None, "target_megapixels": None, "target_short_side": None}


def prepare(data: bytes, declared: str | None = None, limits: ImageLimits = ANTHROPIC, **kw):
    return prepare_image(ImagePayload(data, declared, "test"), limits, **kw)


def assert_sendable(block, limits: ImageLimits = ANTHROPIC, *, many: bool = False) -> Image.Image:
    """``block`` is an image the provider would accept; returns it decoded."""
    assert isinstance(block, ImageBlock), block
    assert block.media_type in limits.formats
    assert sniff_media_type(block.data) == block.media_type
    assert len(block.base64) <= limits.max_base64_bytes
    assert max(block.width, block.height) <= limits.side_limit(many)
    if block.media_type == "image/png":
        assert corpus.png_chunks_ok(block.data)
    img = Image.open(io.BytesIO(block.data))
    for index in range(getattr(img, "n_frames", 1)):
        img.seek(index)
        img.load()  # raises if any frame is truncated or corrupt
    img.seek(0)
    assert img.size == (block.width, block.height)
    return img


def assert_dropped(block, *words: str) -> str:
    """``block`` is a drop notice mentioning every one of ``words`` (case-insensitive)."""
    assert isinstance(block, TextBlock), block
    assert block.text.startswith("[image dropped:"), block.text
    assert block.text.endswith("]")
    for word in words:
        assert word.lower() in block.text.lower(), (word, block.text)
    return block.text


def assert_valid_outcome(block, limits: ImageLimits, *, many: bool = False) -> None:
    if isinstance(block, TextBlock):
        assert_dropped(block)
    else:
        assert_sendable(block, limits, many=many)


# -- every corpus item, every preset: the invariant -----------------------------------------


@pytest.mark.parametrize("name", sorted(corpus.CORPUS))
@pytest.mark.parametrize("provider", sorted(PRESETS))
def test_every_corpus_item_gives_a_sendable_image_or_a_notice(name: str, provider: str) -> None:
    limits = PRESETS[provider]
    block = prepare(corpus.CORPUS[name](), limits=limits)
    assert_valid_outcome(block, limits)
    assert block.type == ("text" if name in DROPPED else "image")


DROPPED = {
    "empty",
    "junk",
    "truncated_png",
    "truncated_jpeg",
    "svg",
    "pdf",
    "heic_header",
    "avif_header",
    "bomb_png",
}


# -- passing through untouched --------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "media_type"),
    [
        (corpus.small_png, "image/png"),
        (corpus.small_jpeg, "image/jpeg"),
        (corpus.small_webp, "image/webp"),
        (corpus.palette_png_transparent, "image/png"),
    ],
)
def test_a_valid_small_image_passes_through_byte_identical(build, media_type: str) -> None:
    data = build()
    block = prepare(data, media_type)
    assert_sendable(block)
    assert block.data == data
    assert block.media_type == media_type
    assert block.source == "test"


def test_wrong_declared_type_the_bytes_win() -> None:
    data = corpus.small_jpeg()
    block = prepare(data, "image/png")
    assert_sendable(block)
    assert block.media_type == "image/jpeg"
    assert block.data == data


def test_png_with_a_bad_checksum_is_re_encoded_not_passed_through() -> None:
    data = corpus.with_bad_idat_crc(corpus.small_png())
    assert not corpus.png_chunks_ok(data)
    block = prepare(data, "image/png")
    assert_sendable(block)
    assert block.data != data
    assert (block.width, block.height) == (64, 48)


def test_declared_alias_and_case_are_normalised() -> None:
    assert normalize_media_type(" Image/JPG ") == "image/jpeg"
    assert prepare(corpus.small_jpeg(), "Image/JPG").media_type == "image/jpeg"


def test_bytearray_data_is_accepted() -> None:
    assert_sendable(prepare_image(ImagePayload(bytearray(corpus.small_png()))))


# -- dropped, with a reason -----------------------------------------------------------------


def test_empty_bytes_are_dropped() -> None:
    assert_dropped(prepare(b"", "image/png"), "empty", "0 bytes")


def test_junk_bytes_are_dropped() -> None:
    assert_dropped(
        prepare(corpus.junk(), "image/png"), "not in any known image format", "image/png"
    )


def test_svg_is_dropped_with_advice() -> None:
    text = assert_dropped(prepare(corpus.svg(), "image/svg+xml"))
    assert text == (
        "[image dropped: SVG image (image/svg+xml) cannot be sent to the model; "
        "render it to PNG first]"
    )


def test_pdf_is_dropped() -> None:
    assert_dropped(prepare(corpus.pdf(), "image/png"), "PDF", "declared as image/png", "render")


def test_heic_without_a_decoder_is_dropped() -> None:
    Image.init()
    if "HEIF" in Image.OPEN:
        pytest.skip("a HEIF plugin is registered here")
    assert_dropped(prepare(corpus.heic_header()), "HEIC", "cannot be decoded here")


def test_avif_is_converted_or_dropped_depending_on_pillow() -> None:
    Image.init()
    if "AVIF" in Image.SAVE:
        data = corpus.encode(corpus.gradient((40, 30)), "AVIF")
        block = prepare(data, "image/avif")
        assert_sendable(block)
        assert block.media_type == "image/png"
    else:
        assert_dropped(prepare(corpus.avif_header()), "AVIF", "cannot be decoded here")


@pytest.mark.parametrize("build", [corpus.truncated_png, corpus.truncated_jpeg])
def test_truncated_files_are_dropped(build) -> None:
    assert_dropped(prepare(build()), "truncated or corrupt", "whole file")


def test_decompression_bomb_is_refused_without_decoding_it() -> None:
    data = corpus.bomb_png(30000, 30000)
    assert len(data) < 200_000
    assert_dropped(prepare(data, "image/png"), "megapixels", "not decoded")
    # In a process of its own: decoding 900 megapixels would take ~900 MB of memory.
    code = (
        "import resource, sys; sys.path.insert(0, 'tests')\n"
        "import images_corpus as corpus\n"
        "from silica.images.check import prepare_image\n"
        "from silica.images.payload import ImagePayload\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "block = prepare_image(ImagePayload(corpus.bomb_png(30000, 30000), 'image/png'))\n"
        "print(block.type, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parent.parent)
    kind, grown_kib = done.stdout.split()
    assert kind == "text" and int(grown_kib) < 100_000  # under 100 MB more, not ~900


def test_bomb_is_refused_by_our_limit_even_without_pillows(monkeypatch) -> None:
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)
    block = prepare(corpus.bomb_png(30000, 30000))
    assert_dropped(block, "30000x30000", "900.0 megapixels", "100 megapixel safety limit")


def test_max_pixels_is_a_limit_of_its_own() -> None:
    limits = ANTHROPIC.replace(max_pixels=1_000_000)
    assert_dropped(
        prepare(corpus.wide_png(3000, 1000), limits=limits), "3000x1000", "1 megapixel safety limit"
    )


def test_nothing_fits_a_tiny_byte_budget() -> None:
    limits = ANTHROPIC.replace(max_base64_bytes=16)
    assert_dropped(prepare(corpus.small_png(), limits=limits), "could not be made to fit")


def test_an_unexpected_error_becomes_a_notice(monkeypatch) -> None:
    def boom(*args, **kwargs):
        raise RuntimeError("kaput")

    monkeypatch.setattr(check, "_fit", boom)
    assert_dropped(prepare(corpus.small_png()), "unexpected error", "RuntimeError", "kaput")


# -- converted ------------------------------------------------------------------------------


@pytest.mark.parametrize("build", [corpus.bmp, corpus.tiff, corpus.ico, corpus.ppm])
@pytest.mark.parametrize("provider", sorted(PRESETS))
def test_unaccepted_formats_become_png(build, provider: str) -> None:
    block = prepare(build(), limits=PRESETS[provider])
    img = assert_sendable(block, PRESETS[provider])
    assert block.media_type == "image/png"
    assert img.size == Image.open(io.BytesIO(build())).size


def test_ico_keeps_its_largest_size_and_alpha() -> None:
    img = assert_sendable(prepare(corpus.ico(), "image/x-icon"))
    assert img.size == (64, 64)
    assert img.convert("RGBA").getpixel((10, 10))[3] == 128


def test_webp_becomes_png_for_ollama() -> None:
    assert prepare(corpus.small_webp(), limits=OLLAMA).media_type == "image/png"


def test_cmyk_jpeg_becomes_rgb() -> None:
    block = prepare(corpus.cmyk_jpeg(), "image/jpeg")
    img = assert_sendable(block)
    assert block.media_type == "image/jpeg"
    assert img.mode == "RGB"
    red, green, blue = img.getpixel((32, 24))
    assert red > 230 and green < 30 and blue > 230  # magenta


def test_sixteen_bit_png_becomes_eight_bit_scaled_not_clipped() -> None:
    block = prepare(corpus.png16(), "image/png")
    img = assert_sendable(block)
    assert block.data[24] == 8  # IHDR bit depth
    assert img.mode == "L"
    assert [img.getpixel((x, 0)) for x in range(4)] == [255, 128, 100, 0]


def test_big_palette_png_with_transparency_keeps_it_when_scaled() -> None:
    block = prepare(corpus.palette_png_transparent((3000, 200)))
    img = assert_sendable(block).convert("RGBA")
    assert block.width == 1568
    assert img.getpixel((10, 10))[3] == 0  # left half transparent
    assert img.getpixel((block.width - 10, 10)) == (255, 0, 0, 255)  # right half red


def test_animated_gif_is_kept_whole_for_anthropic() -> None:
    data = corpus.animated_gif()
    block = prepare(data, "image/gif")
    img = assert_sendable(block)
    assert block.data == data
    assert img.n_frames == 3


@pytest.mark.parametrize("limits", [OPENAI, OLLAMA])
def test_animated_gif_sends_its_first_frame_elsewhere(limits: ImageLimits) -> None:
    block = prepare(corpus.animated_gif(), "image/gif", limits)
    img = assert_sendable(block, limits)
    assert block.media_type == "image/png"
    assert getattr(img, "n_frames", 1) == 1
    assert img.convert("RGB").getpixel((5, 5)) == (255, 0, 0)  # the first frame is red
    assert block.source == "test (first frame of 3)"


def test_animated_gif_that_must_shrink_sends_its_first_frame() -> None:
    block = prepare(corpus.animated_gif((2000, 100)), "image/gif")
    assert_sendable(block)
    assert (block.media_type, block.width) == ("image/png", 1568)
    assert "first frame of 3" in block.source


def test_animated_png_sends_its_first_frame() -> None:
    block = prepare(corpus.animated_png())
    assert_sendable(block)
    assert "first frame of 2" in block.source


def test_exif_rotation_is_applied_when_re_encoding() -> None:
    block = prepare(corpus.rotated_jpeg(), "image/jpeg")
    assert_sendable(block)
    assert block.height == 1568 and block.width < block.height


# -- scaled down ----------------------------------------------------------------------------


def test_9000_px_png_fits_the_default_target_long_side() -> None:
    block = prepare(corpus.wide_png(9000, 400), "image/png")
    assert_sendable(block)
    assert (block.width, block.height) == (1568, 69)


def test_9000_px_png_fits_8000_with_targets_disabled() -> None:
    limits = ANTHROPIC.replace(**NO_TARGETS)
    block = prepare(corpus.wide_png(9000, 400), limits=limits)
    assert_sendable(block, limits)
    assert (block.width, block.height) == (8000, 355)


def test_many_images_apply_the_2000_px_limit() -> None:
    limits = ANTHROPIC.replace(**NO_TARGETS)
    data = corpus.wide_png(3000, 1000)
    block = prepare(data, limits=limits, many=True)
    assert_sendable(block, limits, many=True)
    assert max(block.width, block.height) <= 2000
    alone = prepare(data, limits=limits)
    assert alone.data == data  # within 8000 px: untouched


def test_screenshot_costs_at_most_1850_anthropic_tokens() -> None:
    block = prepare(corpus.screenshot_png(), "image/png")
    assert_sendable(block)
    assert block.media_type == "image/png"
    assert estimate_tokens(block.width, block.height, "anthropic") <= 1850
    assert block.width * block.height <= 1_150_000


def test_screenshot_for_openai_fits_its_high_detail_pipeline() -> None:
    block = prepare(corpus.screenshot_png(), limits=OPENAI)
    assert_sendable(block, OPENAI)
    assert (block.width, block.height) == (1365, 768)
    assert estimate_tokens(block.width, block.height, "openai") == 85 + 170 * 6


def test_big_photo_stays_jpeg_and_shrinks() -> None:
    block = prepare(corpus.photo_jpeg(), "image/jpeg")
    assert_sendable(block)
    assert block.media_type == "image/jpeg"
    assert block.width * block.height <= 1_150_000


def test_noise_over_5_mb_of_base64_comes_out_under_it() -> None:
    data = corpus.noise_png()
    assert len(ImageBlock(media_type="image/png", data=data).base64) > 5 * 1024 * 1024
    assert_sendable(prepare(data, "image/png"))


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_noise_fits_5_mb_even_with_targets_disabled(mode: str) -> None:
    limits = ANTHROPIC.replace(**NO_TARGETS)
    block = prepare(corpus.noise_png(mode=mode), limits=limits)
    assert_sendable(block, limits)
    if mode == "RGBA":  # alpha: PNG only, so it had to shrink
        assert block.media_type == "image/png"
        assert block.width < 1500
        assert Image.open(io.BytesIO(block.data)).mode == "RGBA"


def test_a_small_byte_budget_is_met_by_shrinking() -> None:
    limits = ANTHROPIC.replace(max_base64_bytes=40_000)
    block = prepare(corpus.encode(corpus.noise((512, 512), "RGBA"), "PNG"), limits=limits)
    assert_sendable(block, limits)
    assert block.width < 512


# -- fuzzing --------------------------------------------------------------------------------

DECLARED = st.one_of(
    st.none(),
    st.sampled_from(
        [
            "image/png",
            "image/jpeg",
            "image/jpg",
            "IMAGE/GIF",
            "image/webp",
            "image/svg+xml",
            "application/octet-stream",
            "",
        ]
    ),
    st.text(max_size=20),
)
LIMITS = st.sampled_from([ANTHROPIC, OPENAI, OLLAMA, ANTHROPIC.replace(**NO_TARGETS)])
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(data=st.binary(max_size=2048), declared=DECLARED, limits=LIMITS, many=st.booleans())
def test_arbitrary_bytes_never_raise(data: bytes, declared, limits, many: bool) -> None:
    assert_valid_outcome(prepare(data, declared, limits, many=many), limits, many=many)


@st.composite
def mutated_images(draw) -> bytes:
    data = draw(st.sampled_from(corpus.SMALL_SEEDS))()
    kind = draw(st.sampled_from(["truncate", "flip", "splice", "header"]))
    if kind == "truncate":
        return data[: draw(st.integers(0, len(data)))]
    if kind == "header":  # a real header followed by junk
        return data[: draw(st.integers(1, 64))] + draw(st.binary(max_size=512))
    position = draw(st.integers(0, len(data) - 1))
    if kind == "flip":
        return (
            data[:position]
            + bytes([data[position] ^ draw(st.integers(1, 255))])
            + data[position + 1 :]
        )
    return data[:position] + draw(st.binary(min_size=1, max_size=32)) + data[position:]


@FUZZ
@given(data=mutated_images(), declared=DECLARED, limits=LIMITS, many=st.booleans())
def test_mutated_images_never_raise(data: bytes, declared, limits, many: bool) -> None:
    assert_valid_outcome(prepare(data, declared, limits, many=many), limits, many=many)


# -- limits ---------------------------------------------------------------------------------


def test_presets_hold_the_documented_numbers() -> None:
    assert ANTHROPIC.max_base64_bytes == 5 * 1024 * 1024
    assert (ANTHROPIC.max_side, ANTHROPIC.max_side_many, ANTHROPIC.many_threshold) == (
        8000,
        2000,
        20,
    )
    assert ANTHROPIC.max_images_per_request == 100
    assert OLLAMA.formats == frozenset({"image/png", "image/jpeg"})
    assert not OPENAI.allow_animated_gif


def test_for_provider_and_overrides() -> None:
    assert for_provider("Claude") is ANTHROPIC
    assert for_provider(" openai ") is OPENAI
    assert for_provider("ollama") is OLLAMA
    with pytest.raises(ValueError, match="anthropic"):
        for_provider("nope")
    smaller = ANTHROPIC.replace(max_side=1000)
    assert smaller.max_side == 1000 and ANTHROPIC.max_side == 8000
    with pytest.raises(ValueError):
        ANTHROPIC.replace(max_side=0)
    with pytest.raises(ValueError):
        ANTHROPIC.replace(formats=frozenset())


def test_many_threshold() -> None:
    assert not ANTHROPIC.is_many(20) and ANTHROPIC.is_many(21)
    assert ANTHROPIC.side_limit(many=True) == 2000 and ANTHROPIC.side_limit() == 8000
    assert not OPENAI.is_many(1000)


def test_limits_and_tokens_do_not_import_pillow() -> None:
    code = (
        "import sys, silica.images.limits, silica.images.tokens, silica.images.sniff;"
        "assert 'PIL' not in sys.modules, 'PIL imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- tokens ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "provider", "expected"),
    [
        ((1092, 1092), "anthropic", 1590),
        ((200, 200), "anthropic", 54),
        ((1000, 1000), "anthropic", 1334),
        ((1092, 1092), "ollama", 1590),
        ((1024, 1024), "openai", 765),
        ((2048, 4096), "openai", 1105),
        ((512, 512), "openai", 255),
        ((0, 10), "anthropic", 0),
    ],
)
def test_token_estimates(size: tuple[int, int], provider: str, expected: int) -> None:
    assert estimate_tokens(*size, provider) == expected


def test_anthropic_tokens_are_capped_by_its_own_downscale() -> None:
    assert 1500 <= estimate_tokens(4000, 3000) <= 1600
    assert estimate_tokens(9000, 400) == estimate_tokens(1568, 69)


def test_openai_low_detail_and_unknown_provider() -> None:
    assert estimate_tokens(4000, 3000, "openai", detail="low") == 85
    with pytest.raises(ValueError):
        estimate_tokens(10, 10, "nobody")


# -- sniffing additions ---------------------------------------------------------------------


def test_sniff_knows_the_new_kinds() -> None:
    assert sniff_media_type(corpus.ppm()) == "image/x-portable-anymap"
    assert sniff_media_type(b"qoif\x00\x00\x00\x01") == "image/qoi"
    assert sniff_media_type(b"<!DOCTYPE svg>\n<svg></svg>") == "image/svg+xml"
    assert sniff_media_type(b"\xef\xbb\xbf<svg></svg>") == "image/svg+xml"
    assert sniff_media_type(b"<html><body>hi</body></html>") is None
    assert sniff_media_type(b"P7 not pnm") is None
