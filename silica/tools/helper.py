"""Keeping ``_silica_toolspec.py`` (the stdlib helper tools import) in every tools folder."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from pathlib import Path

from silica.fsutil import write_atomic

HELPER_NAME = "_silica_toolspec.py"
# Bounded: a hostile helper's 5000-digit version must not crash int() in every listing.
_VERSION = re.compile(r'^HELPER_VERSION\s*=\s*["\'](\d{1,9})["\']', re.M)
_MAX_HELPER_BYTES = 1024 * 1024  # the real helper is ~15 KB; a bigger one is not ours


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
        with open(target, "rb") as f:
            current = f.read(_MAX_HELPER_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        current = None
    if current is not None and int(helper_version(current)) >= int(ours):
        return True
    try:
        write_atomic(target, helper_source(), prefix=".silica-", mode=0o644)
        return True
    except OSError:
        return False
