"""The image store in an object store: the session's folder becomes a verified local cache.

    store = open_image_store(home, session, settings)   # [storage] images = "s3://..."
    ref = store.put(block)       # the folder and the object store (write-through)
    data = store.read(ref.ref)   # the folder, or fetched from the object store and checked

Made by ``silica.images.store.open_image_store`` when ``[storage] images`` names a store;
it keeps ``ImageStore``'s interface and promises, and adds:

- ``put`` writes the folder, then the object ``PREFIX/SESSION/SHA256.EXT``; an image the
  object store already holds is not sent again. A store that fails is ``StoreError`` (so a
  tool's image becomes an ``[image not kept: ...]`` notice, a person's upload a 507).
- ``read``, ``path`` and ``find`` fetch what the folder lacks (another machine stored it, or
  cleanup removed the copy) and check it: bytes whose sha256 is not their name are refused
  with ``StoreError`` and never cached, never handed on.
- ``count`` and ``used_bytes`` count the session's objects, not the folder's copies, so the
  session's budget holds on every machine (listed afresh for each ``put_message``).
- ``presigned_url`` gives a short-lived URL of the object (``[storage] image_urls =
  "presigned"``); the browser then fetches it from the store, unchecked by silica.
- ``delete_objects`` removes the session's objects (``silica_session_deleted``'s default
  plugin calls it when a session is deleted).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from silica.blocks import ImageRef
from silica.config import StoreSettings
from silica.fsutil import write_atomic
from silica.images.store import (
    _TEMP_PREFIX,
    EXTENSIONS,
    ImageStore,
    StoreError,
    check_id,
    find_image,
    image_file,
)
from silica.storage.objects import ObjectStore, ObjectStoreError, object_store

T = TypeVar("T")

_TYPES = {ext: media_type for media_type, ext in EXTENSIONS.items()}
_TYPES["img"] = "application/octet-stream"


def check_objects(url: str) -> None:
    """The object store of ``url`` answers for its bucket, else ``StoreError`` saying what
    to do (``silica.images.store.check_image_store``)."""
    _asked(object_store(url).check)


def media_type_of(name: str) -> str:
    """The media type an object's extension stands for (``application/octet-stream``)."""
    return _TYPES.get(name.rpartition(".")[2], "application/octet-stream")


