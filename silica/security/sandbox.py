"""What a tool process may do: the sandbox policy, one place for every tool run.

A tool (spec, ``--authorize``, call), the shell tool and a stdio MCP server each run confined
(the mechanism is ``silica.tools.sandbox``). This module says to what:

- **reads** everywhere except ``HIDDEN_IN_HOME`` under the home folder, ``$SILICA_HOME``
  (its ``tools``, ``packs`` and the server's own start folder stay readable: they are the
  code that runs), ``/run/user/<uid>`` (the session's agent sockets) and ``[sandbox]
  deny_read``;
- **writes** only to the workspace (the session's folder), the call's own temporary folder
  (``/tmp`` inside) and the paths the user granted the tool (``[tools.write_grant]``); inside
  the workspace ``PROTECTED`` stay read-only (shell start-up files, ``.git/config`` and
  ``.git/hooks``, a ``.git`` that is a file (a worktree's), silica's own tool folders);
- **network** none, unless granted (``[tools.network_grant]``): then only the granted hosts,
  through a proxy silica runs for the call; ``"*"`` is the whole network;
- **display** (the X server's socket) only when granted (``[tools] display_grant``).

Grants follow the environment grants' rule (``silica.security.env``): a grant keyed by the
tool's exact name is given whether or not the tool asked; a pattern key reaches only what a
tool asked for in its metadata (``network: api.example.org``, ``write: ~/Pictures``,
``display: true``), and never a pack's tools.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from silica.security.env import granted_items

Mode = Literal["require", "best-effort", "off"]
MODES: tuple[str, ...] = ("require", "best-effort", "off")

HIDDEN_IN_HOME: tuple[str, ...] = (
    ".ssh", ".aws", ".azure", ".config/gcloud", ".gnupg", ".netrc", ".git-credentials",
    ".config/gh", ".config/hub", ".docker/config.json", ".kube", ".password-store",
    ".local/share/keyrings", ".pki", ".mozilla", ".config/google-chrome", ".config/chromium",
    ".config/BraveSoftware", ".config/microsoft-edge", ".npmrc", ".pypirc", ".vault-token",
    ".cargo/credentials.toml", ".config/op", ".terraform.d", ".config/rclone",
)
"""Credential folders and files under the home folder no tool may read."""

PROTECTED: tuple[str, ...] = (
    ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc",
    ".zprofile", ".zshenv", ".zlogin", ".config/fish", ".inputrc", ".gitconfig", ".envrc",
    ".git/config", ".git/hooks", ".gitmodules", ".silica", ".agent", ".mcp.json", ".vscode",
)
"""Paths read-only even inside a writable folder: start-up files and code that runs later."""

HIDDEN_SYSTEM: tuple[str, ...] = (
    "/run/docker.sock", "/var/run/docker.sock", "/run/containerd", "/run/podman",
    "/run/snapd.socket", "/var/run/libvirt",
)
"""Sockets of daemons that act for whoever reaches them (a container engine is root)."""

HIDDEN_IN_TMP: tuple[str, ...] = ("ssh-*", "tmux-*", ".ICE-unix", "gpg-*", "keyring-*",
                                  "pulse-*", "krb5cc*", "systemd-private-*")
"""Sockets and tickets of the user's session in the shared temporary folder (matched when a
run starts, by ``silica.tools.sandbox``), and other runs' own folders."""

SILICA_HOME_READABLE: tuple[str, ...] = ("tools", "packs")
"""What of ``$SILICA_HOME`` a tool may read: the tool files themselves."""


