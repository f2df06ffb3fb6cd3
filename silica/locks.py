"""Exclusive ``flock`` locks on files: one helper for every lock silica takes (a session's
turn, the packs folder, the trust list).

``acquire(path)`` opens (creating) the lock file and locks it; if the holder it waited for
removed the file meanwhile, the file now at ``path`` is locked instead, so two holders never
lock two different files of one name. Closing the descriptor releases the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path


def acquire(path: Path, *, mode: int = 0o600, wait: bool = True,
            waiting: Callable[[], None] | None = None,
            pauses: Sequence[float] = ()) -> int | None:
    """The descriptor of ``path`` (made with ``mode`` if missing), locked exclusively.

    With ``wait`` it blocks while another holds the lock, calling ``waiting`` once first.
    Without it, a refusal is tried again after each of ``pauses`` (seconds), then ``None``
    is returned. ``OSError`` if the file cannot be opened or locked at all."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
        try:
            if not _lock(fd, wait, waiting, pauses):
                os.close(fd)
                return None
            waiting = None  # said once, however often the file was replaced
            if same_file(fd, path):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # locked a file that was removed meanwhile: lock the one there now


def wait_for(path: Path, *, mode: int = 0o600) -> int:
    """``acquire(path)``, waiting as long as another holds it."""
    fd = acquire(path, mode=mode)
    assert fd is not None  # waiting: never refused
    return fd


def release(fd: int) -> None:
    """Unlock and close ``fd``."""
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def is_locked(path: Path) -> bool:
    """Whether another descriptor holds ``path``'s lock now. Creates nothing: a missing file
    is not locked."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops the probe's lock
    return False


def same_file(fd: int, path: Path) -> bool:
    """Whether ``fd`` is the file at ``path`` now."""
    try:
        mine, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)


def _lock(fd: int, wait: bool, waiting: Callable[[], None] | None,
          pauses: Sequence[float]) -> bool:
    for pause in (*pauses, None):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if pause is not None:
                time.sleep(pause)
    if not wait:
        return False
    if waiting:
        waiting()
    fcntl.flock(fd, fcntl.LOCK_EX)
    return True
