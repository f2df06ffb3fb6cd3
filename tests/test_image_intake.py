"""Images a person sends, through ``prepare_upload``: checked and fitted as tool images are, or
refused with a message that names the image, says why and says what to do.

Every image is real bytes made with Pillow (``images_corpus``) and really decoded; a bomb is
checked in a fresh process that reports its own peak memory (``VmHWM``). No test asserts a
time.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import images_corpus as corpus
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from silica.blocks import ImageBlock, TextBlock
from silica.hookspecs import hookimpl
from silica.images.intake import ImageRefused, prepare_upload
from silica.images.limits import ANTHROPIC, OLLAMA, OPENAI
from silica.plugins import get_plugin_manager

REPO = Path(__file__).resolve().parent.parent
MB = 1024 * 1024
CAP = 10 * MB


def upload(data: bytes, name: str = "shot.png", declared: str | None = None, *,
           limits=ANTHROPIC, max_bytes: int = CAP) -> ImageBlock:
    return prepare_upload(data, name=name, declared=declared, limits=limits,
                          max_bytes=max_bytes)


def refused(data: bytes, name: str = "shot.png", declared: str | None = None,
            **options) -> ImageRefused:
    with pytest.raises(ImageRefused) as caught:
        upload(data, name, declared, **options)
    return caught.value


def size_of(block: ImageBlock) -> tuple[int, int]:
    with Image.open(io.BytesIO(block.data)) as img:
        img.load()
        return img.size


# -- good images ----------------------------------------------------------------------------


@pytest.mark.parametrize(("make", "mime"), [(corpus.small_png, "image/png"),
                                            (corpus.small_jpeg, "image/jpeg"),
                                            (corpus.small_webp, "image/webp")])
def test_a_good_small_image_is_kept_as_sent(make, mime):
    data = make()
    block = upload(data, "pic", mime)
    assert block.media_type == mime and block.data == data
    assert (block.width, block.height) == (64, 48) == size_of(block)
    assert block.source == "pic"


def test_a_generic_or_aliased_label_declares_nothing_wrong():
    assert upload(corpus.small_jpeg(), "a.jpg", "image/jpg").media_type == "image/jpeg"
    assert upload(corpus.small_png(), "a", "application/octet-stream").media_type == "image/png"
    assert upload(corpus.small_png(), "a", "IMAGE/PNG; charset=binary").media_type == "image/png"


def test_a_large_image_is_fitted_to_the_providers_limits():
    big = upload(corpus.wide_png(3000, 1000), "wide.png", "image/png")
    assert (big.width, big.height) == (1568, 522) == size_of(big)
    photo = upload(corpus.photo_jpeg(), "photo.jpg", "image/jpeg")
    assert photo.media_type == "image/jpeg" and photo.width * photo.height <= 1_150_000
    assert size_of(photo) == (photo.width, photo.height)
    assert upload(corpus.wide_png(3000, 1000), limits=OPENAI).width == 2048


def test_a_format_the_provider_does_not_take_is_converted():
    block = upload(corpus.small_webp(), "pic.webp", "image/webp", limits=OLLAMA)
    assert block.media_type == "image/png" and size_of(block) == (64, 48)
    bmp = upload(corpus.bmp(), "pic.bmp")
    assert bmp.media_type == "image/png" and size_of(bmp) == (80, 60)


# -- refusals -------------------------------------------------------------------------------


def test_a_truncated_png_is_refused_by_name():
    err = refused(corpus.truncated_png(), "cut.png", "image/png")
    message = str(err)
    assert err.code == "invalid_image"
    assert message.startswith('image "cut.png"') and "truncated" in message
    assert "whole file was sent" in message and "tool" not in message


def test_a_jpeg_labelled_png_is_refused_not_guessed():
    err = refused(corpus.small_jpeg(), "photo.png", "image/png")
    message = str(err)
    assert err.code == "invalid_image" and message.startswith('image "photo.png"')
    assert "labelled image/png" in message and "JPEG" in message
    assert "send it as image/jpeg" in message


@pytest.mark.parametrize(("make", "words"), [(corpus.svg, ("SVG", "not a raster image", "PNG")),
                                             (corpus.pdf, ("PDF", "render"))])
def test_vector_drawings_and_documents_are_refused(make, words):
    err = refused(make(), "drawing", None)
    assert err.code == "invalid_image"
    for word in words:
        assert word in str(err)


def test_an_svg_labelled_as_svg_is_refused_as_svg_not_as_mislabelled():
    message = str(refused(corpus.svg(), "logo.svg", "image/svg+xml"))
    assert "SVG" in message and "labelled" not in message


def test_a_30000_square_bomb_is_refused_from_its_header():
    err = refused(corpus.bomb_png(), "bomb.png", "image/png")
    assert err.code == "invalid_image" and 'image "bomb.png"' in str(err)
    assert "megapixels" in str(err) and "not decoded" in str(err)


def test_an_image_over_the_pixel_limit_is_refused_with_its_size():
    err = refused(corpus.bomb_png(12000, 9000), "big.png", "image/png")
    assert "12000x9000 px" in str(err) and "100 megapixel" in str(err)


BOMB_RUNNER = """
import json, sys
from pathlib import Path
sys.path.insert(0, "tests")
import images_corpus
from silica.images.intake import ImageRefused, prepare_upload
from silica.images.limits import ANTHROPIC
data = images_corpus.bomb_png()
try:
    prepare_upload(data, name="bomb.png", declared="image/png", limits=ANTHROPIC,
                   max_bytes=10 * 2**20)
    outcome = "accepted"
