"""ImageStore: images on disk by content hash, one folder per session, checked on read."""

from __future__ import annotations

import hashlib
import io
import os
import time
from pathlib import Path

import pytest
from PIL import Image

from silica.blocks import ImageBlock, ImageRef, ImageRefBlock, TextBlock
from silica.config import StoreSettings
from silica.images.store import ImageStore, StoreError, cleanup, default_root


def png(width: int = 64, height: int = 48, colour: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    img = Image.new("RGB", (width, height), colour)
    img.putpixel((0, 0), (colour[0] ^ 255, 0, 0))  # not flat: PNG bytes differ per colour
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def block(width: int = 64, height: int = 48, colour=(200, 30, 30), sized: bool = True):
    return ImageBlock(media_type="image/png", data=png(width, height, colour),
                      width=width if sized else None, height=height if sized else None,
                      source="test")


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_same_image_twice_is_one_file_and_the_same_ref(tmp_path):
    store = ImageStore(tmp_path, "s1")
    first = store.put(block(), alt="screenshot")
    second = store.put(block(), alt="screenshot")
    assert isinstance(first, ImageRefBlock)
    assert first == second
    files = list((tmp_path / "s1").iterdir())
    assert [f.name for f in files] == [f"{first.ref.id}.png"]
    assert first.ref.id == hashlib.sha256(files[0].read_bytes()).hexdigest()


def test_ref_carries_size_bytes_and_type(tmp_path):
    store = ImageStore(tmp_path, "s1")
    img = block(320, 200)
    ref = store.put(img).ref
    assert (ref.width, ref.height, ref.bytes, ref.media_type) == (320, 200, len(img.data),
                                                                   "image/png")
    assert store.read(ref) == img.data
    assert store.path(ref) == tmp_path / "s1" / f"{ref.id}.png"


def test_alt_defaults_to_where_the_image_came_from(tmp_path):
    store = ImageStore(tmp_path, "s1")
    assert store.put(block()).alt == "test"
    assert store.put(block(), alt="screenshot tool").alt == "screenshot tool"


def test_size_is_read_from_the_bytes_when_the_block_has_none(tmp_path):
    ref = ImageStore(tmp_path, "s1").put(block(123, 45, sized=False)).ref
    assert (ref.width, ref.height) == (123, 45)


def test_jpeg_gets_its_own_extension(tmp_path):
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), (1, 2, 3)).save(buf, "JPEG")
    store = ImageStore(tmp_path, "s1")
    ref = store.put(ImageBlock(media_type="image/jpeg", data=buf.getvalue(), width=40,
                               height=30)).ref
    assert store.path(ref).name.endswith(".jpg")


def test_writes_leave_no_temporary_files(tmp_path):
    store = ImageStore(tmp_path, "s1")
    for i in range(5):
        store.put(block(colour=(i * 40, 10, 10)))
    names = [p.name for p in (tmp_path / "s1").iterdir()]
    assert len(names) == 5
    assert all(not n.startswith(".") and n.endswith(".png") for n in names)


def test_constructing_a_store_creates_nothing(tmp_path):
    ImageStore(tmp_path / "images", "s1")
    assert not (tmp_path / "images").exists()


def test_default_root_is_under_silica_home(home):
    assert default_root() == home / "images"


@pytest.mark.parametrize("name", ["../x", "a/b", "/etc", "", "a" * 65, "a\x00b", "..", ".",
                                  "-lead", "a b", "a\\b", "ü"])
def test_hostile_session_names_are_refused(tmp_path, name):
    sandbox = tmp_path / "sandbox"
    root = sandbox / "root"
    root.mkdir(parents=True)
    with pytest.raises(StoreError, match="invalid session name"):
        ImageStore(root, name)
    assert tree(sandbox) == ["root"]


def test_a_64_character_session_name_is_fine(tmp_path):
    assert isinstance(ImageStore(tmp_path, "a" * 64).put(block()), ImageRefBlock)


@pytest.mark.parametrize("bad_id", ["../" + "a" * 61, "A" * 64, "a" * 63, "a" * 65,
                                    "/" + "a" * 63, "a" * 63 + "\x00"])
def test_hostile_ids_are_refused(tmp_path, bad_id):
    store = ImageStore(tmp_path / "root", "s1")
    ref = ImageRef.model_construct(id=bad_id, media_type="image/png", bytes=1, width=1,
                                   height=1)  # skips validation, as a hostile caller could
    with pytest.raises(StoreError, match="invalid image id"):
        store.read(ref)
    with pytest.raises(StoreError, match="invalid image id"):
        store.path(ref)
    assert not (tmp_path / "root").exists()


def test_a_changed_file_is_detected(tmp_path):
    store = ImageStore(tmp_path, "s1")
    ref = store.put(block()).ref
    path = store.path(ref)
    path.write_bytes(path.read_bytes()[:-1] + b"\x00")
    with pytest.raises(StoreError, match="was changed"):
        store.read(ref)


def test_a_missing_file_says_so(tmp_path):
    store = ImageStore(tmp_path, "s1")
    ref = store.put(block()).ref
    store.path(ref).unlink()
    with pytest.raises(StoreError, match="is missing"):
        store.read(ref)


def test_putting_again_repairs_a_changed_file(tmp_path):
    store = ImageStore(tmp_path, "s1")
    img = block()
    ref = store.put(img).ref
    store.path(ref).write_bytes(b"garbage")
    assert store.put(img).ref == ref
    assert store.read(ref) == img.data