@dataclass(frozen=True)
class Confinement:
    """What one tool process may touch. Paths are absolute; ``network`` is ``()`` for none,
    ``("*",)`` for all, else the host rules the proxy applies."""

    workspace: Path | None = None
    writable: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    visible: tuple[Path, ...] = ()  # read-only again inside a hidden folder
    protected: tuple[Path, ...] = ()
    network: tuple[str, ...] = ()
    display: bool = False
    label: str = "tool"  # who runs (a tool's name), for messages
    network_setting: str = ""  # how a host is granted to it ({host}); default: a tool's

    def __post_init__(self) -> None:
        if not self.network_setting:
            key = self.label if self.label.replace("_", "").replace("-", "").isalnum() \
                else f'"{self.label}"'
            object.__setattr__(self, "network_setting",
                               f"[tools.network_grant] {key} = [\"{{host}}\"]")

    @property
    def network_kind(self) -> Literal["none", "proxy", "all"]:
        if not self.network:
            return "none"
        return "all" if "*" in self.network else "proxy"

    def to_json(self) -> dict:
        return {"network": list(self.network), "network_kind": self.network_kind,
                "writable": [str(p) for p in ((self.workspace,) if self.workspace else ())
                             + self.writable],
                "extra_writes": [str(p) for p in self.writable],
                "display": self.display}

    def summary(self) -> str:
        """One short line for ``tools list``: what beyond the defaults it gets."""
        parts = ["network: " + ("all" if self.network_kind == "all" else
                                ", ".join(self.network) if self.network else "off")]
        if self.writable:
            parts.append("writes " + ", ".join(tilde(p) for p in self.writable))
        if self.display:
            parts.append("display")
        return "; ".join(parts)


@dataclass(frozen=True)
class SandboxAccess:
    """What one tool asked for of the sandbox and what it gets, for ``silica tools list``."""

    mode: str
    confinement: Confinement
    asked_network: tuple[str, ...] = ()
    asked_write: tuple[str, ...] = ()
    asked_display: bool = False

    def to_json(self) -> dict:
        c = self.confinement
        return {"mode": self.mode,
                "network": {"asked": list(self.asked_network), "granted": list(c.network)},
                "write": {"asked": list(self.asked_write),
                          "granted": [str(p) for p in c.writable]},
                "display": {"asked": self.asked_display, "granted": c.display}}

    def summary(self) -> str:
        """One short line: ``off`` when unconfined, else the network, writes and display."""
        if self.mode == "off":
            return "off (unconfined)"
        c = self.confinement
        granted_writes = {str(p) for p in c.writable}
        denied = [h for h in self.asked_network if h not in c.network and "*" not in c.network]
        denied += [w for w in self.asked_write
                   if str(Path(w).expanduser().absolute()) not in granted_writes]
        if self.asked_display and not c.display:
            denied.append("display")
        parts = [c.summary()]
        if denied:
            parts.append("asked, not granted: " + ", ".join(denied))
        return "; ".join(parts)


