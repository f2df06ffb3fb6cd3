"""Which project folders may run code: none until the user says so with ``silica trust``.

Cloning a repository must not run its code. A project's ``.silica/tools`` and
``.agent/tools`` are therefore untrusted until the user trusts the project (its git root,
or the folder itself outside a repository); then every tool folder at or below it is
trusted, except inside a repository nested in it (its own ``.git``: a clone, a submodule, a
vendored dependency), which is a project of its own and needs its own ``silica trust``.
Nothing in an untrusted folder is read for a spec, run, or written to. The user's own tools
folder and installed packs are always trusted.

The list lives in ``$SILICA_HOME/trusted.json``, written atomically; a missing or damaged
file trusts nothing, and saying so is the caller's job (``TrustStore.problem``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from silica import locks
from silica.errors import SilicaError
from silica.fsutil import write_atomic
from silica.paths import project_root

TRUST_NAME = "trusted.json"
TRUST_FORMAT = 1


class TrustError(SilicaError):
    """The trust list cannot be read or written."""


@dataclass(frozen=True)
class TrustedPath:
    path: Path
    since: str


def trust_command(folder: Path) -> str:
    """The command that trusts the project ``folder`` belongs to."""
    return f"silica trust {project_root(folder)}"


class TrustStore:
    """The trusted project folders recorded under a silica home."""

    def __init__(self, home: Path) -> None:
        self.file = home / TRUST_NAME
        self.problem = ""  # why the file could not be read ("" when it could)
        self._entries: list[TrustedPath] | None = None

    def entries(self) -> list[TrustedPath]:
        if self._entries is None:
            self._entries = self._load()
        return list(self._entries)

    def _load(self) -> list[TrustedPath]:
        try:
            raw = self.file.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            self.problem = f"cannot read {self.file}: {exc.strerror or exc}"
            return []
        try:
            data = json.loads(raw)
            if data.get("format") != TRUST_FORMAT:
                raise ValueError("not a trust list of this format")
            items = data["trusted"]
            entries = [TrustedPath(Path(i["path"]), str(i.get("since", ""))) for i in items
                       if isinstance(i, dict) and isinstance(i.get("path"), str)
                       and os.path.isabs(i["path"])]
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            self.problem = (f"{self.file} is damaged, so no project folder is trusted; "
                            "move it away and run 'silica trust' again")
            return []
        return entries

    def is_trusted(self, folder: Path) -> bool:
        """Whether ``folder`` is at or below a trusted path, with no other repository in
        between: a repository nested in a trusted one (a clone, a submodule, a vendored
        dependency: anything with its own ``.git``) is a project of its own."""
        return self.trusted_by(folder) is not None

    def trusted_by(self, folder: Path) -> Path | None:
        """The trusted path that makes ``folder`` trusted (the closest, as ``is_trusted``
        reads it), or ``None``."""
        folder = Path(os.path.abspath(folder))
        closest: Path | None = None
        for entry in self.entries():
            if folder != entry.path and entry.path not in folder.parents:
                continue
            between = [folder, *folder.parents][:len(folder.parts) - len(entry.path.parts)]
            if any((d / ".git").exists() for d in between):
                continue
            if closest is None or len(entry.path.parts) > len(closest.parts):
                closest = entry.path
        return closest

    def add(self, path: Path) -> Path:
        """Trust the project that holds ``path``; returns the path recorded."""
        if not path.exists():
            raise TrustError(f"{path} does not exist; give the project folder to trust")
        if not path.is_dir():
            raise TrustError(f"{path} is not a folder; give the project folder to trust")
        root = project_root(path)
        with self._locked():
            entries = [e for e in self.entries() if e.path != root]
            entries.append(TrustedPath(root, datetime.now(UTC).isoformat(timespec="seconds")))
            self._save(entries)
        return root

    def remove(self, path: Path) -> list[Path]:
        """Stop trusting ``path`` (or the project that holds it, or the trusted folder it is
        in, as ``is_trusted`` reads it: a subfolder's tools stop running); returns what was
        removed, as it was recorded."""
        targets = {Path(os.path.abspath(path)), path.resolve()}
        if path.exists():
            targets.add(project_root(path))
        with self._locked():
            for folder in (Path(os.path.abspath(path)), path.resolve()):
                if (by := self.trusted_by(folder)) is not None:
                    targets.add(by)
            kept = [e for e in self.entries() if e.path not in targets]
            removed = [e.path for e in self.entries() if e.path in targets]
            if removed:
                self._save(kept)
        return removed

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the trust list's lock and read it fresh: two commands at once lose nothing."""
        lock_path = self.file.with_name(self.file.name + ".lock")
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            fd = locks.wait_for(lock_path)
        except OSError as exc:
            raise TrustError(f"cannot write {lock_path}: {exc.strerror or exc}; "
                             "check that the silica home is writable") from exc
        try:
            self._entries, self.problem = None, ""
            self.entries()
            if self.problem:
                raise TrustError(self.problem)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _save(self, entries: list[TrustedPath]) -> None:
        data = {"format": TRUST_FORMAT,
                "trusted": [{"path": str(e.path), "since": e.since} for e in entries]}
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.file, json.dumps(data, indent=2) + "\n")
        except OSError as exc:
            raise TrustError(f"cannot write {self.file}: {exc.strerror or exc}; "
                             "check that the silica home is writable") from exc
        self._entries = entries
