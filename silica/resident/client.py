"""``silica ask``/``chat``/``tools run``/``tools list`` handing their run to the resident
(``silica.resident``).

    code = hand_off()       # the run's exit status, or None: run directly

Stdlib only, and nothing heavy: this runs before silica imports its command line.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import silica.resident as resident

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGWINCH)


def hand_off() -> int | None:
    """Run this command in the resident if one runs with this very code: its exit status.
    None means run directly; then, when no usable resident runs, one is started in the
    background for the next run. Never raises for a resident that is not there."""
    if resident.IN_CHILD:
        return None
    from silica.paths import silica_home

    home = silica_home()
    enabled, _idle = resident.settings(home, os.environ)
    if not enabled:
        return None
    try:
        sock = resident.connect(home, timeout=10)
    except Exception:
        sock = None
    if sock is None:
        start(home)
        return None
    with sock:
        try:
            return _run(sock, home)
        except (OSError, ValueError):
            return None


def _run(sock, home: Path) -> int | None:
    umask = os.umask(0)
    os.umask(umask)
    message = {"op": "run", "fingerprint": resident.fingerprint(), "argv": sys.argv,
               "cwd": os.getcwd(), "env": dict(os.environ), "umask": umask,
               "streams": [_stream(s) for s in (sys.stdin, sys.stdout, sys.stderr)]}
    fds = [_fd(0, os.O_RDONLY), _fd(1, os.O_WRONLY), _fd(2, os.O_WRONLY)]
    try:
        resident.send(sock, message, fds)
    finally:
        for fd in fds:
            if fd > 2:
                os.close(fd)
    reply, _ = resident.receive(sock)
    if reply is None or "pid" not in reply:
        if reply and reply.get("refused") == "stale":
            start(home)  # the old one is leaving: a fresh one for the next run
        return None
    pid = int(reply["pid"])
    previous = {sig: signal.signal(sig, lambda sig, _frame: _forward(pid, sig))
                for sig in FORWARDED}
    sock.settimeout(None)
    try:
        while True:
            try:
                result, _ = resident.receive(sock)
                break
            except InterruptedError:
                continue
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if result is None:  # the resident died under the run
        return 1
    if "signal" in result:  # end as the run ended: by the same signal
        number = int(result["signal"])
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        return 128 + number
    return int(result.get("exit", 1))


def _forward(pid: int, sig: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, sig)


def _stream(stream) -> dict:
    if stream is None:
        return {}
    return {"encoding": getattr(stream, "encoding", None),
            "errors": getattr(stream, "errors", None),
            "line_buffering": getattr(stream, "line_buffering", None)}


def _fd(fd: int, mode: int) -> int:
    """``fd`` to pass on; a closed one is passed as /dev/null, as Python then has it."""
    try:
        os.fstat(fd)
        return fd
    except OSError:
        return os.open(os.devnull, mode | os.O_CLOEXEC)


def start(home: Path) -> None:
    """Start a resident for ``home`` in the background: detached, in a new session, on
    /dev/null, with no secret in its environment (its children take the client's
    environment only into ``os.environ``). A failure to start is silent: runs go direct."""
    import subprocess

    from silica.security.env import is_secret, withhold_from_config, withhold_from_environment

    try:
        withhold = (*withhold_from_environment(), *withhold_from_config(home))
        env = {k: v for k, v in os.environ.items() if not is_secret(k, withhold)}
        subprocess.Popen([sys.executable, "-m", "silica.resident"], env=env, cwd="/",
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    except Exception:
        pass
