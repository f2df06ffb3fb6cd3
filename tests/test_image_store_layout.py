"""The image store's layout has one definition (``silica.images.store.image_file``): what
the store writes is what serve finds and counts."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from silica.blocks import ImageBlock, ImageRefBlock
from silica.images.store import ImageStore, find_image, image_file, image_files
from silica.serve.history import count_images


def picture(fmt: str, color: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 6), color).save(buf, format=fmt)
    return buf.getvalue()


@pytest.mark.parametrize(("fmt", "mime"), [("PNG", "image/png"), ("JPEG", "image/jpeg"),
                                           ("WEBP", "image/webp")])
def test_what_the_store_writes_is_what_serve_finds(tmp_path, fmt, mime):
    store = ImageStore(tmp_path / "images", "s1")
    kept = store.put(ImageBlock(data=picture(fmt, (10, 20, 30)), media_type=mime,
                                width=8, height=6, source="x"))
    assert isinstance(kept, ImageRefBlock)
    path = image_file(tmp_path / "images", "s1", kept.ref.id, mime)
    assert path == store.path(kept.ref) and path.is_file()
    assert find_image(tmp_path / "images", "s1", kept.ref.id) == (path, mime)
    assert image_files(tmp_path / "images", "s1") == [path]
    assert count_images(tmp_path, "s1") == 1


def test_a_link_in_the_store_is_neither_found_nor_counted(tmp_path):
    folder = tmp_path / "images" / "s2"
    folder.mkdir(parents=True)
    outside = tmp_path / "secret.png"
    outside.write_bytes(picture("PNG", (1, 2, 3)))
    (folder / f"{'a' * 64}.png").symlink_to(outside)
    assert find_image(tmp_path / "images", "s2", "a" * 64) is None
    assert count_images(tmp_path, "s2") == 0
    assert count_images(tmp_path, "../s2") == 0  # not a session name: none
