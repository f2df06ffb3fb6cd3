"""What one ``silica serve`` runs with: settings, home, token, workspaces, bus."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from silica.config import Settings
from silica.errors import SilicaError
from silica.paths import silica_home

LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is reachable from this machine only."""
    host = host.strip().strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ExposedWithoutToken(SilicaError):
    """A daemon reachable from other machines with no token: anyone could run the tools."""


def check_exposure(loopback: bool, token: str | None) -> None:
    """The rule every daemon keeps, however it is started: one that listens on an address
    other machines reach needs a token. ``ExposedWithoutToken`` otherwise."""
    if not loopback and not token:
        raise ExposedWithoutToken(
            "silica serve on an address other machines reach needs a token: anyone who "
            "reaches it can run your tools; give a token, or serve on 127.0.0.1")


@dataclass(frozen=True)
class ServeOptions:
    """``settings`` as the daemon's agents use them (``--allow-shell`` applied), the silica
    ``home``, the ``token`` every request needs (``None``: none), whether the daemon listens
    on a ``loopback`` address only (then requests must name a loopback host: DNS
    rebinding), the folders a workspace may be in (resolved) and the default one, and the
    Redis URL of the bus (``None``: in-process)."""

    settings: Settings
    home: Path
    token: str | None
    loopback: bool
    workspaces: tuple[Path, ...]
    default_workspace: Path
    redis: str | None = None
    no_worker: bool = False  # a front: turns go to the queue for silica worker processes

    @classmethod
    def make(cls, settings: Settings, *, home: Path | None = None, cwd: Path | None = None,
             token: str | None = None, host: str = "127.0.0.1", allow_shell: bool = False,
             redis: str | None = None, no_worker: bool = False) -> ServeOptions:
        """Options for a daemon started in ``cwd`` (default: the current directory).
        ``allow_shell``: offer the shell tool and let every command run (nobody is there to
        ask); without it, ``[shell] enabled`` offers it and only ``[shell] allow`` runs."""
        from silica.serve.workspaces import allowed_roots, default_workspace

        if allow_shell:  # "*" alone allows every command (silica.tools.shell)
            settings = settings.model_copy(update={"shell": settings.shell.model_copy(
                update={"enabled": True, "allow": ["*"]})})
        started = (cwd or Path.cwd()).resolve()
        roots = allowed_roots(settings, started)
        return cls(settings=settings, home=home or silica_home(), token=token or None,
                   loopback=is_loopback(host), workspaces=roots,
                   default_workspace=default_workspace(roots, started),
                   redis=redis or settings.serve.redis, no_worker=no_worker)
