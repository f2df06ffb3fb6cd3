"""Where a session's tools run: its workspace, a folder under ``[serve] allowed_workspaces``
(default: the folder ``silica serve`` started in).

A workspace given by a client is resolved (``~`` expanded, links followed, relative to the
default workspace) and must be an existing folder inside an allowed one, so a link inside an
allowed folder that points outside is refused. A session's workspace is kept beside it, in
``<home>/sessions/<id>/serve.json``, and removed with it; a session without one (started by
``silica chat``) uses the default workspace.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from silica.agent.sessions import session_folder
from silica.config import Settings
from silica.fsutil import write_atomic
from silica.serve.errors import ApiError

SIDECAR = "serve.json"


def allowed_roots(settings: Settings, started: Path) -> tuple[Path, ...]:
    """The folders workspaces may be in, resolved; ``(started,)`` when none is configured."""
    configured = settings.serve.allowed_workspaces
    if not configured:
        return (started,)
    return tuple(Path(os.path.expanduser(p)).resolve() for p in configured)


def default_workspace(roots: tuple[Path, ...], started: Path) -> Path:
    """The folder serve started in if it is allowed, else the first allowed folder."""
    return started if any(_inside(started, root) for root in roots) else roots[0]


def check_workspace(given: str, roots: tuple[Path, ...], default: Path) -> Path:
    """``given`` as a resolved folder inside one of ``roots``, or ``ApiError`` (400) saying
    which folders are allowed."""
    allowed = ", ".join(str(r) for r in roots)
    if not isinstance(given, str) or not given.strip() or "\0" in given:
        raise ApiError(400, "invalid_workspace", "workspace must be a folder path, e.g. "
                       f"{default}")
    path = Path(os.path.expanduser(given.strip()))
    if not path.is_absolute():
        path = default / path
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise ApiError(400, "workspace_not_found", f"the workspace {given!r} does not exist; "
                       f"give a folder under {allowed}") from None
    if not any(_inside(resolved, root) for root in roots):
        raise ApiError(403, "workspace_not_allowed", (
            f"the workspace {given!r} is outside the folders silica serve may use ({allowed});"
            " give a folder under one of them, or add it to [serve] allowed_workspaces in "
            "config.toml"))
    if not resolved.is_dir():
        raise ApiError(400, "workspace_not_found", f"the workspace {given!r} is not a folder;"
                       f" give a folder under {allowed}")
    return resolved


def read_workspace(session_id: str, home: Path) -> str | None:
    """The workspace kept for the session, or ``None``."""
    try:
        data = json.loads((session_folder(session_id, home) / SIDECAR).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    value = data.get("workspace") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def write_workspace(session_id: str, home: Path, workspace: Path) -> None:
    """Keep ``workspace`` as the session's (``ApiError`` 500 if it cannot be written)."""
    folder = session_folder(session_id, home)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / SIDECAR, json.dumps({"workspace": str(workspace)}).encode())
    except OSError as exc:
        raise ApiError(500, "session_not_saved", f"cannot keep the workspace of session "
                       f"{session_id} in {folder}: {exc.strerror or exc}; check the disk and "
                       "the permissions of the silica home") from exc


def session_workspace(session_id: str, home: Path, roots: tuple[Path, ...],
                      default: Path) -> Path:
    """The folder the session's tools run in: its own (checked again: the allowed folders
    may have changed since) or the default."""
    kept = read_workspace(session_id, home)
    return check_workspace(kept, roots, default) if kept else default


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)
