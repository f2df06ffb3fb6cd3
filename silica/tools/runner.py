"""Running a tool process: bounded output, a timeout that stops every process it started.

On Linux every tool process runs under ``reaper.py``, a small wrapper that is a child
subreaper: whatever the tool starts stays below it, even a process that calls ``setsid()`` or
double-forks, and the wrapper SIGKILLs all of it when the tool exits or when it is told to
stop (timeout, output flood, end or cancellation of the call). The wrapper also starts in a
session of its own, and the whole process group is SIGKILLed at the end of every call as a
fallback; elsewhere that group kill is all there is, so there a process that leaves the group
(``setsid``, ``setpgid``) can outlive the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from silica.tools.model import DEFAULT_STDERR_CAP, DEFAULT_STDOUT_CAP, RawOutput

_READ_SIZE = 256 * 1024
_DRAIN_GRACE = 0.5  # seconds to wait for pipes after the group is stopped
_STOP_GRACE = 2.0  # seconds the reaper gets to end the tree before the group kill
_REAPER = Path(__file__).with_name("reaper.py")
_LINE_CAP = 4096  # bytes of one stderr line handed to ``on_stderr_line``; the rest is dropped


async def run_process(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 60.0,
    stdout_cap: int = DEFAULT_STDOUT_CAP,
    stderr_cap: int = DEFAULT_STDERR_CAP,
    on_stderr_line: Callable[[str], None] | None = None,
) -> RawOutput:
    """Run ``argv`` to completion (or timeout) and return what it printed.

    stdout is kept up to ``stdout_cap`` bytes; past it the process is stopped and the result
    says so. stderr keeps its last ``stderr_cap`` bytes. Never raises for a failure of the
    program itself: a missing executable or an unusable ``cwd`` is reported in ``error``.

    When it returns (or is cancelled), nothing ``argv`` started is left running: on Linux
    not even a process that called ``setsid()`` or double-forked; elsewhere, whatever stayed
    in the process group. ``exit_code`` is ``argv``'s own, negative for a signal (``-9`` when
    it was stopped), as if it had been run directly.

    ``on_stderr_line``, if given, is called on the event loop with each line ``argv`` writes
    to stderr, as it arrives: decoded as UTF-8 (bad bytes replaced), without its line end,
    cut to its first 4 KiB; a last line without a newline comes when stderr closes. What it
    raises is ignored. stderr is kept in the result all the same.
    """
    started = time.perf_counter()
    reaper = _reaper_command()
    status_r = status_w = -1
    command = argv
    if reaper:
        # The reaper reports on this pipe when it could not start argv (argv never ran).
        status_r, status_w = os.pipe()
        os.set_blocking(status_r, False)
        command = [*reaper, "--status-fd", str(status_w), "--parent", str(os.getpid()),
                   "--", *argv]
    try:
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
            pass_fds=(status_w,) if reaper else (),
        )
    except OSError as exc:
        _close(status_r)
        return RawOutput(b"", b"", None, time.perf_counter() - started,
                         error=f"could not start {argv[0]}: {exc.strerror or exc}")
    finally:
        _close(status_w)
    try:
        raw = await _collect(proc, bool(reaper), timeout, stdout_cap, stderr_cap,
                             on_stderr_line)
        spawn_errno = _read_status(status_r)
    finally:
        _close(status_r)
    raw.duration = time.perf_counter() - started
    if spawn_errno is not None:
        return RawOutput(b"", b"", None, raw.duration,
                         error=f"could not start {argv[0]}: {os.strerror(spawn_errno)}")
    return raw


async def _collect(proc: asyncio.subprocess.Process, reaper: bool, timeout: float,
                   stdout_cap: int, stderr_cap: int,
                   on_stderr_line: Callable[[str], None] | None = None) -> RawOutput:
    """Read the process's output until it exits, times out or floods; then stop everything
    it started."""
    out = _HeadBuffer(stdout_cap)
    tail = _TailBuffer(stderr_cap)
    err = tail if on_stderr_line is None else _LineTee(tail, on_stderr_line)
    capped = asyncio.Event()
    assert proc.stdout is not None and proc.stderr is not None  # started with both piped
    readers = [
        asyncio.create_task(_pump(proc.stdout, out, capped)),
        asyncio.create_task(_pump(proc.stderr, err, None)),
    ]
    deadline = time.monotonic() + timeout
    watchers = {
        asyncio.create_task(capped.wait()),
        # Pipes close when the tool exits, unless a child it left behind still holds them:
        # so the exit itself is watched too. (wait, not gather: cancelling this watcher must
        # leave the readers to drain what is still in the pipes.)
        asyncio.create_task(asyncio.wait(readers)),
        asyncio.create_task(_exit_of(proc)),
    }
    timed_out = False
    try:
        done, _ = await asyncio.wait(watchers, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        timed_out = not done
        if done and not out.cut and proc.returncode is None:
            # Output finished first: the tool closed its pipes and is exiting (or not).
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()),
                                       max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                timed_out = True
    finally:
        try:
            try:
                if reaper and proc.returncode is None:
                    # Only the reaper can find what left the group (setsid, double fork).
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(proc.pid, signal.SIGTERM)
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(asyncio.shield(proc.wait()), _STOP_GRACE)
            finally:
                # Stop whatever is left of the tool's process group, whatever happened.
                _kill_group(proc.pid)
            for task in watchers:
                task.cancel()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(proc.wait()), _DRAIN_GRACE * 4)
            # A grandchild that left the group may still hold a pipe: do not wait forever.
            await asyncio.wait(readers, timeout=_DRAIN_GRACE)
        finally:
            # Even when a second cancellation cut the waits above short: no task is left
            # reading, and the pipes are closed now, not when the transport is collected
            # after its loop is gone ("Event loop is closed" at exit).
            for task in (*watchers, *readers):
                task.cancel()
            transport = getattr(proc, "_transport", None)
            if transport is not None:
                transport.close()
    return RawOutput(
        stdout=out.value(),
        stderr=err.finish() if isinstance(err, _LineTee) else err.value(),
        exit_code=proc.returncode,
        duration=0.0,  # run_process sets it
        timed_out=timed_out,
        timeout=timeout,
        stdout_cut=out.cut,
        stderr_dropped=err.dropped,
    )


async def _exit_of(proc: asyncio.subprocess.Process) -> None:
    """Resolve once the process itself has exited, even while its pipes are still open."""
    while proc.returncode is None:
        await asyncio.sleep(0.05)


@functools.cache
def _reaper_command() -> tuple[str, ...]:
    """How to start ``reaper.py``; empty where it cannot help (no subreaper outside Linux)
    or cannot run."""
    if not sys.platform.startswith("linux") or not sys.executable or not _REAPER.is_file():
        return ()
    # -I -S: no site, no user paths, no environment: it starts in a few milliseconds.
    return (sys.executable, "-I", "-S", str(_REAPER))


def _read_status(fd: int) -> int | None:
    """The errno the reaper wrote when it could not start the command, if it did."""
    if fd < 0:
        return None
    try:
        data = os.read(fd, 32)
    except OSError:  # BlockingIOError: the reaper is still running, so it did start argv
        return None
    return int(data) if data.strip().isdigit() else None


def _close(fd: int) -> None:
    if fd >= 0:
        os.close(fd)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _pump(stream: asyncio.StreamReader, buf, capped: asyncio.Event | None) -> None:
    while True:
        chunk = await stream.read(_READ_SIZE)
        if not chunk:
            return
        buf.add(chunk)
        if capped is not None and buf.cut:
            capped.set()
            return


class _HeadBuffer:
    """Keeps the first ``cap`` bytes; notes that more came."""

    def __init__(self, cap: int) -> None:
        self.cap, self.size, self.cut = cap, 0, False
        self.parts: list[bytes] = []

    def add(self, chunk: bytes) -> None:
        room = self.cap - self.size
        if len(chunk) > room:
            chunk, self.cut = chunk[:room], True
        self.parts.append(chunk)
        self.size += len(chunk)

    def value(self) -> bytes:
        return b"".join(self.parts)


class _LineTee:
    """Passes stderr on to a ``_TailBuffer`` and hands each complete line to ``on_line``."""

    def __init__(self, buf: _TailBuffer, on_line: Callable[[str], None]) -> None:
        self.buf, self.on_line = buf, on_line
        self.partial = bytearray()
        self.skipping = False  # inside a line longer than _LINE_CAP: its rest is dropped

    @property
    def dropped(self) -> int:
        return self.buf.dropped

    def add(self, chunk: bytes) -> None:
        self.buf.add(chunk)
        *lines, rest = chunk.split(b"\n")
        for line in lines:
            if not self.skipping:
                self.partial += line
            self._emit()
            self.skipping = False
        if not self.skipping:
            self.partial += rest
            if len(self.partial) > _LINE_CAP:  # a runaway line costs no more memory
                self._emit()
                self.skipping = True

    def finish(self) -> bytes:
        """The buffer's value, after handing on a last line that had no newline."""
        if self.partial:
            self._emit()
        return self.buf.value()

    def _emit(self) -> None:
        line = bytes(self.partial[:_LINE_CAP]).rstrip(b"\r")
        self.partial.clear()
        with contextlib.suppress(Exception):  # a listener's bug must not lose the output
            self.on_line(line.decode("utf-8", "replace"))


class _TailBuffer:
    """Keeps the last ``cap`` bytes (at most about twice that in memory)."""

    def __init__(self, cap: int) -> None:
        self.cap, self.dropped = cap, 0
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > 2 * self.cap:
            excess = len(self.data) - self.cap
            del self.data[:excess]
            self.dropped += excess

    def value(self) -> bytes:
        if len(self.data) > self.cap:
            self.dropped += len(self.data) - self.cap
            del self.data[: len(self.data) - self.cap]
        return bytes(self.data)
