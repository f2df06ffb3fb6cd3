"""A pack's files: copy them safely, keep only the tools the manifest lists, hash them.

The hash of an installed pack covers every file and link in it except what silica itself
writes there: ``_silica_toolspec.py`` (discovery keeps it current in every tools folder),
its temporary files, and ``__pycache__``. So reading a pack's tools never looks like a
local edit, and any edit by a person does.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from silica.packs.errors import ManifestError
from silica.packs.manifest import PackManifest
from silica.packs.safety import Budget, file_mode, walk_pack
from silica.tools.helper import HELPER_NAME

Files = dict[str, str]  # relative posix path -> "sha256:<hex>" or "link:<target>"

_CHUNK = 1024 * 1024


def copy_pack(src: Path, dest: Path) -> None:
    """Copy the pack tree at ``src`` to the new folder ``dest``, checking every entry.

    Raises ``UnsafePack`` (see ``silica.packs.safety``) before ``dest`` is made: the whole
    tree is listed and counted first. ``.git`` and ``__pycache__`` are left behind. Files are
    written readable by all, executable only if they were.
    """
    entries = list(walk_pack(src))  # at most MAX_FILES: a tree over the cap stops the listing
    dest.mkdir(mode=0o755)
    written = Budget()
    for entry in entries:
        target = dest.joinpath(*entry.rel.parts)
        if entry.kind == "dir":
            target.mkdir(mode=0o755)
        elif entry.kind == "link":
            os.symlink(entry.link, target)
        else:
            _copy_file(entry.path, target, entry.rel, written)
            os.chmod(target, file_mode(entry.mode))


def _copy_file(src: Path, target: Path, rel, written: Budget) -> None:
    with open(src, "rb") as fin, open(target, "xb") as fout:
        while chunk := fin.read(_CHUNK):
            written.add_bytes(rel, len(chunk))  # the file may have grown since it was listed
            fout.write(chunk)


def is_tool_file(rel: str) -> bool:
    """A tool file at the top of a pack (``x.py``, not a ``_`` or ``.`` helper)."""
    return "/" not in rel and rel.endswith(".py") and not rel.startswith(("_", "."))


def select_tools(folder: Path, manifest: PackManifest, label: str) -> None:
    """Delete the tool files the manifest's ``tools`` list leaves out (helpers stay).

    Raises ``ManifestError`` if the list names a tool the pack does not have.
    """
    if manifest.tools is None:
        return
    present = {name[:-3] for name in os.listdir(folder) if is_tool_file(name)}
    missing = [t for t in manifest.tools if t not in present]
    if missing:
        raise ManifestError(f"{label}: field 'tools' lists {missing[0]!r}, but the pack has no "
                            f"{missing[0]}.py; add the file or take it off the list")
    for stem in sorted(present - set(manifest.tools)):
        (folder / f"{stem}.py").unlink()


def file_hashes(root: Path) -> Files:
    """Every file and link of the pack at ``root`` with its hash (see the module docstring)."""
    files: Files = {}
    unlimited = Budget(sys.maxsize, sys.maxsize)
    for entry in walk_pack(root, unlimited):
        rel = entry.rel.as_posix()
        if rel == HELPER_NAME or (len(entry.rel.parts) == 1 and rel.startswith(".silica-")):
            continue
        if entry.kind == "link":
            files[rel] = "link:" + entry.link
        elif entry.kind == "file":
            digest = hashlib.sha256()
            with open(entry.path, "rb") as f:
                while chunk := f.read(_CHUNK):
                    digest.update(chunk)
            files[rel] = "sha256:" + digest.hexdigest()
    return files


def content_hash(files: Files) -> str:
    """One hash for a whole pack: its files' paths and hashes."""
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(f"{rel}\0{files[rel]}\n".encode())
    return "sha256:" + digest.hexdigest()


def diff(old: Files, new: Files, tools_only: bool = False) -> tuple[list[str], list[str],
                                                                    list[str]]:
    """``(added, changed, removed)`` paths from ``old`` to ``new``; with ``tools_only``, tool
    names (file stems) of the pack's tool files."""
    if tools_only:
        old = {k[:-3]: v for k, v in old.items() if is_tool_file(k)}
        new = {k[:-3]: v for k, v in new.items() if is_tool_file(k)}
    added = sorted(set(new) - set(old))
    removed = sorted(set(old) - set(new))
    changed = sorted(k for k in set(old) & set(new) if old[k] != new[k])
    return added, changed, removed
