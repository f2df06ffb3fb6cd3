"""The on-disk image store: what lets a conversation hold refs instead of image bytes.

Layout: ``<root>/<session>/<sha256>.<ext>``, where ``root`` is normally
``silica_home() / "images"`` (``default_root()``). Files are content-addressed, so the same
image is stored once per session, and a file's name is its checksum: ``read`` verifies it.

What callers may rely on:

- No path built here comes from anything but a validated session name
  (``^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$``), a validated id (64 lowercase hex digits) and a fixed
  extension table; anything else raises ``StoreError`` before the filesystem is touched.
- Writes are atomic (a temporary file in the same folder, then ``os.replace``): a reader sees
  a whole image or none, and no temporary file is left behind.
- ``put`` never raises for an image it will not keep: it returns a ``TextBlock`` notice that
  starts ``[image not kept:`` and says why (``StoreSettings`` limits). It raises
  ``StoreError`` only when the disk itself fails; ``put_message(..., keep_going=True)`` turns
  that into a notice too, so a result is never lost for want of disk.
- A ``root`` that exists but is not a folder is a ``StoreError`` saying to move it away
  (``check_root``, and ``cleanup``), never a traceback.
- ``read`` returns the exact bytes that were put, or raises ``StoreError`` saying the file is
  missing or was changed.

Pillow is imported only when an ``ImageBlock`` comes without its size.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import time
from datetime import datetime
from pathlib import Path

from silica.blocks import ImageBlock, ImageRef, ImageRefBlock, TextBlock
from silica.config import Settings, StoreSettings
from silica.errors import SilicaError
from silica.fsutil import write_atomic
from silica.paths import silica_home

SESSION_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
ID_PATTERN = re.compile(r"^[0-9a-f]{64}$")

EXTENSIONS = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/gif": "gif",
    "image/webp": "webp",
    "image/bmp": "bmp",
    "image/tiff": "tiff",
}
"""File extension per media type; any other type is stored as ``.img``."""

_TEMP_PREFIX = ".tmp-"
_MB = 1024 * 1024


class StoreError(SilicaError):
    """The image store cannot do what was asked; the message says what and what to do."""


def default_root() -> Path:
    """``$SILICA_HOME/images``: where sessions' image folders live."""
    return silica_home() / "images"


