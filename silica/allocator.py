"""The C allocator, tuned so that a long-running process gives back what a turn freed.

    tune_allocator()     # once, before the first turn's large buffers
    release_memory()     # after each turn

glibc only (``mallopt``, ``malloc_trim``); with another C library both do nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import cast

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 128 * 1024  # glibc's starting value: blocks this large get pages of their own


def release_memory() -> None:
    """Hand the memory a turn freed back to the system (glibc's ``malloc_trim``; elsewhere
    nothing). A turn's request bodies, decoded images and fits are transient; without this
    the allocator keeps each new high-water mark of every thread's heap, and a long chat's
    resident size grows turn after turn though what it holds does not."""
    trim = _tuned()
    if trim is not None:
        trim(0)


@functools.cache
def _tuned() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, once the mmap threshold is fixed at ``MMAP_THRESHOLD`` (None:
    not glibc). Left alone, glibc raises the threshold to the size of each large block freed
    (up to 32 MiB), so a turn's megabyte buffers land in the heaps and stay there; fixed,
    each gets pages of its own that go back to the system when it is freed."""
    import ctypes

    try:  # the C library the interpreter is linked with
        libc = ctypes.CDLL(None)
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        return cast(Callable[[int], int], libc.malloc_trim)
    except (OSError, AttributeError):  # not glibc
        return None


def tune_allocator() -> None:
    """Fix glibc's mmap threshold (see ``_tuned``); later calls do nothing."""
    _tuned()

