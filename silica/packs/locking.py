"""One ``silica packs`` command at a time: an exclusive ``flock`` on a file in the packs folder.

Every command that reads or changes installed packs holds the lock from start to end, so
two commands never read the lock file, each add their pack, and write it back over the
other's. The kernel drops the lock when its process ends, even by ``kill -9``: a crashed
command never blocks the next one. Within one process the lock is re-entrant per thread.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from silica import locks

FLOCK_NAME = ".silica-packs.flock"

_thread_lock = threading.RLock()  # threads of one process take turns, as processes do
_depth: dict[Path, int] = {}  # packs folder -> how deeply this process holds its lock


@contextlib.contextmanager
def exclusive(packs: Path, *, create: bool = True,
              waiting: Callable[[], None] | None = None) -> Iterator[bool]:
    """Hold the lock of the packs folder ``packs`` for the ``with`` block.

    Yields True if this call took the lock: the caller is the outermost holder, and no
    other command is running. Yields False if this thread already holds it (an outer call
    does), or, without ``create``, if there is no folder or this user may not write in it
    (then nothing is held, and there is nothing to recover). With ``create`` the folder is
    made if need be; if this call made it and the block fails, the folder is taken away
    again (only if nothing but the lock file is in it). ``waiting`` is called once if
    another command holds the lock. Raises ``OSError`` if the folder or lock file cannot
    be made.
    """
    with _thread_lock:
        if _depth.get(packs):
            _depth[packs] += 1
            try:
                yield False
            finally:
                _depth[packs] -= 1
            return
        # The outermost folder this call makes (the silica home too, on a first run).
        made = next((f for f in reversed([packs, *packs.parents]) if not f.exists()), None) \
            if create else None
        if create:
            packs.mkdir(parents=True, exist_ok=True)
        fd = _acquire(packs, create, waiting)
        if fd is None:
            yield False
            return
        _depth[packs] = 1
        try:
            yield True
        except BaseException:
            if made:
                _remove_if_empty(packs, made)
            raise
        finally:
            del _depth[packs]
            os.close(fd)  # releases the flock


def _acquire(packs: Path, create: bool, waiting: Callable[[], None] | None) -> int | None:
    while True:
        try:
            return locks.acquire(packs / FLOCK_NAME, mode=0o644, waiting=waiting)
        except FileNotFoundError:
            if not create:
                return None
            packs.mkdir(parents=True, exist_ok=True)  # a failed first install took it away
        except OSError as exc:
            if not create and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                return None  # a folder this user may only read: nobody here can change it
            raise


def _remove_if_empty(packs: Path, made: Path) -> None:
    """Take away a packs folder this command made (and its parents up to ``made``), if it
    holds only the lock file."""
    with contextlib.suppress(OSError):
        if os.listdir(packs) == [FLOCK_NAME]:
            os.unlink(packs / FLOCK_NAME)  # still locked: a waiter sees it gone and retries
            for folder in [packs, *packs.parents]:
                os.rmdir(folder)  # only if empty: never anything another command made
                if folder == made:
                    break
