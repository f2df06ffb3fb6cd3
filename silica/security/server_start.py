"""Where an MCP server from config.toml starts, so that the project silica runs in cannot
plant code in it.

A stdio server's working folder decides more than where it writes: ``python -m NAME`` and
``python -c`` import from it first, ``npx`` runs a ``node_modules/.bin`` script found by
walking up from it, and a relative command (``./server``, ``bin/server``), a relative path
in ``args`` or a relative entry of ``PATH`` or ``PYTHONPATH`` is read from it. So a server
starts:

- where its ``cwd`` says, when it has one (a relative ``cwd`` is taken from the silica
  home, where config.toml is, and ``~`` is expanded): the user named the folder;
- in the current folder, as it always did, when the current project is trusted
  (``silica trust``);
- otherwise in a private folder of its own, ``$SILICA_HOME/mcp-servers/<name>/`` (made
  0700; one per server, so one server's files are never another's code; a name with
  characters outside ``[A-Za-z0-9_-]`` gets them made ``_`` and a hash added). Its parents
  are the silica home's: a silica home inside a folder you do not trust defeats this.

A command holding a ``/`` that is not absolute is made absolute against that folder, so it
never depends on where silica runs; a bare name is looked up on ``PATH`` as usual. ``args``
are passed as written: a relative path in them is read from the same folder.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from silica.paths import project_root, silica_home
from silica.security.trust import TrustStore, trust_command

SERVERS_DIR = "mcp-servers"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
# What a server prints (or silica sees) when the folder it started in lacks what it wanted.
_NOT_FOUND = re.compile(r"No module named|Cannot find module|could not determine executable|"
                        r"No such file|not found|ENOENT|E404|ENOTCACHED|can.t open file",
                        re.IGNORECASE)


@dataclass(frozen=True)
class ServerStart:
    """Where one stdio server starts, and why."""

    cwd: Path
    command: str
    project: Path | None = None
    """The untrusted project kept out (``None`` when the server runs where it always did)."""
    relative: bool = False
    """Whether ``command`` was a relative path, taken from ``cwd``."""

    def hint(self, said: str, missing_command: bool = False) -> str:
        """What to tell the user when a server kept out of ``project`` did not start and
        ``said`` (its stderr) sounds like it looked for something there, or its relative
        command was missing ("" otherwise)."""
        looked = (missing_command and self.relative) or _NOT_FOUND.search(said)
        if self.project is None or not looked:
            return ""
        return (f"; it started in {self.cwd}, not in {self.project}, since that project is "
                "not trusted: give the server a \"cwd\" in config.toml, or run "
                f"'{trust_command(self.project)}' if you trust the project")


def server_start(name: str, command: str, cwd: Path | None,
                 here: Path | None = None, home: Path | None = None) -> ServerStart:
    """Where the stdio server ``name`` (``command``, ``cwd`` from its settings) starts when
    silica runs in ``here`` (default: the current folder); see the module docstring."""
    home = silica_home() if home is None else home
    here = Path.cwd() if here is None else here
    project: Path | None = None
    if cwd is not None:
        folder = home / cwd.expanduser()  # an absolute cwd stays as it is
    elif TrustStore(home).is_trusted(here):
        folder = here
    else:
        project = project_root(here)
        folder = home / SERVERS_DIR / _folder_name(name)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    command = os.path.expanduser(command)
    relative = "/" in command and not os.path.isabs(command)
    if relative:
        command = os.path.abspath(folder / command)
    return ServerStart(Path(os.path.abspath(folder)), command, project, relative)


def server_cache(name: str, home: Path | None = None) -> Path:
    """The server's own package cache (``uvx``, ``npx``), made 0700: inside the sandbox the
    user's caches are read-only (code other tools run later), so a server fills its own,
    ``$SILICA_HOME/mcp-servers/.caches/<name>/``."""
    folder = (silica_home() if home is None else home) / SERVERS_DIR / ".caches" / \
        _folder_name(name)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def _folder_name(name: str) -> str:
    """``name`` as a folder name: itself when it is plain, else made plain and told apart
    from other names by a hash (``a.b`` and ``a_b`` never share a folder)."""
    safe = _UNSAFE.sub("_", name)
    if safe == name and name:
        return name
    return f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
