"""Keep silica's secrets out of what other processes can read of it.

A process of the same user (a tool silica runs, say) can read ``/proc/<pid>/environ`` of
silica, and every local user can read ``/proc/<pid>/cmdline``. Both show blocks of silica's
own memory as they were at exec: removing a variable from ``os.environ`` leaves it there.

    harden_process()        # first thing in ``silica.cli.main``
    hide_from_proc(token)   # a secret that came on the command line: masked in place

What a caller may rely on, on Linux (elsewhere both do nothing):

- After ``harden_process()``, the value of every secret variable (``silica.security.env``'s
  patterns, ``$SILICA_TOOL_ENV_WITHHOLD`` and ``[tools] env_withhold`` of config.toml) is
  zeroed in the exec-time environment block, so ``/proc/<pid>/environ`` no longer shows it;
  ``os.environ`` and libc's ``environ`` still hold it (set again, on the heap), so SDKs,
  grants and subprocesses work as before.
  The secrets of URLs in the arguments (what ``silica.security.urls.mask_urls`` masks: user
  information, secret query values) are masked with ``*`` in the argument block, so
  ``/proc/<pid>/cmdline`` and ``ps`` no longer show them (``sys.argv`` keeps them).
- The process is made non-dumpable (``PR_SET_DUMPABLE`` 0): processes of the same user cannot
  ptrace it or read its memory, environment or open files through ``/proc``; and its core
  size soft limit is 0. Neither stops root, hence the scrubbing above.
- ``hide_from_proc(value)`` masks every occurrence of ``value`` in the argument block after
  the program's name with ``*`` (the arguments keep their length and number).

Until the process has started Python, the blocks are as given: a secret on the command line
is also in the shell's history and visible for that moment, so it is better never passed so.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable

PR_SET_DUMPABLE = 4
_MASK = b"*"


def harden_process() -> None:
    """Scrub secrets from this process's exec-time blocks and make it non-dumpable (see the
    module docstring). Never raises: where the kernel refuses, the process runs as before."""
    if not sys.platform.startswith("linux"):
        return
    from silica.paths import silica_home
    from silica.security.env import is_secret, withhold_from_config, withhold_from_environment

    withhold = (*withhold_from_environment(), *withhold_from_config(silica_home()))
    secret = [name for name in os.environ if is_secret(name, withhold)]
    if secret:
        _edit_block("env", _zero_values(frozenset(os.fsencode(n) for n in secret)))
        for name in secret:  # libc's environ points at a fresh copy now, not at the block
            os.environ[name] = os.environ[name]
    if any("://" in arg or "=" in arg for arg in sys.argv[1:]):
        _edit_block("arg", _mask_url_secrets)
    _not_dumpable()


def hide_from_proc(value: str) -> bool:
    """Mask ``value`` in this process's argument block (``/proc/<pid>/cmdline``); whether it
    was found there. ``sys.argv`` keeps it."""
    if not value or not sys.platform.startswith("linux"):
        return False
    secret = os.fsencode(value)
    found = False

    def mask(block: bytes) -> bytes:
        nonlocal found
        name_end = block.find(b"\0") + 1  # the program's own name stays as it is
        rest = block[name_end:]
        found = secret in rest
        return block[:name_end] + rest.replace(secret, _MASK * len(secret))

    _edit_block("arg", mask)
    return found


def _zero_values(names: frozenset[bytes]) -> Callable[[bytes], bytes]:
    def zero(block: bytes) -> bytes:
        out = bytearray(block)
        at = 0
        for entry in block.split(b"\0"):
            name, eq, value = entry.partition(b"=")
            if eq and name in names:
                start = at + len(name) + 1
                out[start:start + len(value)] = bytes(len(value))
            at += len(entry) + 1
        return bytes(out)
    return zero


def _mask_url_secrets(block: bytes) -> bytes:
    from silica.security.urls import secret_spans

    name_end = block.find(b"\0") + 1
    out = bytearray(block)
    # latin-1: one character per byte, so the spans found are byte offsets; each argument on
    # its own, so no match runs from one into the next
    at = name_end
    for arg in block[name_end:].split(b"\0"):
        for start, end in secret_spans(arg.decode("latin-1")):
            out[at + start:at + end] = _MASK * (end - start)
        at += len(arg) + 1
    return bytes(out)


def _edit_block(which: str, edit: Callable[[bytes], bytes]) -> None:
    """Rewrite this process's ``which`` block ("arg" or "env") with ``edit`` (same length)."""
    span = _block(which)
    if span is None:
        return
    start, end = span
    try:
        fd = os.open("/proc/self/mem", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return _edit_by_address(start, end, edit)
    try:
        block = os.pread(fd, end - start, start)
        new = edit(block)
        if new != block and len(new) == len(block):
            os.pwrite(fd, new, start)
    except OSError:
        _edit_by_address(start, end, edit)
    finally:
        os.close(fd)


def _edit_by_address(start: int, end: int, edit: Callable[[bytes], bytes]) -> None:
    # where /proc/self/mem may not be written: the same bytes, through ctypes
    import ctypes

    block = ctypes.string_at(start, end - start)
    new = edit(block)
    if new != block and len(new) == len(block):
        ctypes.memmove(start, new, len(new))


def _block(which: str) -> tuple[int, int] | None:
    """``(start, end)`` of this process's argument or environment block: fields 48-51 of
    ``/proc/self/stat`` (arg_start, arg_end, env_start, env_end)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2:].split()  # the name may hold spaces
        arg_start, arg_end, env_start, env_end = (int(f) for f in fields[45:49])
    except (OSError, ValueError):
        return None
    start, end = (arg_start, arg_end) if which == "arg" else (env_start, env_end)
    return (start, end) if 0 < start < end else None


def _not_dumpable() -> None:
    import resource

    # The reaper's prctl (stdlib only, through ctypes' C core: ctypes itself would add
    # several milliseconds to every start).
    from silica.tools.reaper import libc_prctl

    with contextlib.suppress(ImportError, OSError, AttributeError, TypeError):
        libc_prctl()(PR_SET_DUMPABLE, 0, 0, 0, 0)
    with contextlib.suppress(OSError, ValueError):  # the hard limit stays: a tool may raise it
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
