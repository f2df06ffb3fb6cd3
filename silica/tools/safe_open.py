"""Open a regular file beneath a set of folders (roots), with no window between check and open.

A path is never resolved to a string and then opened: that leaves a window in which a folder
can be swapped for a symlink. Instead the path is opened starting from a root's descriptor,
with ``openat2(RESOLVE_BENEATH)`` where the kernel has it, and otherwise one component at a
time (``O_NOFOLLOW``, ``O_DIRECTORY`` for folders), each open relative to the descriptor of
the folder before it. Symlinks are resolved here, component by component: a relative one
continues from the folder holding it, and ``..`` goes back to the folder descriptor it came
from, so it can never climb above the root. A symlink (or a ``..``) that leaves its root is
followed only into another root; anything else is refused with ``OutsideRoots``.

A path (the caller's, an absolute symlink target, or where a ``..`` above a root leads)
starts at the root its text begins with and is walked from there as written, ``..``
physically as the kernel does; a missing name followed by ``..`` cancels out, as with
``os.path.realpath``. Only a path that begins in no root (``/tmp/x`` where ``/tmp`` is a
symlink, a symlink to another root) is resolved with ``realpath`` to find the root it leads
into; that text only chooses where the walk starts, so a race on it cannot open anything
outside a root. Roots themselves are trusted: they are opened by their own (real) paths.

On Linux the file itself is first opened with ``O_PATH``, which never runs a device's or a
FIFO's open, checked with ``fstat`` to be a regular file, and only then reopened for reading
through ``/proc/self/fd``. Elsewhere (or without ``/proc``) it is opened ``O_NONBLOCK`` and
checked with ``fstat`` on that descriptor.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from collections import deque
from collections.abc import Callable, Sequence

MAX_LINKS = 40  # symlinks followed in one open, as the kernel's limit

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_PATH = getattr(os, "O_PATH", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
# O_NONBLOCK: a FIFO or a device opened for reading can never block the caller.
_READ = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | _CLOEXEC
_ROOT = (_O_PATH or os.O_RDONLY) | _DIRECTORY | _CLOEXEC
_DIR = _ROOT | _NOFOLLOW
_LINKISH = {errno.ELOOP, errno.EMLINK, errno.ENOTDIR}  # what O_NOFOLLOW says about a symlink

_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = 437  # the same number on every architecture listed below
_OPENAT2_MACHINES = {"x86_64", "amd64", "aarch64", "arm64", "i386", "i686", "armv7l",
                     "armv8l", "ppc64le", "ppc64", "s390x", "riscv64", "loongarch64"}
_state: dict[str, bool] = {}  # probed once per process: "proc", "openat2"
_openat2_cache: dict[str, Callable[[int, bytes], tuple[int, int]]] = {}


class OutsideRoots(Exception):
    """The path leads outside every root; ``resolved`` is where it leads (as text)."""

    def __init__(self, resolved: str) -> None:
        super().__init__(resolved)
        self.resolved = resolved


class NotRegular(Exception):
    """The path leads to something that is not a regular file; ``st`` is its ``fstat``."""

    def __init__(self, st: os.stat_result) -> None:
        super().__init__(stat.filemode(st.st_mode))
        self.st = st


def open_regular(path: str, base: str, roots: Sequence[str]) -> tuple[int, os.stat_result]:
    """A read-only, non-blocking descriptor of the regular file ``path`` leads to, and its
    ``fstat`` (taken on that descriptor).

    ``path`` is relative to ``base`` or absolute; ``base`` and ``roots`` are real absolute
    paths (``os.path.realpath``); ``"/"`` as a root allows anything. The file opened is
    beneath a root at the moment it is opened, whatever is renamed or swapped meanwhile.
    Raises ``OutsideRoots`` if the path (after symlinks) leaves every root, ``NotRegular``
    for a directory, FIFO, socket or device (never opened for reading on Linux), and
    ``OSError`` otherwise: ``ENOENT``, ``ENOTDIR``, ``EACCES``, or ``ELOOP`` when more than
    ``MAX_LINKS`` symlinks are followed. The caller owns (and must close) the descriptor.
    """
    walk = _Walk(roots)
    try:
        return walk.open(os.path.join(base, path))
    finally:
        walk.close()


def _proc_reopen() -> bool:
    """Whether files are opened ``O_PATH`` and reopened through ``/proc/self/fd``."""
    if "proc" not in _state:
        _state["proc"] = bool(_O_PATH) and os.path.isdir("/proc/self/fd")
    return _state["proc"]


def _openat2(dir_fd: int, rest: str) -> int | None:
    """``openat2(dir_fd, rest, O_PATH, RESOLVE_BENEATH)``, or ``None`` if that fails for
    any reason (not offered here, or an error the walk will explain, such as a symlink that
    leaves the root, which ``RESOLVE_BENEATH`` refuses even when it lands in another root)."""
    call = _openat2_call()
    if call is None:
        return None
    fd, code = call(dir_fd, os.fsencode(rest))
    if fd >= 0:
        return fd
    if code in (errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.E2BIG):
        _state["openat2"] = False  # not offered here (old kernel, seccomp): walk instead
    return None


def _openat2_call() -> Callable[[int, bytes], tuple[int, int]] | None:
    """A function making the ``openat2`` syscall, returning (fd or -1, errno); ``None``
    where it is not offered. Built once per process."""
    if not _state.get("openat2", True) or not _proc_reopen():
        return None
    if "call" in _openat2_cache:
        return _openat2_cache["call"]
    import ctypes  # only here: the rest of silica has no use for it
    import platform

    if not sys.platform.startswith("linux") or platform.machine() not in _OPENAT2_MACHINES:
        _state["openat2"] = False
        return None

    class OpenHow(ctypes.Structure):
        _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                    ("resolve", ctypes.c_uint64)]

    how = OpenHow(_O_PATH | _CLOEXEC, 0, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long

    def call(dir_fd: int, rest: bytes) -> tuple[int, int]:
        fd = syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(dir_fd), ctypes.c_char_p(rest),
                     ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
        return int(fd), (ctypes.get_errno() if fd < 0 else 0)

    _openat2_cache["call"] = call
    return call


def _parts(text: str) -> list[str]:
    return [p for p in text.split("/") if p not in ("", ".")]


class _Walk:
    """One open: the roots' descriptors, the folders entered beneath the current root."""

    def __init__(self, roots: Sequence[str]) -> None:
        self.roots = sorted({os.path.normpath(r) for r in roots}, key=len, reverse=True)
        self.root_fds: dict[str, int] = {}
        self.root = ""
        self.stack: list[int] = []  # descriptors of folders below self.root, owned here
        self.pending: deque[str] = deque()
        self.links = 0

    def close(self) -> None:
        for fd in [*self.stack, *self.root_fds.values()]:
            os.close(fd)
        self.stack.clear()
        self.root_fds.clear()

    @property
    def here(self) -> int:
        """The folder the walk is in: the last one entered, or the root."""
        if self.stack:
            return self.stack[-1]
        if self.root not in self.root_fds:
            self.root_fds[self.root] = os.open(self.root, _ROOT)  # trusted: its path is real
        return self.root_fds[self.root]

    def open(self, text: str) -> tuple[int, os.stat_result]:
        whole = self._enter_root(text)
        if not whole:
            pfd = _openat2(self.here, "/".join(self.pending))  # the kernel's own walk
            if pfd is not None:
                return _reopen(pfd)
        while True:
            if whole:  # the root itself (it may be a file)
                whole = False
                got = self._final(None, self.root)
            elif not self.pending:  # the path ended in "..": the folder reached
                got = self._final(self.here, ".")
            else:
                name = self.pending.popleft()
                if name == "..":
                    if self.stack:
                        os.close(self.stack.pop())
                    else:  # above this root: only into another root
                        above = os.path.join(os.path.dirname(self.root), *self.pending)
                        whole = self._enter_root(above)
                    continue
                got = self._folder(name) if self.pending else self._final(self.here, name)
            if got is None:  # entered a folder, or to look at the same name again
                continue
            if isinstance(got, tuple):
                return got
            whole = self._follow(got)

    def _enter_root(self, text: str) -> bool:
        """Start over at the root ``text`` begins with; whether ``text`` is the root itself.

        The part after the root is walked as written (its ``..`` physically, as the kernel
        does); only a path that begins in no root is resolved (``realpath``) to find one."""
        parts = _parts(text)
        # Beginning in no root, the text is resolved to choose one; a wrong guess (a path
        # changed meanwhile) can only pick another root to walk from, or none.
        for candidate in (parts, _parts(os.path.realpath(text))):
            for root in self.roots:
                top = _parts(root)
                if candidate[:len(top)] == top:
                    break
            else:
                continue
            break
        else:
            raise OutsideRoots(os.path.realpath(text))
        while self.stack:
            os.close(self.stack.pop())
        self.root = root
        self.pending = deque(candidate[len(top):])
        return not self.pending

    def _folder(self, name: str) -> str | None:
        """Enter the folder ``name``; its target instead if it is a symlink. A name that is
        no folder, followed by ``..``, cancels out (as ``os.path.realpath`` has it)."""
        try:
            self.stack.append(os.open(name, _DIR, dir_fd=self.here))
            return None
        except OSError as exc:
            if exc.errno not in (*_LINKISH, errno.ENOENT):
                raise
            target = _readlink(name, self.here) if exc.errno != errno.ENOENT else None
            if target is not None:
                return target
            if self.pending[0] == "..":  # "missing/.." stays here; nothing is opened
                self.pending.popleft()
                return None
            if exc.errno == errno.ENOENT:
                raise
            # A file, not a folder (or swapped back from a symlink: try again).
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), name) from None

    def _final(self, dir_fd: int | None, name: str) -> tuple[int, os.stat_result] | str | None:
        """The file ``name`` opened for reading, or its target if it is a symlink; ``None``
        when it must be looked at again (it stopped being a symlink meanwhile)."""
        if _proc_reopen():
            pfd = os.open(name, _O_PATH | _NOFOLLOW | _CLOEXEC, dir_fd=dir_fd)
            if not stat.S_ISLNK(os.fstat(pfd).st_mode):
                return _reopen(pfd)
            os.close(pfd)
        else:
            # Only to say what it is without opening it; the fstat below is the check.
            before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if not (stat.S_ISREG(before.st_mode) or stat.S_ISLNK(before.st_mode)):
                raise NotRegular(before)
            try:
                fd = os.open(name, _READ | _NOFOLLOW, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno not in _LINKISH:
                    raise
            else:
                return _checked(fd)
        target = _readlink(name, dir_fd)
        if target is None:  # swapped from a symlink to something else: look again
            if dir_fd is None:
                raise OSError(errno.EAGAIN, "it changed while it was being opened; try again")
            self._count_link()  # bounds the retries too
            self.pending.appendleft(name)
            return None
        return target

    def _follow(self, target: str) -> bool:
        """Continue at a symlink's ``target``; whether that is a root itself."""
        self._count_link()
        if target.startswith("/"):
            return self._enter_root(os.path.join(target, *self.pending))
        self.pending.extendleft(reversed(_parts(target)))
        return False

    def _count_link(self) -> None:
        self.links += 1
        if self.links > MAX_LINKS:
            raise OSError(errno.ELOOP, f"more than {MAX_LINKS} symbolic links on the way "
                          "(a symlink loop?)")


def _readlink(name: str, dir_fd: int | None) -> str | None:
    """The target of the symlink ``name``; ``None`` if it is not a symlink (now)."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return None
        raise


def _reopen(pfd: int) -> tuple[int, os.stat_result]:
    """The ``O_PATH`` descriptor ``pfd`` (closed here) reopened for reading, if it is a
    regular file: a device or FIFO is never opened."""
    try:
        st = os.fstat(pfd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(st)
        # The magic link names this very inode, whatever happened to its path meanwhile.
        fd = os.open(f"/proc/self/fd/{pfd}", _READ)
    finally:
        os.close(pfd)
    return _checked(fd, st)


def _checked(fd: int, before: os.stat_result | None = None) -> tuple[int, os.stat_result]:
    """``fd`` and its ``fstat`` if it is the regular file expected; closed otherwise."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(st)
        if before is not None and (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
            raise OSError(errno.EAGAIN, "the file changed while it was being opened")
    except BaseException:
        os.close(fd)
        raise
    return fd, st
