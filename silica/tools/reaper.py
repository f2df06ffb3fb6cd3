"""Run one command so that nothing it starts outlives it: silica's wrapper around a tool call.

    python -I -S reaper.py [--status-fd N] [--parent PID] -- ARGV...

Started by ``silica.tools.runner`` as a script (silica imports only its ``libc_prctl``). On
Linux it makes itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so every process
ARGV starts stays below it even after ``setsid()``, ``setpgid()`` or a double fork. What a
caller may rely on:

- ARGV runs as its child with the same stdin, stdout, stderr, environment and working
  directory; SIGPIPE and SIGXFSZ are at their defaults and no signal is blocked, as
  ``subprocess`` would leave them.
- When ARGV exits, or when this process gets SIGTERM, SIGINT, SIGHUP or SIGUSR1, or when
  ``--parent`` dies (Linux: the thread that started it ends; if it is gone already, ARGV is
  not started), every process left below it is SIGKILLed and reaped, and it exits as
  ARGV did: the same exit code, or killed by the same signal (so ``Popen.returncode`` is what
  running ARGV directly would have given: ``-9`` when ARGV was SIGKILLed, e.g. when stopped).
- If ARGV cannot be started, the errno is written in decimal to ``--status-fd`` (when given),
  a line to stderr, and it exits 127. The status fd is not inherited by ARGV.
- It prints nothing else. Without the subreaper (not Linux, or prctl refused) it still ends
  what is below it when ARGV exits, but a process that was orphaned has left its reach.

Only builtin modules are imported on the common path (plus ctypes' C core, for prctl), so
that it starts about as fast as ``python -I -S -c pass``.
"""

import _signal  # type: ignore[import-not-found]  # signal's C core has no stub; the child imports no more
import posix
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_STOP_SIGNALS = {_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP, _signal.SIGUSR1}
_WAITED = {_signal.SIGCHLD, *_STOP_SIGNALS}
_KILL_PATIENCE = 2.0  # seconds to keep killing before giving up on an unkillable process
_EXIT_SPAWN_FAILED = 127


def main(args: list[str]) -> None:
    status_fd, parent = -1, 0
    while args and args[0] != "--":
        if len(args) < 2 or args[0] not in ("--status-fd", "--parent"):
            _fail(f"usage: reaper.py [--status-fd N] [--parent PID] -- ARGV... (got {args[0]!r})")
        if args[0] == "--status-fd":
            status_fd = int(args[1])
        else:
            parent = int(args[1])
        args = args[2:]
    argv = args[1:]
    if not argv:
        _fail("usage: reaper.py [--status-fd N] [--parent PID] -- ARGV...")
    if status_fd >= 0:
        posix.set_inheritable(status_fd, False)
    # Signals are taken synchronously with sigwaitinfo: no handler can interrupt the reaping.
    _signal.pthread_sigmask(_signal.SIG_BLOCK, _WAITED)
    _prctl_setup()
    if parent and posix.getppid() != parent:
        _exit_like(None)  # the caller died before we could watch it: run nothing
    try:
        child = posix.posix_spawnp(argv[0], argv, posix.environ, setsigmask=(),
                                   setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ))
    except OSError as exc:
        if status_fd >= 0:
            posix.write(status_fd, str(exc.errno).encode())
        posix.write(2, f"could not start {argv[0]}: {exc.strerror or exc}\n".encode())
        posix._exit(_EXIT_SPAWN_FAILED)
    status = None
    while status is None:
        if _signal.sigwaitinfo(_WAITED).si_signo != _signal.SIGCHLD:
            break  # asked to stop
        status, _ = _reap(child, status)
    _exit_like(_end_everything_below(child, status))


def _prctl_setup() -> None:
    """Become a child subreaper and get SIGTERM when the parent dies (Linux; else nothing)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        prctl = libc_prctl()
    except (ImportError, OSError, AttributeError, TypeError):
        return  # no subreaper: what was orphaned cannot be found, the rest still can
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    prctl(PR_SET_PDEATHSIG, _signal.SIGTERM, 0, 0, 0)


def libc_prctl():
    """libc's prctl through ctypes' C core: importing ``ctypes`` itself (os, struct, types...)
    would double this script's start; ``ctypes`` is the fallback if that core ever changes.
    Also silica's own (``silica.security.process``): this file imports nothing of silica."""
    try:
        import _ctypes

        class CInt(_ctypes._SimpleCData):
            _type_ = "i"

        class CFunction(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL
            _restype_ = CInt

        class Process:
            _handle = _ctypes.dlopen(None, 0)

        return CFunction(("prctl", Process()))
    except (ImportError, OSError, AttributeError, TypeError):
        import ctypes

        return ctypes.CDLL(None).prctl


def _reap(child: int, status: int | None) -> tuple[int | None, bool]:
    """Reap every child that has exited; the main child's wait status (if reaped now or
    before) and whether any child is left."""
    while True:
        try:
            pid, st = posix.waitpid(-1, posix.WNOHANG)
        except ChildProcessError:
            return status, False
        if pid == 0:
            return status, True
        if pid == child:
            status = st


def _end_everything_below(child: int, status: int | None) -> int | None:
    """SIGKILL and reap every descendant until none is left; the main child's wait status."""
    me = posix.getpid()
    deadline = time.monotonic() + _KILL_PATIENCE
    wait = 0.001
    while True:
        # As a subreaper, no child left means no descendant left: /proc is read only when
        # something stayed behind.
        status, left = _reap(child, status)
        if not left or time.monotonic() > deadline:
            return status
        for pid in _descendants(me):
            try:  # noqa: SIM105 - contextlib would be one more import to start
                posix.kill(pid, _signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _signal.sigtimedwait({_signal.SIGCHLD}, wait)  # a short sleep that a death cuts short
        wait = min(wait * 2, 0.05)


def _descendants(root: int) -> list[int]:
    """Every process below ``root``, from the parent links in /proc/*/stat."""
    children: dict[int, list[int]] = {}
    for name in posix.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fd = posix.open(f"/proc/{name}/stat", posix.O_RDONLY)
            try:
                data = posix.read(fd, 1024)
            finally:
                posix.close(fd)
            # The name in parentheses may hold anything: the ppid is 2 fields after its end.
            ppid = int(data[data.rindex(b")") + 2:].split(None, 2)[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or unreadable
        children.setdefault(ppid, []).append(int(name))
    found: list[int] = []
    todo = [root]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _exit_like(status: int | None) -> None:
    """Exit as the main child did: its exit code, or killed by its signal (SIGKILL if it
    never finished)."""
    code = posix.waitstatus_to_exitcode(status) if status is not None else -_signal.SIGKILL
    if code >= 0:
        posix._exit(code)
    sig = -code
    if sig != _signal.SIGKILL:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # re-raising SIGSEGV dumps no core
        try:  # noqa: SIM105 - contextlib would be one more import to start
            _signal.signal(sig, _signal.SIG_DFL)
        except (OSError, ValueError):
            pass
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {sig})
    posix.kill(posix.getpid(), sig)
    posix._exit(128 + sig)  # a signal whose default is to be ignored: exit as a shell would


def _fail(message: str) -> None:
    posix.write(2, f"reaper.py: {message}\n".encode())
    posix._exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