def check_root(root: Path) -> Path:
    """``root`` if it is a folder or does not exist yet, else ``StoreError`` saying what to do."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise StoreError(
            f"{root} is a file, not a folder: silica keeps each session's images in it. Move "
            "that file away (or remove it) and run the command again")
    return root


def check_session(session: str) -> str:
    """``session`` if it is a safe folder name, else ``StoreError``."""
    if not isinstance(session, str) or not SESSION_PATTERN.fullmatch(session):
        raise StoreError(
            f"invalid session name {session!r}: use 1-64 letters, digits, '_' or '-', "
            "starting with a letter or digit"
        )
    return session


def check_id(image_id: str) -> str:
    """``image_id`` if it is a sha256 in lowercase hex, else ``StoreError``."""
    if not isinstance(image_id, str) or not ID_PATTERN.fullmatch(image_id):
        raise StoreError(f"invalid image id {image_id!r}: expected 64 lowercase hex digits")
    return image_id


def extension(media_type: str) -> str:
    """The file extension used for ``media_type`` (``img`` for types not in ``EXTENSIONS``)."""
    return EXTENSIONS.get(media_type, "img")


STORED_TYPES = (*EXTENSIONS, "application/octet-stream")
"""The media types a stored file may have, one per extension (``img``: any other type)."""


def image_file(root: Path, session: str, image_id: str, media_type: str) -> Path:
    """The store's one layout: ``<root>/<session>/<sha256>.<ext>`` (``StoreError`` for a
    session or id that is not one); whether or not the file exists."""
    return (Path(root) / check_session(session)
            / f"{check_id(image_id)}.{extension(media_type)}")


def find_image(root: Path, session: str, image_id: str) -> tuple[Path, str] | None:
    """The stored file of ``image_id`` in ``session`` and its media type, or None (a link or
    a folder in its place is not an image)."""
    for media_type in STORED_TYPES:
        path = image_file(root, session, image_id, media_type)
        if path.is_file() and not path.is_symlink():
            return path, media_type
    return None


def image_files(root: Path, session: str) -> list[Path]:
    """The image files ``session`` holds (none if its folder is missing or unreadable)."""
    try:
        return [p for p in (Path(root) / check_session(session)).iterdir()
                if not p.name.startswith(".") and p.is_file() and not p.is_symlink()]
    except OSError:  # no folder yet, or one that cannot be read: nothing counted
        return []


class ImageStore:
    """Images of one session, kept on disk by content hash.

    ``ImageStore(default_root(), conversation.id, settings.store)``. The session folder is
    created on the first ``put``; constructing a store touches nothing on disk.
    """

    def __init__(self, root: Path, session: str, settings: StoreSettings | None = None):
        self.root = Path(root)
        self.session = check_session(session)
        self.settings = settings or StoreSettings()
        self.folder = self.root / self.session
        self._used: int | None = None  # bytes in the folder, counted on first need

    def __repr__(self) -> str:
        return f"ImageStore({str(self.root)!r}, {self.session!r})"

    # -- paths ----------------------------------------------------------------------------

    def path(self, ref: ImageRef) -> Path:
        """Where ``ref``'s bytes live (whether or not the file exists)."""
        return self._file(ref)

    def _file(self, ref: ImageRef) -> Path:
        return image_file(self.root, self.session, ref.id, ref.media_type)

    def find(self, image_id: str) -> tuple[Path, str] | None:
        """The file holding ``image_id`` and its media type, or None when the session has
        no such image (``StoreError`` for an id that is not a sha256)."""
        return find_image(self.root, self.session, check_id(image_id))

    def count(self) -> int:
        """How many images this session holds."""
        return len(self._image_files())

    def used_bytes(self) -> int:
        """Bytes of images this session holds on disk."""
        if self._used is None:
            self._used = sum(p.stat().st_size for p in self._image_files())
        return self._used

    def _image_files(self) -> list[Path]:
        return image_files(self.root, self.session)

    def presigned_url(self, image_id: str) -> str | None:
        """A URL of the object store that serves ``image_id`` for a few minutes, or None
        (a folder has none; the image is served from ``find``'s file)."""
        return None

    # -- writing --------------------------------------------------------------------------

    def put(self, block: ImageBlock, alt: str = "") -> ImageRefBlock | TextBlock:
        """Keep ``block``'s bytes; an ``ImageRefBlock`` for it, or a ``[image not kept:``
        notice when a ``StoreSettings`` limit forbids it. ``alt`` defaults to
        ``block.source``. Putting the same bytes again costs no space and gives an equal
        ref."""
        alt = alt or block.source
        data = bytes(block.data)
        limit = self.settings.max_image_bytes
        if len(data) > limit:
            return _not_kept(f"{_describe(block, alt)} is {_size(len(data))}, over the limit of "
                             f"{_size(limit)} per image (store.max_image_bytes)")
        size: tuple[int, int] | None = None
        if block.width and block.height and block.width > 0 and block.height > 0:
            size = (block.width, block.height)
        else:
            size = _measure(data)
            if size is None:
                return _not_kept(f"{_describe(block, alt)} could not be read to find its size")
        ref = ImageRef(id=hashlib.sha256(data).hexdigest(), media_type=block.media_type,
                       bytes=len(data), width=size[0], height=size[1])
        target = self._file(ref)
        if not self._holds(target, ref):
            budget = self.settings.max_session_bytes
            used = self.used_bytes()
            if used + len(data) > budget:
                return _not_kept(
                    f"{_describe(block, alt)} of {_size(len(data))} would take this session "
                    f"past {_size(budget)} of images (store.max_session_bytes; "
                    f"{_size(used)} used); start a new session or raise the limit")
            self._write(target, data)
        return ImageRefBlock(ref=ref, alt=alt)

    def put_message(self, blocks: list, alt: str = "", *, keep_going: bool = False) -> list:
        """``blocks`` with each ``ImageBlock`` put into the store (other blocks as they are);
        ``alt`` as for ``put``.

        Images past ``store.max_images_per_message`` (counting refs already in ``blocks``)
        are replaced, where the first of them was, by one ``[image not kept:`` notice. With
        ``keep_going``, an image the disk refuses (full, read-only, not a folder) becomes an
        ``[image not kept:`` notice saying why instead of raising ``StoreError``.
        """
        limit = self.settings.max_images_per_message
        out: list = []
        images = dropped = 0
        notice_at: int | None = None
        for block in blocks:
            if not isinstance(block, ImageBlock | ImageRefBlock):
                out.append(block)
                continue
            images += 1
            if images > limit:
                dropped += 1
                if notice_at is None:
                    notice_at = len(out)
                    out.append(None)  # placeholder for the notice
                continue
            if not isinstance(block, ImageBlock):
                out.append(block)
                continue
            try:
                out.append(self.put(block, alt))
            except (StoreError, OSError) as exc:
                if not keep_going:
                    raise
                out.append(_not_kept(f"{_describe(block, alt or block.source)} could not be "
                                     f"written to the image store: {exc}"))
        if notice_at is not None:
            what = "image was" if dropped == 1 else "images were"
            out[notice_at] = _not_kept(
                f"{dropped} more {what} left out: a message keeps at most {limit} images "
                "(store.max_images_per_message)")
        return out

    def _holds(self, target: Path, ref: ImageRef) -> bool:
        """Whether ``target`` already holds exactly ``ref``'s bytes."""
        try:
            if target.is_symlink() or target.stat().st_size != ref.bytes:
                return False
            return hashlib.sha256(target.read_bytes()).hexdigest() == ref.id
        except OSError:
            return False

    def _write(self, target: Path, data: bytes) -> None:
        used = self.used_bytes()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            replaced = target.is_file() and not target.is_symlink()
            previous = target.stat().st_size if replaced else 0  # a changed copy, rewritten
            write_atomic(target, data, prefix=_TEMP_PREFIX)
        except OSError as exc:
            check_root(self.root)  # a root that is a file says so, with what to do
            if self.folder.exists() and not self.folder.is_dir():
                raise StoreError(f"cannot write image to {target}: {self.folder} is a file, "
                                 "not a folder; move it away") from exc
            raise StoreError(f"cannot write image to {target}: {exc}; check the disk and the "
                             f"permissions of {self.folder}") from exc
        self._used = used - previous + len(data)

    # -- reading --------------------------------------------------------------------------

    def read(self, ref: ImageRef) -> bytes:
        """The bytes ``ref`` names, checked against its sha256; ``StoreError`` if the file is
        missing or was changed."""
        target = self._file(ref)
        try:
            if target.is_symlink():
                raise StoreError(f"image file {target} is a symlink, which the store never "
                                 "writes; it was not read")
            data = target.read_bytes()
        except FileNotFoundError:
            raise StoreError(
                f"image {ref.id[:12]} is missing from {self.folder} (it may have been removed "
                "by cleanup after store.keep_days); it cannot be sent again") from None
        except OSError as exc:
            raise StoreError(f"cannot read image file {target}: {exc}") from exc
        if hashlib.sha256(data).hexdigest() != ref.id:
            raise StoreError(f"image file {target} was changed after it was stored (its sha256 "
                             "no longer matches its name); it will not be sent")
        return data