def test_an_image_over_the_per_image_limit_becomes_a_notice(tmp_path):
    img = block(200, 200)
    store = ImageStore(tmp_path, "s1", StoreSettings(max_image_bytes=len(img.data) - 1))
    out = store.put(img, alt="plot")
    assert isinstance(out, TextBlock)
    assert out.text.startswith("[image not kept:")
    assert "store.max_image_bytes" in out.text and "plot" in out.text
    assert not (tmp_path / "s1").exists()


def test_the_session_limit_keeps_what_fits_and_refuses_the_rest(tmp_path):
    a, b, c = (block(colour=(i * 70, 0, 0)) for i in range(3))
    budget = len(a.data) + len(b.data)
    store = ImageStore(tmp_path, "s1", StoreSettings(max_session_bytes=budget))
    assert isinstance(store.put(a), ImageRefBlock)
    assert isinstance(store.put(b), ImageRefBlock)
    refused = store.put(c)
    assert isinstance(refused, TextBlock)
    assert refused.text.startswith("[image not kept:") and "max_session_bytes" in refused.text
    assert isinstance(store.put(a), ImageRefBlock)  # already kept: costs nothing
    # a new store on the same folder counts what is already there
    again = ImageStore(tmp_path, "s1", StoreSettings(max_session_bytes=budget))
    assert again.used_bytes() == budget
    assert isinstance(again.put(c), TextBlock)


def test_put_message_keeps_text_and_limits_images(tmp_path):
    store = ImageStore(tmp_path, "s1", StoreSettings(max_images_per_message=2))
    blocks = [TextBlock(text="before"), *(block(colour=(i * 50, 0, 0)) for i in range(5)),
              TextBlock(text="after")]
    out = store.put_message(blocks, alt="tool x")
    assert [type(b).__name__ for b in out] == ["TextBlock", "ImageRefBlock", "ImageRefBlock",
                                              "TextBlock", "TextBlock"]
    assert out[0].text == "before" and out[-1].text == "after"
    assert out[3].text.startswith("[image not kept: 3 more images")
    assert "max_images_per_message" in out[3].text
    assert all(b.alt == "tool x" for b in out[1:3])
    assert len(list((tmp_path / "s1").iterdir())) == 2


def test_cleanup_removes_only_old_sessions(tmp_path):
    root = tmp_path / "images"
    for name in ("old", "new"):
        ImageStore(root, name).put(block())
    now = time.time()
    old_time = now - 40 * 86_400
    for p in [root / "old", *(root / "old").iterdir()]:
        os.utime(p, (old_time, old_time))
    assert cleanup(root, keep_days=30, now=now) == 1
    assert sorted(p.name for p in root.iterdir()) == ["new"]
    assert cleanup(root, keep_days=30, now=now) == 0


def test_cleanup_keeps_a_folder_with_one_recent_file(tmp_path):
    root = tmp_path / "images"
    store = ImageStore(root, "mixed")
    store.put(block(colour=(1, 0, 0)))
    old_time = time.time() - 90 * 86_400
    for p in [root / "mixed", *(root / "mixed").iterdir()]:
        os.utime(p, (old_time, old_time))
    store.put(block(colour=(2, 0, 0)))  # a fresh image: the session is in use
    os.utime(root / "mixed", (old_time, old_time))
    assert cleanup(root, keep_days=30) == 0


def test_cleanup_never_follows_symlinks(tmp_path):
    root = tmp_path / "images"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.png").write_bytes(b"keep me")
    old_time = time.time() - 400 * 86_400
    os.utime(outside / "precious.png", (old_time, old_time))
    os.utime(outside, (old_time, old_time))
    (root / "linked").symlink_to(outside, target_is_directory=True)
    session = root / "session"
    session.mkdir()
    (session / "link.png").symlink_to(outside / "precious.png")
    os.utime(session / "link.png", (old_time, old_time), follow_symlinks=False)
    os.utime(session, (old_time, old_time))
    assert cleanup(root, keep_days=1) == 1
    assert (outside / "precious.png").read_bytes() == b"keep me"
    assert (root / "linked").is_symlink()
    assert not session.exists()


def test_cleanup_of_a_missing_root_is_nothing(tmp_path):
    assert cleanup(tmp_path / "nope", keep_days=1) == 0


# -- a disk that fails --------------------------------------------------------------------


def test_a_disk_failure_raises_unless_the_message_keeps_going(tmp_path, monkeypatch):
    import errno

    import silica.images.store as store_module

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_module, "write_atomic", full)
    store = ImageStore(tmp_path, "s1")
    with pytest.raises(StoreError, match="No space left on device"):
        store.put_message([block()], alt="chart")
    text, notice = store.put_message([TextBlock(text="a chart"), block()], alt="chart",
                                     keep_going=True)
    assert text.text == "a chart"
    assert notice.text.startswith("[image not kept:")
    assert "could not be written" in notice.text and "No space left on device" in notice.text


def test_a_session_folder_that_is_a_file_becomes_a_notice(tmp_path):
    (tmp_path / "s1").write_text("in the way")
    [notice] = ImageStore(tmp_path, "s1").put_message([block()], keep_going=True)
    assert notice.text.startswith("[image not kept:") and "is a file" in notice.text


def test_a_root_that_is_a_file_says_what_to_do(tmp_path):
    from silica.images.store import check_root

    root = tmp_path / "images"
    root.write_text("not a folder")
    for call in (lambda: check_root(root), lambda: cleanup(root, 30),
                 lambda: ImageStore(root, "s1").put(block())):
        with pytest.raises(StoreError, match="is a file, not a folder.*[Mm]ove"):
            call()
    assert check_root(tmp_path / "missing") == tmp_path / "missing"
