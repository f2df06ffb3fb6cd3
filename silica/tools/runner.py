"""Running a tool process: bounded output, a timeout that stops the whole process group.

Every tool process starts in a session of its own, so that a timeout, an output flood or
the end of the call can stop the tool together with everything it spawned (``uv`` starts
Python as a child; tools start their own children). What a tool leaves running after it
exits is stopped too: a call's processes never outlive the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

from silica.tools.model import DEFAULT_STDERR_CAP, DEFAULT_STDOUT_CAP, RawOutput

_READ_SIZE = 256 * 1024
_DRAIN_GRACE = 0.5  # seconds to wait for pipes after the group is stopped


async def run_process(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 60.0,
    stdout_cap: int = DEFAULT_STDOUT_CAP,
    stderr_cap: int = DEFAULT_STDERR_CAP,
) -> RawOutput:
    """Run ``argv`` to completion (or timeout) and return what it printed.

    stdout is kept up to ``stdout_cap`` bytes; past it the process is stopped and the result
    says so. stderr keeps its last ``stderr_cap`` bytes. Never raises for a failure of the
    program itself: a missing executable or an unusable ``cwd`` is reported in ``error``.
    """
    started = time.perf_counter()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        return RawOutput(b"", b"", None, time.perf_counter() - started,
                         error=f"could not start {argv[0]}: {exc.strerror or exc}")

    out = _HeadBuffer(stdout_cap)
    err = _TailBuffer(stderr_cap)
    capped = asyncio.Event()
    readers = [
        asyncio.create_task(_pump(proc.stdout, out, capped)),
        asyncio.create_task(_pump(proc.stderr, err, None)),
    ]
    deadline = time.monotonic() + timeout
    watchers = {
        asyncio.create_task(capped.wait()),
        # Pipes close when the tool exits, unless a child it left behind still holds them:
        # so the exit itself is watched too.
        asyncio.ensure_future(asyncio.gather(*readers)),
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
        # Stop whatever is left of the tool's process group, whatever happened.
        _kill_group(proc.pid)
        for task in watchers:
            task.cancel()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(proc.wait()), _DRAIN_GRACE * 4)
        # A grandchild that left the group may still hold a pipe: do not wait forever.
        _, pending = await asyncio.wait(readers, timeout=_DRAIN_GRACE)
        for task in pending:
            task.cancel()
        # Close the pipes now, not when the transport is collected after its loop is gone.
        transport = getattr(proc, "_transport", None)
        if transport is not None:
            transport.close()
    return RawOutput(
        stdout=out.value(),
        stderr=err.value(),
        exit_code=proc.returncode,
        duration=time.perf_counter() - started,
        timed_out=timed_out,
        timeout=timeout,
        stdout_cut=out.cut,
        stderr_dropped=err.dropped,
    )


async def _exit_of(proc: asyncio.subprocess.Process) -> None:
    """Resolve once the process itself has exited, even while its pipes are still open."""
    while proc.returncode is None:
        await asyncio.sleep(0.05)


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