def cleanup(root: Path, keep_days: int, now: float | datetime | None = None) -> int:
    """Remove session folders under ``root`` whose newest file is older than ``keep_days``.

    ``now`` is a timestamp or an aware datetime (default: the current time). Only folders
    with a valid session name are considered; symlinks are neither followed nor removed, and
    nothing outside ``root`` is touched. Returns how many folders were removed. A ``root``
    that is a file raises ``StoreError`` (see ``check_root``); one that cannot be read is
    left for next time.
    """
    if isinstance(now, datetime):
        now = now.timestamp()
    cutoff = (time.time() if now is None else now) - keep_days * 86_400
    root = Path(root)
    removed = 0
    try:
        entries = list(os.scandir(check_root(root)))
    except FileNotFoundError:
        return 0
    except OSError:  # unreadable: cleaning up is never worth failing a command for
        return 0
    for entry in entries:
        if not SESSION_PATTERN.fullmatch(entry.name) or not entry.is_dir(follow_symlinks=False):
            continue
        if _newest(Path(entry.path)) >= cutoff:
            continue
        try:
            shutil.rmtree(entry.path)  # removes links inside, never what they point to
            removed += 1
        except OSError:
            continue  # in use or not ours to remove: try again next time
    return removed


def _newest(folder: Path) -> float:
    """The newest modification time of ``folder`` and the files in it (links not followed)."""
    newest = folder.lstat().st_mtime
    try:
        for entry in os.scandir(folder):
            newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
    except OSError:
        pass
    return newest


def _measure(data: bytes) -> tuple[int, int] | None:
    """Width and height from the image header, or ``None`` if Pillow cannot read it."""
    from PIL import Image  # only here: the store itself needs no Pillow

    try:
        with Image.open(io.BytesIO(data)) as img:
            return img.size
    except Exception:
        return None


def _describe(block: ImageBlock, alt: str) -> str:
    what = f"{block.media_type} image"
    if block.width and block.height:
        what += f" {block.width}x{block.height}"
    return f"{what} ({alt})" if alt else what


def _size(n: int) -> str:
    return f"{n / _MB:.1f} MB" if n >= _MB / 10 else f"{n:,} bytes"


def _not_kept(reason: str) -> TextBlock:
    return TextBlock(text=f"[image not kept: {reason}]")


def open_image_store(home: Path, session: str, settings: Settings) -> ImageStore:
    """The image store of ``session`` under silica home ``home``: the folder
    ``home/images/<session>``, or, with ``[storage] images`` set, that folder as a verified
    cache in front of the object store (``silica.images.cached``). Makes no request and
    touches nothing on disk; ``StoreError`` for a bad session name or a root that is a file."""
    root = check_root(Path(home) / "images")
    if settings.storage.images:
        from silica.images.cached import CachedImageStore

        return CachedImageStore(root, session, settings.store, url=settings.storage.images)
    return ImageStore(root, session, settings.store)


def check_image_store(settings: Settings) -> None:
    """With ``[storage] images`` set, one cheap request to the object store (``serve``,
    ``ask`` and ``chat`` make it at start): ``StoreError`` saying what to do when the bucket
    is missing, the credentials are refused or the store cannot be reached."""
    if settings.storage.images:
        from silica.images.cached import check_objects

        check_objects(settings.storage.images)