@dataclass(frozen=True)
class SandboxPolicy:
    """The user's sandbox settings and grants, turned into a ``Confinement`` per run."""

    mode: Mode = "best-effort"
    home: Path = field(default_factory=Path.home)
    silica_home: Path | None = None
    deny_read: tuple[Path, ...] = ()
    network_grants: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    write_grants: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    display_grants: tuple[str, ...] = ()

    @classmethod
    def from_settings(cls, settings, silica_home: Path | None = None) -> SandboxPolicy:
        tools, box = settings.tools, settings.sandbox
        return cls(mode=box.mode, silica_home=silica_home,
                   deny_read=tuple(Path(p).expanduser() for p in box.deny_read),
                   network_grants={k: tuple(v) for k, v in tools.network_grant.items()},
                   write_grants={k: tuple(str(p) for p in v)
                                 for k, v in tools.write_grant.items()},
                   display_grants=tuple(tools.display_grant))

    def hidden(self) -> tuple[Path, ...]:
        return _hidden(self.home, self.silica_home, self.deny_read, os.getcwd())

    def confinement(self, *, label: str, workspace: Path | None,
                    network: Sequence[str] = (), writable: Iterable[Path] = (),
                    display: bool = False, readable: Iterable[Path] = (),
                    network_setting: str = "") -> Confinement:
        """The confinement of one run: the defaults plus what was granted; ``readable``
        are folders inside a hidden one the run needs (the tool's own)."""
        visible = [self.silica_home / n for n in SILICA_HOME_READABLE] \
            if self.silica_home is not None else []
        roots = [workspace.absolute()] if workspace else []
        roots += [Path(p).absolute() for p in writable]
        # a folder it may write is not bound back read-only (an MCP server's start folder)
        visible += [p for p in map(lambda q: Path(q).absolute(), readable)
                    if not any(r == p or r in p.parents for r in roots)]
        protected = [r / rel for r in roots for rel in PROTECTED]
        # a worktree's or submodule's .git is a file naming the git folder: it stays too
        protected += [r / ".git" for r in roots if (r / ".git").is_file()]
        # silica itself and its Python: they run again, unconfined, after this tool
        protected += [p for p in _own_code() if any(r == p or r in p.parents for r in roots)]
        return Confinement(
            workspace=workspace.absolute() if workspace else None,
            writable=tuple(Path(p).absolute() for p in writable),
            hidden=self.hidden(), visible=tuple(dict.fromkeys(visible)),
            protected=tuple(dict.fromkeys(protected)),
            network=tuple(dict.fromkeys(network)), display=display, label=label,
            network_setting=network_setting)

    def for_tool(self, name: str, asked_network: Sequence[str], asked_write: Sequence[str],
                 asked_display: bool, from_pack: bool, *, workspace: Path | None,
                 readable: Iterable[Path] = ()) -> Confinement:
        """A tool's confinement, with the grants that reach it (see the module docstring)."""
        network = granted_items(self.network_grants, name, asked_network, from_pack)
        writes = granted_items(self.write_grants, name, asked_write, from_pack)
        display = bool(granted_items({p: ("display",) for p in self.display_grants}, name,
                                     ("display",) if asked_display else (), from_pack))
        return self.confinement(label=name, workspace=workspace, network=network,
                                writable=[Path(w).expanduser() for w in writes],
                                display=display, readable=readable)


    def access(self, name: str, asked_network: Sequence[str], asked_write: Sequence[str],
               asked_display: bool, from_pack: bool) -> SandboxAccess:
        """What ``name`` asked for and gets (``silica tools list``)."""
        conf = self.for_tool(name, asked_network, asked_write, asked_display, from_pack,
                             workspace=None)
        return SandboxAccess(self.mode, conf, tuple(asked_network), tuple(asked_write),
                             asked_display)


@functools.lru_cache(maxsize=8)
def _hidden(home: Path, silica_home: Path | None, deny_read: tuple[Path, ...],
            cwd: str) -> tuple[Path, ...]:
    """The hidden paths of a policy, absolute from ``cwd``; made once per process, policy and
    working folder (``silica tools list`` asks for every tool's)."""
    paths = [home / rel for rel in HIDDEN_IN_HOME]
    if silica_home is not None:
        paths.append(silica_home)
    runtime = Path(f"/run/user/{os.getuid()}")
    paths += [runtime, *map(Path, HIDDEN_SYSTEM), *deny_read]
    return tuple(dict.fromkeys(p.absolute() for p in paths))


@functools.cache
def _own_code() -> tuple[Path, ...]:
    import sys

    import silica

    return (Path(silica.__file__).parent.absolute(), Path(sys.prefix).absolute())


def check_write_grant(path: str, home: Path | None = None) -> Path:
    """A granted write path, expanded; ``ValueError`` saying what to write instead when it
    is outside the home folder, the home folder itself, or one of the hidden folders."""
    home = (home or Path.home()).absolute()
    expanded = Path(os.path.expanduser(path))
    if not expanded.is_absolute():
        raise ValueError(f"{path!r} is not an absolute path: write it from ~ (e.g. "
                         "\"~/Pictures/out\")")
    resolved = Path(os.path.normpath(expanded))
    if resolved == home or home not in resolved.parents:
        raise ValueError(f"{path!r} is not a folder inside your home folder ({home}): grant a "
                         "folder such as \"~/Pictures/out\", never the home folder itself or a "
                         "place outside it")
    for rel in HIDDEN_IN_HOME:
        secret = home / rel
        if resolved == secret or secret in resolved.parents or resolved in secret.parents:
            raise ValueError(f"{path!r} holds or is inside {tilde(secret)}, which no tool "
                             "may touch; grant another folder")
    return resolved


def tilde(path: Path) -> str:
    """``path`` with the home folder written as ``~``."""
    home = str(Path.home())
    text = str(path)
    return "~" + text[len(home):] if text == home or text.startswith(home + os.sep) else text
