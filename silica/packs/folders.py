"""Where installed packs live; light enough for discovery to import on every scan."""

from __future__ import annotations

import os
import re
from pathlib import Path

from silica.paths import silica_home

PACK_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
_PACK_NAME = re.compile(PACK_NAME_PATTERN)


def packs_dir(home: Path | None = None) -> Path:
    """``<silica home>/packs``: one folder per installed pack, and the lock file."""
    return (home or silica_home()) / "packs"


def pack_dirs(home: Path | None = None) -> list[tuple[str, Path]]:
    """``(name, folder)`` of every installed pack, by name. Never raises."""
    root = packs_dir(home)
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    return [(n, root / n) for n in names if _PACK_NAME.match(n) and (root / n).is_dir()]
