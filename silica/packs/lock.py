"""Where packs live (``$SILICA_HOME/packs/<name>/``) and the lock file that records them.

The lock file, ``$SILICA_HOME/packs/silica-packs.lock``, is JSON: for each pack where it came
from, what was resolved (a git commit, an archive's sha256) and a hash of every installed
file, so that ``update`` can fetch the same source again and notice local edits. It is
written atomically (a temporary file, then a rename).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from silica.fsutil import write_atomic
from silica.packs.errors import PackError
from silica.packs.folders import packs_dir

LOCK_NAME = "silica-packs.lock"
LOCK_FORMAT = 1


class LockEntry(BaseModel):
    """What silica knows about one installed pack."""

    name: str
    version: str
    source: str  # as given; an absolute path for a local source
    kind: str  # "folder", "git" or "archive"
    ref: str | None = None  # the git ref asked for (None: the default branch)
    commit: str | None = None  # git: the commit installed
    digest: str | None = None  # archive: "sha256:<hex>" of the archive
    content_hash: str
    files: dict[str, str] = Field(default_factory=dict)  # path -> hash, for local edits
    installed_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(
        timespec="seconds"))


class Lock(BaseModel):
    lock_format: int = LOCK_FORMAT
    packs: dict[str, LockEntry] = Field(default_factory=dict)


def read_lock(home: Path | None = None) -> Lock:
    """The lock file (empty if there is none yet); ``PackError`` if it is damaged."""
    path = packs_dir(home) / LOCK_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Lock()
    except OSError as exc:
        raise PackError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        return Lock.model_validate(json.loads(text))
    except (ValueError, ValidationError) as exc:
        raise PackError(f"{path} is damaged ({str(exc).splitlines()[0]}); move it aside and "
                        "install your packs again") from exc


def write_lock(lock: Lock, home: Path | None = None) -> None:
    """Replace the lock file in one step: readers see the old one or the new one."""
    folder = packs_dir(home)
    folder.mkdir(parents=True, exist_ok=True)
    data = lock.model_dump(mode="json")
    data["packs"] = dict(sorted(data["packs"].items()))
    text = json.dumps(data, indent=2) + "\n"
    write_atomic(folder / LOCK_NAME, text, prefix=".lock-", mode=0o644)  # no secrets in it
