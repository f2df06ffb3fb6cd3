"""The spec cache: a tool's ``--toolspec`` output, keyed by everything that can change it.

The key is a hash of the tool file's bytes, the ``_`` helper files beside it, the toolspec
helper's version and the uv binary. An unchanged tool is never run to list it. Entries are
one small JSON file each under ``$SILICA_HOME/cache/specs/``; a corrupt or foreign entry is
ignored and rewritten, and a cache folder that cannot be written only costs speed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from silica.fsutil import write_atomic

CACHE_FORMAT = 1


def spec_cache_key(file_bytes: bytes, helper_hashes: list[str], helper_version: str,
                   uv_identity: str) -> str:
    h = hashlib.sha256()
    for part in (f"silica-spec-cache/{CACHE_FORMAT}", helper_version, uv_identity,
                 *helper_hashes):
        h.update(part.encode() + b"\0")
    h.update(file_bytes)
    return h.hexdigest()


class SpecCache:
    """Raw ``--toolspec`` JSON by cache key."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> Any | None:
        try:
            entry = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(entry, dict) or entry.get("format") != CACHE_FORMAT \
                or entry.get("key") != key or "specs" not in entry:
            return None
        return entry["specs"]

    def put(self, key: str, specs: Any) -> None:
        """Store atomically; failures to write are ignored (the cache is only an aid)."""
        data = json.dumps({"format": CACHE_FORMAT, "key": key, "specs": specs})
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_atomic(self._path(key), data)
        except OSError:
            pass
