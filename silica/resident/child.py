"""A run in a child the resident forked: the client's descriptors, folder, umask and
environment, then the normal command line, as a fresh process would run it."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys


def run(request: dict, fds: list[int]) -> int:
    """Become the client's process (``request``: argv, cwd, env, umask, streams; ``fds``:
    its stdin, stdout and stderr) and run ``silica.cli.main``; the exit status."""
    import silica.resident as resident

    resident.IN_CHILD = True
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)  # dup2 leaves 0-2 inheritable, as a fresh process has them
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.umask(int(request["umask"]))
    before = dict(os.environ)
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in request["env"].items()})
    os.chdir(request["cwd"])
    with contextlib.suppress(Exception):
        import locale

        locale.setlocale(locale.LC_CTYPE, "")  # as Python does at start, from this env
    _reopen_streams(request.get("streams") or [])
    sys.argv = [str(a) for a in request["argv"]]
    _reset_built_at_import(before)
    from silica.cli import main

    try:
        main()
    except SystemExit as exc:
        return _code(exc.code)
    except BaseException:  # as the interpreter would: the traceback on stderr, status 1
        import traceback

        traceback.print_exc()
        return 1
    return 0


def finish(code: int) -> None:
    """End the child as the interpreter ends: exit handlers, streams flushed."""
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr)
    return 1


def _reopen_streams(streams: list) -> None:
    """``sys.stdin``/``stdout``/``stderr`` on the new 0, 1 and 2, with the client's
    encoding, errors and buffering (a terminal line-buffered, a pipe not)."""
    made = []
    for fd, mode in ((0, "r"), (1, "w"), (2, "w")):
        spec = streams[fd] if fd < len(streams) and isinstance(streams[fd], dict) else {}
        line = bool(spec.get("line_buffering", os.isatty(fd) or fd == 2))
        made.append(open(fd, mode, 1 if line else -1, closefd=False,  # noqa: SIM115
                         encoding=spec.get("encoding") or "utf-8",
                         errors=spec.get("errors") or "strict"))
    sys.stdin, sys.stdout, sys.stderr = made  # type: ignore[assignment]  # typeshed: TextIO
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = made  # type: ignore[misc, assignment]


KEPT = {"silica.cli._app": (),
        "silica.providers.clients.tls": ("SSL_CERT_FILE", "SSL_CERT_DIR")}
"""Caches the resident fills (``silica.resident.daemon.warm``) that a run keeps while the
variables they were made from are as they were: the command line's parser, the TLS
context (its CA bundle takes a tenth of a second to load)."""


def _reset_built_at_import(before: dict[str, str]) -> None:
    """What silica and its libraries built at import from the resident's terminal and
    environment, built again for this run: the consoles, rich's global console, the
    signal handlers and the caches of things looked up in the environment (but the
    ``KEPT`` ones made from the same variables)."""
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGWINCH):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as Python sets it at start
    atexit._clear()  # the resident's own handlers are not this run's
    import rich

    rich._console = None
    if "silica.cli.output" in sys.modules:
        from silica.cli.output import reopen_consoles

        reopen_consoles()
    for name, module in list(sys.modules.items()):  # find_uv, tls(), probe(): looked up
        if name == "silica" or name.startswith("silica."):  # from this run's environment
            for value in list(vars(module).values()):
                if not callable(getattr(value, "cache_clear", None)) or \
                        getattr(value, "__module__", None) != name:
                    continue
                same = KEPT.get(f"{name}.{getattr(value, '__name__', '')}")
                if same is None or any(before.get(k) != os.environ.get(k) for k in same):
                    value.cache_clear()
