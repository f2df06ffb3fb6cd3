"""Images in JSON output: every shape existing tools print, stray lines, bad data."""

from __future__ import annotations

import base64
import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from silica.blocks import ImageBlock, TextBlock
from silica.plugins import get_plugin_manager
from silica.results.json_images import extract_json_images
from silica.results.pipeline import build_result
from silica.tools.model import RawOutput


def png(color=(255, 0, 0), size=(8, 6)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def jpeg() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (5, 5), "blue").save(buf, format="JPEG")
    return buf.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def result_of(stdout: str, code: int = 0):
    return build_result(RawOutput(stdout.encode(), b"", code, 0.1), get_plugin_manager())


def test_top_level_base64_becomes_text_plus_image():
    out = json.dumps({"path": "/tmp/shot.png", "media_type": "image/png", "base64": b64(png())})
    result = result_of(out)
    text, image = result.blocks
    assert json.loads(text.text) == {"path": "/tmp/shot.png"}
    assert isinstance(image, ImageBlock) and image.data == png()
    assert image.media_type == "image/png"


def test_image_object_keeps_its_other_fields():
    out = json.dumps({"ok": True, "image": {"base64": b64(png()), "width": 8}})
    text, image = result_of(out).blocks
    assert json.loads(text.text) == {"ok": True, "image": {"width": 8}}
    assert image.data == png()


def test_list_of_images_keeps_order_and_data_urls_work():
    first, second = png((255, 0, 0)), jpeg()
    out = json.dumps({"images": [{"base64": b64(first), "caption": "red"},
                                 "data:image/jpeg;base64," + b64(second)]})
    blocks = result_of(out).blocks
    assert json.loads(blocks[0].text) == {"images": [{"caption": "red"}]}
    assert [b.data for b in blocks[1:]] == [first, second]
    assert [b.media_type for b in blocks[1:]] == ["image/png", "image/jpeg"]


def test_bytes_win_over_a_wrong_declared_type():
    out = json.dumps({"base64": b64(jpeg()), "media_type": "image/png"})
    [image] = result_of(out).images
    assert image.media_type == "image/jpeg"


def test_no_media_type_is_sniffed():
    [image] = result_of(json.dumps({"base64": b64(png())})).images
    assert image.media_type == "image/png"


def test_stray_lines_before_and_after_do_not_turn_the_image_into_text():
    out = ("Downloading model...\nprogress 100%\n"
           + json.dumps({"base64": b64(png()), "note": "hi"}) + "\ndone in 2s\n")
    result = result_of(out)
    assert len(result.images) == 1
    assert "Downloading model..." in result.text and "done in 2s" in result.text
    assert '"note": "hi"' in result.text and b64(png()) not in result.text


def test_invalid_base64_declared_as_image_is_a_notice_not_an_image():
    out = json.dumps({"base64": "!!!not base64!!!", "media_type": "image/png"})
    result = result_of(out)
    assert result.images == []
    assert "[image dropped: the base64 field is not valid base64" in result.text


def test_non_image_base64_without_type_stays_text_as_before():
    out = json.dumps({"base64": b64(b"just some bytes"), "name": "blob"})
    result = result_of(out)
    assert result.images == []
    assert json.loads(result.text) == {"base64": b64(b"just some bytes"), "name": "blob"}


def test_plain_json_and_plain_text_are_untouched():
    out = '{"temperature": 21,   "city": "Oslo"}\n'
    assert result_of(out).text == out
    assert result_of("just words\n").text == "just words\n"


def test_image_that_is_not_sendable_becomes_a_notice():
    svg = b'<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"></svg>'
    result = result_of(json.dumps({"base64": b64(svg), "media_type": "image/svg+xml"}))
    assert result.images == []
    assert isinstance(result.blocks[-1], TextBlock) and "[image dropped:" in result.text


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_never_raises_and_keeps_text_without_images(text):
    found = extract_json_images(text)
    cleaned, images = found.text, found.images
    if not images and "[image dropped:" not in cleaned:
        assert cleaned == text


@settings(max_examples=100, deadline=None)
@given(before=st.text(alphabet=st.characters(blacklist_characters="{"), max_size=50),
       after=st.text(max_size=50), extra=st.dictionaries(
           st.text(min_size=1, max_size=8).filter(
               lambda k: k not in ("base64", "media_type", "image", "images")),
           st.integers() | st.text(max_size=10), max_size=4))
def test_image_with_noise_around_is_always_found(before, after, extra):
    doc = dict(extra, base64=b64(png()))
    text = before + "\n" + json.dumps(doc) + "\n" + after
    found = extract_json_images(text)
    cleaned, images = found.text, found.images
    assert [i.data for i in images] == [png()]
    assert b64(png()) not in cleaned
    for key in extra:
        assert json.dumps(key, ensure_ascii=False) in cleaned


def test_deeply_nested_json_still_gives_its_images_and_never_their_base64():
    data = b64(png(size=(30, 20)))
    deep = "[" * 100_000 + "1" + "]" * 100_000
    printed = (f'{{"image": {{"base64": "{data.replace("/", chr(92) + "/")}"}}, '
               f'"thumb": "data:image/png;base64,{data}", "tree": {deep}}}')
    result = result_of(printed)
    images = [b for b in result.blocks if isinstance(b, ImageBlock)]
    assert [(i.width, i.height) for i in images] == [(30, 20), (30, 20)]
    assert data[:40] not in result.text and data[-40:] not in result.text
    assert "nested too deeply to read as a whole" in result.text
    assert not result.is_error
