"""Keeping ``_silica_toolspec.py`` (the stdlib helper tools import) in every tools folder."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from functools import cache
from importlib import resources
from pathlib import Path

HELPER_NAME = "_silica_toolspec.py"
_VERSION = re.compile(r'^HELPER_VERSION\s*=\s*["\'](\d+)["\']', re.M)


@cache
def helper_source() -> str:
    return (resources.files("silica.tools") / HELPER_NAME).read_text(encoding="utf-8")


def helper_version(source: str | None = None) -> str:
    m = _VERSION.search(helper_source() if source is None else source)
    return m.group(1) if m else "0"


def ensure_helper(folder: Path) -> bool:
    """Write the helper into ``folder`` if it is missing or older than silica's.

    Returns True if the folder now holds a current helper. Never raises: a read-only or
    missing folder simply keeps what it has (discovery goes on without it).
    """
    target = folder / HELPER_NAME
    ours = helper_version()
    try:
        current = target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        current = None
    if current is not None and int(helper_version(current)) >= int(ours):
        return True
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".silica-", suffix=".py")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(helper_source())
        os.replace(tmp, target)
        return True
    except OSError:
        with contextlib.suppress(OSError, UnboundLocalError):
            os.unlink(tmp)
        return False