class CachedImageStore(ImageStore):
    """An ``ImageStore`` whose folder is a cache in front of an object store (see the
    module docstring). Constructing one makes no request."""

    def __init__(self, root: Path, session: str, settings: StoreSettings | None = None, *,
                 url: str) -> None:
        super().__init__(root, session, settings)
        self.objects: ObjectStore = _asked(lambda: object_store(url))
        self._names: dict[str, int] | None = None  # the session's objects, listed once

    def __repr__(self) -> str:
        return f"CachedImageStore({str(self.root)!r}, {self.session!r}, {self.objects!r})"

    # -- what the session holds ---------------------------------------------------------

    def _listing(self) -> dict[str, int]:
        if self._names is None:
            self._names = self._list()
        return self._names

    def _list(self, start: str = "") -> dict[str, int]:
        """The session's objects silica could have written (an extension it uses)."""
        names = _asked(lambda: self.objects.names(self.session, start=start))
        return {n: size for n, size in names.items() if n.rpartition(".")[2] in _TYPES}

    def count(self) -> int:
        """How many images the object store holds for this session (asked each time)."""
        return len(self._list())

    def used_bytes(self) -> int:
        """Bytes of the session's objects (listed once, then kept up to date by ``put``)."""
        if self._used is None:
            self._used = sum(self._listing().values())
        return self._used

    def find(self, image_id: str) -> tuple[Path, str] | None:
        found = find_image(self.root, self.session, check_id(image_id))
        if found is not None:
            return found
        names = sorted(self._list(f"{image_id}."))
        if not names:
            return None
        media_type = media_type_of(names[0])
        return self._cached(image_file(self.root, self.session, image_id, media_type)), \
            media_type

    def presigned_url(self, image_id: str) -> str | None:
        names = sorted(self._list(f"{check_id(image_id)}."))
        if not names:
            return None
        name = names[0]
        return _asked(lambda: self.objects.presign(self.session, name,
                                                   content_type=media_type_of(name)))

    def delete_objects(self) -> int:
        """Remove every object of the session; how many there were."""
        self._names, self._used = None, None
        return _asked(lambda: self.objects.delete_session(self.session))

    # -- writing --------------------------------------------------------------------------

    def put_message(self, blocks: list, alt: str = "", *, keep_going: bool = False) -> list:
        """As ``ImageStore.put_message``, with the session's objects listed afresh when an
        image needs it: another machine may have added some since (a turn on a worker)."""
        self._names = self._used = None
        return super().put_message(blocks, alt, keep_going=keep_going)

    def _holds(self, target: Path, ref: ImageRef) -> bool:
        """Whether the object store holds ``ref`` already (objects are named by their
        sha256: a name listed with ``ref``'s size is its bytes)."""
        return self._listing().get(target.name) == ref.bytes

    def _write(self, target: Path, data: bytes) -> None:
        used = self.used_bytes()
        if not self._has_copy(target, len(data)):
            super()._write(target, data)  # the folder first: a disk error reads as today's
        media_type = media_type_of(target.name)
        _asked(lambda: self.objects.put(self.session, target.name, data, media_type))
        self._listing()[target.name] = len(data)
        self._used = used + len(data)

    # -- reading --------------------------------------------------------------------------

    def path(self, ref: ImageRef) -> Path:
        """Where ``ref``'s bytes are in the folder, fetched from the object store first when
        the folder lacks them (``StoreError`` if they were changed there, or the store
        fails); a ref the store does not hold either gives a path that does not exist."""
        target = self._file(ref)
        if target.is_file() or target.is_symlink():
            return target
        try:
            return self._cached(target)
        except _Missing:
            return target

    def read(self, ref: ImageRef) -> bytes:
        target = self._file(ref)
        if target.is_file() or target.is_symlink():
            return super().read(ref)  # checked against its name there
        return self._fetch(target)

    def _cached(self, target: Path) -> Path:
        """``target``, fetched and checked into the folder."""
        self._fetch(target)
        if not target.is_file():
            raise StoreError(f"cannot keep a copy of image {target.stem[:12]} in "
                             f"{self.folder}; check the disk and its permissions")
        return target

    def _fetch(self, target: Path) -> bytes:
        """The bytes of ``target``'s object, checked against its name and written to the
        folder (when the disk allows); ``StoreError`` otherwise."""
        image_id = target.stem
        data = _asked(lambda: self.objects.get(self.session, target.name,
                                               max_bytes=self.settings.max_image_bytes))
        if data is None:
            raise _Missing(f"image {image_id[:12]} is in neither {self.folder} nor the object "
                           f"store ({self.objects.where}, {self.objects.location.url}); it "
                           "cannot be sent again")
        if hashlib.sha256(data).hexdigest() != image_id:
            raise StoreError(f"image {image_id[:12]} in the object store "
                             f"({self.objects.where}) was changed after it was stored (its "
                             "sha256 no longer matches its name); it will not be used")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_atomic(target, data, prefix=_TEMP_PREFIX)
        except OSError:
            pass  # the copy is a cache: the checked bytes are still the answer
        return data

    def _has_copy(self, target: Path, size: int) -> bool:
        try:
            return not target.is_symlink() and target.stat().st_size == size and \
                hashlib.sha256(target.read_bytes()).hexdigest() == target.stem
        except OSError:
            return False


class _Missing(StoreError):
    """The object store has no such object (``path`` answers with a path that does not
    exist, as the folder's store does; ``read`` raises it)."""


def _asked(call: Callable[[], T]) -> T:
    """``call()``, the object store's errors as the image store's."""
    try:
        return call()
    except ObjectStoreError as exc:
        raise StoreError(str(exc)) from None