except ImageRefused as exc:
    outcome = str(exc)
status = Path("/proc/self/status").read_text()
print(json.dumps({"outcome": outcome,
                  "peak": int(status.split("VmHWM:")[1].split()[0]) * 1024}))
"""


def test_the_bomb_is_refused_before_a_full_decode_allocates():
    done = subprocess.run([sys.executable, "-c", BOMB_RUNNER], capture_output=True, text=True,
                          cwd=REPO, check=True)
    report = json.loads(done.stdout)
    assert "bomb.png" in report["outcome"] and "megapixels" in report["outcome"]
    # 30000x30000 is 3.6 GB as RGBA and 112 MB even as 1-bit: the process stays far below
    assert report["peak"] < 150 * MB, report["peak"]


def test_an_image_over_the_byte_limit_is_refused_unread():
    data = corpus.wide_png(3000, 1000)
    err = refused(data, "wide.png", "image/png", max_bytes=len(data) - 1)
    assert err.code == "image_too_large"
    assert f"{len(data):,} bytes" in str(err) and "max_size_bytes" in str(err)


@pytest.mark.parametrize(("data", "words"), [(b"", ("empty",)),
                                             (corpus.junk(), ("not in any image format",)),
                                             (b"hello world", ("not in any image format",))])
def test_empty_and_unknown_bytes_are_refused(data, words):
    err = refused(data, "thing", "image/png")
    assert err.code == "invalid_image"
    for word in words:
        assert word in str(err)


def test_a_hostile_name_is_made_safe_in_the_message():
    err = refused(corpus.truncated_png(), "\x1b]0;pwned\x07evil.png", "image/png")
    assert "\x1b" not in str(err) and "\x07" not in str(err)
    assert "␛]0;pwned␇evil.png" in str(err)


# -- the plugin hook ------------------------------------------------------------------------


class Grey:
    """A plugin that prepares every image itself: a grey square, or a notice for tiny ones."""

    @hookimpl
    def silica_prepare_image(self, payload, limits):
        if len(payload.data) < 200:
            return TextBlock(text="[image dropped: the grey plugin wants bigger images]")
        buffer = io.BytesIO()
        Image.new("L", (8, 8), 128).save(buffer, "PNG")
        return ImageBlock(media_type="image/png", data=buffer.getvalue(), width=8, height=8,
                          source="grey")


@pytest.fixture
def grey():
    pm = get_plugin_manager()
    plugin = Grey()
    pm.register(plugin, name="grey-test")
    yield plugin
    pm.unregister(plugin)


def test_images_go_through_the_prepare_image_hook(grey):
    block = upload(corpus.screenshot_png(), "screen.png", "image/png")
    assert (block.width, block.height) == (8, 8) and block.source == "screen.png"
    err = refused(corpus.small_png(), "tiny.png", "image/png")
    assert str(err) == 'image "tiny.png" was refused: the grey plugin wants bigger images'


def test_a_bomb_is_refused_whatever_plugin_prepares_images(grey):
    assert "megapixels" in str(refused(corpus.bomb_png(), "bomb.png", "image/png"))


# -- any bytes ------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=512), st.sampled_from([None, "image/png", "image/jpeg", "text/plain"]))
def test_any_bytes_give_a_fitted_image_or_a_refusal(data, declared):
    for prefix in (b"", corpus.small_png()[:33]):  # and bytes after a real PNG header
        try:
            block = prepare_upload(prefix + data, name="x", declared=declared,
                                   limits=ANTHROPIC, max_bytes=CAP)
        except ImageRefused as exc:
            assert str(exc).startswith('image "x"') and exc.code == "invalid_image"
        else:
            assert block.media_type in ANTHROPIC.formats
