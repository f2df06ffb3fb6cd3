"""Where silica keeps things: its home, the user's tools folder, project tool folders."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_TOOL_DIRS = (".silica/tools", ".agent/tools")


def silica_home() -> Path:
    """``$SILICA_HOME``, else ``~/.silica``."""
    env = os.environ.get("SILICA_HOME")
    return Path(env).expanduser() if env else Path.home() / ".silica"


def user_tools_dir(home: Path | None = None) -> Path:
    """``$SILICA_TOOLS_DIR``, else ``<silica home>/tools``."""
    env = os.environ.get("SILICA_TOOLS_DIR")
    if env:
        return Path(env).expanduser()
    return (home or silica_home()) / "tools"


def project_tool_dirs(cwd: Path) -> list[Path]:
    """Project tool folders from ``cwd`` up to the git root, closest first.

    Outside a git repository only ``cwd`` itself is searched, so that a stray folder in a
    parent directory never adds tools by surprise.
    """
    cwd = cwd.resolve()
    chain = [cwd]
    for parent in cwd.parents:
        if (chain[-1] / ".git").exists():
            break
        chain.append(parent)
    else:
        if not (chain[-1] / ".git").exists():
            chain = [cwd]
    return [d / sub for d in chain for sub in PROJECT_TOOL_DIRS]


def project_root(path: Path) -> Path:
    """The git root that holds ``path``, else ``path`` itself (resolved)."""
    path = path.resolve()
    for candidate in (path, *path.parents):
        if (candidate / ".git").exists():
            return candidate
    return path


def project_tool_folder(cwd: Path) -> Path:
    """Where a new project tool goes: the closest project tools folder that exists, else
    ``.silica/tools`` at the project's root (the git root, or ``cwd`` outside one)."""
    for folder in project_tool_dirs(cwd):
        if folder.is_dir():
            return folder
    return project_root(cwd) / PROJECT_TOOL_DIRS[0]


def cache_dir(home: Path | None = None) -> Path:
    return (home or silica_home()) / "cache"
