"""The resident daemon: import once, then fork a child per run handed to it.

    python -m silica.resident        # what the client starts, detached, in a new session

One thread only (it forks), one ``selectors`` loop over the listening socket, the
connection of each run and a wake-up pipe for SIGCHLD and SIGTERM. It holds
``<home>/run/resident.lock`` for its life (a second one exits at once), exits after
``idle`` seconds with no run, on ``stop``, or when a client's fingerprint differs from its
own (after the runs it started have ended), and removes its socket on the way out.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import selectors
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from silica import resident
from silica.resident import child

WARM = ("silica.cli", "silica.cli.agent", "silica.cli.output", "silica.cli.transcript",
        "silica.config", "silica.agent.loop", "silica.providers.anthropic",
        "silica.providers.openai", "silica.providers.clients", "silica.tools.shell",
        "silica.security.process", "silica.errors", "cyclopts", "anthropic", "openai",
        "httpx", "httpx2", "silica.cli.tools", "silica.tools.toolbox", "silica.tools.runner",
        "silica.tools.confined", "silica.results.pipeline",
        # what running a tool imports on its way (tools run, a chat's tool call)
        "silica.default_plugins.anthropic_files", "silica.default_plugins.builtin_tools",
        "silica.default_plugins.image_check", "silica.default_plugins.json_images",
        "silica.default_plugins.mcp_tools", "silica.default_plugins.pack_folders",
        "silica.default_plugins.providers", "silica.default_plugins.terminal_images",
        "silica.default_plugins.tool_env", "silica.default_plugins.tool_folders",
        "silica.cli.show", "silica.tools.sandbox", "silica.tools.confine",
        "silica.tools.pyenv", "silica.tools.reaper", "silica.tools.workers",
        "silica.tools.read_file", "silica.results.escapes", "silica.results.json_images",
        "silica.images.sniff", "silica.packs.folders", "silica.providers.vision",
        "pybase64", "stringzilla", "uv", "ctypes", "py_compile", "resource",
        # the session store a run opens (only imported here: a child opens its own connection)
        "silica.agent.session_files", "silica.storage.sqlite", "silica.storage.schema",
        "sqlite3")
"""What a run would import first: imported once here, before the first fork."""


class Resident:
    def __init__(self, home: Path, idle: float) -> None:
        self.home, self.idle = home, idle
        self.fingerprint = resident.fingerprint()  # before the imports: the code on disk
        self.started = time.time()
        self.last = time.monotonic()
        self.runs: dict[int, socket.socket] = {}  # child pid -> its client's connection
        self.served = 0
        self.closing = False
        self.selector = selectors.DefaultSelector()
        self.listener: socket.socket | None = None
        self.inode: tuple[int, int] | None = None
        self.lock = -1

    def lock_folder(self) -> bool:
        folder = resident.run_dir(self.home)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not resident.safe_folder(folder):
            return False
        self.lock = os.open(folder / resident.LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                            0o600)
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # another resident runs
        return True

    def listen(self) -> None:
        path = resident.socket_path(self.home)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a dead resident's: we hold the lock
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.listener.bind(str(path))
        finally:
            os.umask(old)
        self.listener.listen(64)
        self.listener.setblocking(False)
        st = os.stat(path)
        self.inode = (st.st_dev, st.st_ino)
        os.ftruncate(self.lock, 0)
        os.write(self.lock, f"{os.getpid()}\n".encode())
        self.last = time.monotonic()
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")

    def serve(self) -> None:
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.wake_r = wake_r
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: self.close())
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        self.selector.register(wake_r, selectors.EVENT_READ, "wake")
        while True:
            self.reap()
            if self.closing and not self.runs:
                break
            if not self.runs and time.monotonic() - self.last >= self.idle:
                break
            timeout = None if self.runs else max(0.0, self.idle - (time.monotonic() - self.last))
            for key, _ in self.selector.select(timeout):
                if key.data == "accept":
                    self.accept()
                elif key.data == "wake":
                    with contextlib.suppress(OSError):
                        os.read(wake_r, 512)
                else:
                    self.client_gone(key.data, key.fileobj)  # type: ignore[arg-type]
        self.close()

    def accept(self) -> None:
        assert self.listener is not None
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        fds: list[int] = []
        try:
            conn.setblocking(True)
            conn.settimeout(10)
            if resident.peer_uid(conn) != os.getuid():
                conn.close()
                return
            message, fds = resident.receive(conn, max_fds=3)
            if message is None:
                conn.close()
                return
            self.answer(conn, message, fds)
        except (OSError, ValueError):
            resident._close_all(fds)
            conn.close()

    def answer(self, conn: socket.socket, message: dict, fds: list[int]) -> None:
        op = message.get("op")
        if op == "status":
            resident.send(conn, self.status())
            conn.close()
        elif op == "stop":
            resident.send(conn, {"stopping": True, "pid": os.getpid()})
            conn.close()
            self.close()
        elif op == "run":
            if message.get("fingerprint") != self.fingerprint:
                resident.send(conn, {"refused": "stale"})
                conn.close()
                resident._close_all(fds)
                self.close()
            elif self.closing or len(fds) != 3 or threading.active_count() > 1:
                resident.send(conn, {"refused": "busy"})  # it forks with one thread only
                conn.close()
                resident._close_all(fds)
            else:
                self.fork(conn, message, fds)
        else:
            conn.close()
            resident._close_all(fds)

    def fork(self, conn: socket.socket, message: dict, fds: list[int]) -> None:
        pid = os.fork()
        if pid == 0:  # the child: nothing of the resident's loop is kept
            code = 1
            try:
                conn.close()
                self.drop_for_child()
                code = child.run(message, fds)
            finally:
                child.finish(code)
        resident._close_all(fds)
        self.served += 1
        self.last = time.monotonic()
        try:
            resident.send(conn, {"pid": pid})
        except OSError:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGHUP)
        conn.setblocking(False)
        self.runs[pid] = conn
        self.selector.register(conn, selectors.EVENT_READ, pid)

    def drop_for_child(self) -> None:
        for key in list(self.selector.get_map().values()):
            fileobj = key.fileobj
            if isinstance(fileobj, socket.socket):
                fileobj.close()
        self.selector.close()
        os.close(self.wake_r)
        self.unlock()

    def unlock(self) -> None:
        if self.lock >= 0:
            os.close(self.lock)
            self.lock = -1

    def client_gone(self, pid: int, conn: socket.socket) -> None:
        """The client's connection was closed before its run ended (the client was
        killed): the run gets SIGHUP, as a closed terminal sends."""
        with contextlib.suppress(OSError):
            if conn.recv(1):
                return
        self.selector.unregister(conn)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGHUP)

    def reap(self) -> None:
        while self.runs:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.runs.pop(pid, None)
            if conn is None:
                continue
            self.last = time.monotonic()
            result = ({"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status)
                      else {"exit": os.waitstatus_to_exitcode(status)})
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(conn)
            with contextlib.suppress(OSError):
                conn.setblocking(True)
                resident.send(conn, result)
            conn.close()

    def status(self) -> dict:
        return {"pid": os.getpid(), "socket": str(resident.socket_path(self.home)),
                "started": self.started, "runs": len(self.runs), "served": self.served,
                "idle_exit": self.idle,
                "idle_for": round(time.monotonic() - self.last, 3) if not self.runs else 0,
                "python": sys.executable, "fingerprint": self.fingerprint}

    def close(self) -> None:
        """Stop taking runs: the socket goes (if it is still ours); the loop ends when the
        runs started have."""
        if self.closing:
            return
        self.closing = True
        if self.listener is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(self.listener)
            path = resident.socket_path(self.home)
            with contextlib.suppress(OSError):
                st = os.stat(path)
                if (st.st_dev, st.st_ino) == self.inode:
                    path.unlink()
            self.listener.close()
        self.unlock()  # a resident for the new code may start at once


def warm() -> None:
    """Import what a run imports, and fill the caches a run keeps (``child.KEPT``)."""
    import importlib

    for name in WARM:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    with contextlib.suppress(Exception):
        from silica.cli import _app

        _app()
    with contextlib.suppress(Exception):
        from silica.providers.clients import tls

        tls()
    with contextlib.suppress(Exception):  # the SDK's first-request work, done once here
        from silica.resident.warmup import warm_anthropic

        warm_anthropic()


def main() -> int:
    from silica.paths import silica_home

    home = silica_home()
    _enabled, idle = resident.settings(home, os.environ)
    daemon = Resident(home, idle)
    if not daemon.lock_folder():
        return 0  # another resident runs (or the folder is not safe)
    from silica.security.process import harden_process

    harden_process()
    warm()  # before the socket exists: a run meanwhile goes direct, not waiting here
    if threading.active_count() > 1:  # an import started a thread: it could not fork
        return 1
    daemon.listen()
    daemon.serve()
    return 0
