"""The resident: a small daemon that has imported silica's CLI, the agent and the provider
SDKs once, so ``silica ask`` and ``silica chat`` start in a fraction of the SDK's import, and
``silica tools run``/``tools list`` in a fraction of the command line's (``HANDED`` in
``silica.cli``).

These commands try its Unix socket (``<silica home>/run/resident.sock``, in a 0700
folder) before importing anything heavy (``silica.resident.client``). They send their
argv, cwd, environment and umask, and pass their stdin, stdout and stderr with
SCM_RIGHTS; the resident checks the peer is its own user, forks, and the child runs the
normal command line on those descriptors (``silica.resident.child``) while the client
waits for its exit status and forwards SIGINT, SIGTERM, SIGHUP and SIGWINCH to it. A run
through the resident prints, prompts, writes and exits exactly as a direct run.

- When none runs, the client starts one in the background (detached, a new session, with
  the secrets taken out of its environment: ``silica.security.env``) and runs directly.
- A resident whose code differs from the client's (``fingerprint``: silica's version and
  files, the Python, the installed distributions) is told to exit; the run goes direct and
  a fresh resident starts. A resident that cannot be reached means a direct run, never an
  error.
- It exits after ``[resident] idle`` seconds with no run (600 by default); ``[resident]
  enabled = false`` in config.toml or ``SILICA_RESIDENT=0`` turns it off (no resident is
  started, none is used). ``silica resident status|stop`` shows and ends it.

This module holds what the client and the daemon share, with the stdlib alone: the client
imports it before anything else.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import sys
from pathlib import Path

ENV_VAR = "SILICA_RESIDENT"
"""``0`` (or ``false``, ``no``, ``off``): no resident is used or started."""

IDLE_DEFAULT = 600
SOCKET_NAME = "resident.sock"
LOCK_NAME = "resident.lock"
MAX_MESSAGE = 16 * 1024 * 1024  # an environment and argv: far below this
_LENGTH = struct.Struct("!I")

IN_CHILD = False
"""True in a child the resident forked to run a command: it never hands off again."""


def run_dir(home: Path) -> Path:
    """The resident's folder: ``<home>/run``, mode 0700."""
    return home / "run"


def socket_path(home: Path) -> Path:
    return run_dir(home) / SOCKET_NAME


def settings(home: Path, environ: dict[str, str] | os._Environ[str]) -> tuple[bool, int]:
    """``(enabled, idle seconds)`` from ``$SILICA_RESIDENT`` and ``[resident]`` of
    ``<home>/config.toml``, read with the stdlib alone (loading the full settings costs more
    than the hand-off saves; they check the same section in a direct run)."""
    enabled, idle = True, IDLE_DEFAULT
    try:
        import tomllib

        with open(home / "config.toml", "rb") as f:  # silica.config.CONFIG_NAME
            section = tomllib.load(f).get("resident", {})
        if isinstance(section, dict):
            if isinstance(section.get("enabled"), bool):
                enabled = section["enabled"]
            if isinstance(section.get("idle"), int) and section["idle"] > 0:
                idle = section["idle"]
    except (OSError, ValueError):  # missing or not valid: a direct run says what is wrong
        pass
    if environ.get(ENV_VAR, "").strip().lower() in ("0", "false", "no", "off"):
        enabled = False
    return enabled, idle


def fingerprint() -> str:
    """What makes a resident's code the code a fresh process would run: silica's version
    and the path, size and mtime of each of its files, the Python (``sys.executable``, its
    version) and the mtime of every ``sys.path`` folder (a distribution installed or
    removed changes its site-packages folder, and so its entry points)."""
    import hashlib

    from silica import __version__

    parts: list[str] = [__version__, sys.executable, sys.version, repr(sys.flags)]
    package = Path(__file__).resolve().parent.parent
    for folder, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".toml", ".json", ".html", ".js", ".css")):
                try:
                    st = os.stat(os.path.join(folder, name))
                except OSError:
                    continue
                parts.append(f"{folder}/{name}:{st.st_size}:{st.st_mtime_ns}")
    for entry in sys.path[1:]:  # [0] is the script's folder or the cwd: not the code's
        try:
            parts.append(f"{entry}:{os.stat(entry or '.').st_mtime_ns}")
        except OSError:
            parts.append(f"{entry}:-")
    return hashlib.sha256("\n".join(parts).encode("utf-8", "surrogateescape")).hexdigest()


def send(sock: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    """One message: its length, then its JSON; ``fds`` ride along as SCM_RIGHTS."""
    data = json.dumps(message, ensure_ascii=True).encode()
    payload = _LENGTH.pack(len(data)) + data
    if fds:
        sent = socket.send_fds(sock, [payload], fds)
        payload = payload[sent:]
    if payload:
        sock.sendall(payload)


def receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict | None, list[int]]:
    """The next message and the descriptors that came with it; ``(None, [])`` at the end of
    the connection. Raises ``ValueError`` on a malformed message."""
    fds: list[int] = []
    head = b""
    while len(head) < _LENGTH.size:
        if max_fds and not fds:
            chunk, got, _flags, _addr = socket.recv_fds(sock, _LENGTH.size - len(head), max_fds)
            fds.extend(got)
        else:
            chunk = sock.recv(_LENGTH.size - len(head))
        if not chunk:
            _close_all(fds)
            return None, []
        head += chunk
    (length,) = _LENGTH.unpack(head)
    if length > MAX_MESSAGE:
        _close_all(fds)
        raise ValueError("message too long")
    body = bytearray()
    while len(body) < length:
        chunk = sock.recv(min(length - len(body), 1 << 20))
        if not chunk:
            _close_all(fds)
            return None, []
        body += chunk
    message = json.loads(body)
    if not isinstance(message, dict):
        _close_all(fds)
        raise ValueError("not a JSON object")
    return message, fds


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of ``sock`` (SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid


def safe_folder(folder: Path) -> bool:
    """Whether ``folder`` is this user's own, mode 0700, and no symbolic link."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    import stat

    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
            and stat.S_IMODE(st.st_mode) == 0o700)


def safe_socket(path: Path) -> bool:
    """Whether ``path`` is a socket of this user's, in a ``safe_folder``."""
    if not safe_folder(path.parent):
        return False
    import stat

    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISSOCK(st.st_mode) and st.st_uid == os.getuid()


def connect(home: Path, timeout: float | None = 5.0) -> socket.socket | None:
    """A connection to the resident of ``home``, or None if none can be reached safely (no
    socket, a socket of someone else's or in a folder others may write, a dead one)."""
    path = socket_path(home)
    if not safe_socket(path):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
        if peer_uid(sock) != os.getuid():
            sock.close()
            return None
    except OSError:
        sock.close()
        return None
    return sock


def request(home: Path, message: dict) -> dict | None:
    """Ask the resident of ``home`` one thing (``status``, ``stop``); its answer, or None if
    none runs."""
    sock = connect(home)
    if sock is None:
        return None
    try:
        send(sock, message)
        reply, _ = receive(sock)
        return reply
    except (OSError, ValueError):
        return None
    finally:
        sock.close()
