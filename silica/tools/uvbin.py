"""Finding the ``uv`` binary: ``$SILICA_UV``, the ``uv`` package's own binary, then PATH."""

from __future__ import annotations

import os
import shutil
from functools import cache

from silica.errors import UvNotFound


@cache
def find_uv() -> str:
    """The path of a ``uv`` binary; raises ``UvNotFound`` with what to do."""
    override = os.environ.get("SILICA_UV")
    if override:
        if os.path.isfile(override) and os.access(override, os.X_OK):
            return override
        raise UvNotFound(f"SILICA_UV points to {override!r}, which is not an executable file; "
                         "fix or unset it")
    try:
        import uv

        return uv.find_uv_bin()
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("uv")
    if found:
        return found
    raise UvNotFound("uv was not found: install it with 'pip install uv' (silica's own "
                     "dependency) or put it on PATH")


def uv_identity() -> str:
    """A cheap fingerprint of the uv binary (path, size, mtime), for cache keys; no process."""
    try:
        path = find_uv()
        st = os.stat(path)
    except (UvNotFound, OSError):
        return "no-uv"
    return f"{path}:{st.st_size}:{int(st.st_mtime)}"
