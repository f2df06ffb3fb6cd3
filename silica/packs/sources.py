"""Where a pack comes from: a local folder, a git repository, or an archive (file or URL).

``parse_source`` tells the kinds apart; ``fetch`` brings a pack's files into a work folder
(a clone, a download, an unpacked archive) and says where the pack's manifest is. Nothing
fetched is run: a git clone runs no code of the repository, an archive is only unpacked.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from silica.packs.archives import extract
from silica.packs.download import download
from silica.packs.errors import ManifestError, PackError
from silica.packs.manifest import MANIFEST_NAME
from silica.packs.safety import Budget
from silica.security.urls import mask_urls

Status = Callable[[str], None]

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".zip", ".tar", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
GIT_TIMEOUT = 600.0
_GIT_URL = re.compile(r"^(git|ssh|file|git\+ssh|ssh\+git)://|^[\w.-]+@[\w.-]+:")


class SourceKind(StrEnum):
    FOLDER = "folder"
    GIT = "git"
    ARCHIVE = "archive"


@dataclass(frozen=True)
class Source:
    """A pack's source: its kind, where it is (an absolute path for local sources, else the
    URL as given), and for git the ref asked for (None: the default branch)."""

    kind: SourceKind
    location: str
    ref: str | None = None

    @property
    def is_url(self) -> bool:
        return "://" in self.location or bool(_GIT_URL.match(self.location))


@dataclass
class Fetched:
    root: Path  # the folder whose top holds silica-pack.toml
    commit: str | None = None  # git: the commit checked out
    digest: str | None = None  # archive: "sha256:<hex>" of the archive's bytes


def parse_source(text: str, ref: str | None = None) -> Source:
    """The source a user typed: ``SOURCE`` or ``SOURCE#REF`` (git only), or ``ref`` given apart.

    http(s) URLs whose path ends in an archive suffix are archives; other URLs (and
    ``user@host:path``) are git. A local folder holding ``.git`` (or a bare repository) is git;
    any other local folder is a folder; a local file is an archive.
    """
    text = text.strip()
    if not text:
        raise PackError("no source given; pass a folder, a git URL, or an archive file or URL")
    if "#" in text and not Path(text).expanduser().exists():
        text, _, given = text.rpartition("#")
        if ref and given and given != ref:
            raise PackError(f"two refs given ({given!r} after '#', and {ref!r}); give one")
        ref = ref or given or None
    if re.match(r"^https?://", text, re.I):
        url_path = urllib.parse.urlparse(text).path.lower()
        kind = SourceKind.ARCHIVE if url_path.endswith(ARCHIVE_SUFFIXES) else SourceKind.GIT
        return _with_ref(Source(kind, text), ref)
    if _GIT_URL.match(text):
        return Source(SourceKind.GIT, text, ref)
    path = Path(text).expanduser().resolve()
    if path.is_dir():
        bare = (path / "HEAD").is_file() and (path / "objects").is_dir()
        kind = SourceKind.GIT if (path / ".git").exists() or bare else SourceKind.FOLDER
        return _with_ref(Source(kind, str(path)), ref)
    if path.is_file():
        return _with_ref(Source(SourceKind.ARCHIVE, str(path)), ref)
    if not path.exists():
        raise PackError(f"{text} does not exist; check the path, or give a git URL (like "
                        "https://host/team/tools.git) or an archive's URL")
    raise PackError(f"{text} is not a folder, an archive file or a URL; check the path "
                    "(a git URL looks like https://host/team/tools.git)")


def _with_ref(source: Source, ref: str | None) -> Source:
    if ref and source.kind is not SourceKind.GIT:
        raise PackError(f"a ref ({ref!r}) applies only to git sources, and {source.location} "
                        f"is {'an' if source.kind is SourceKind.ARCHIVE else 'a'} "
                        f"{source.kind}; leave the ref out")
    return Source(source.kind, source.location, ref)


def fetch(source: Source, work: Path, status: Status | None = None) -> Fetched:
    """Bring the pack at ``source`` into the new folder ``work``; nothing else is written.

    A local folder is not copied here (the caller copies it, checking every file).
    """
    say = status or (lambda _message: None)
    local = Path(source.location)
    if not source.is_url and source.kind is not SourceKind.GIT and not local.exists():
        raise PackError(f"{source.location} is gone; install the pack again from where it is "
                        "now (silica packs install SOURCE --force)")
    if source.kind is SourceKind.FOLDER:
        return Fetched(pack_root(Path(source.location), source.location))
    work.mkdir(mode=0o700)
    if source.kind is SourceKind.GIT:
        commit = _clone(source, work / "repo", say)
        return Fetched(pack_root(work / "repo", source.location), commit=commit)
    archive = Path(source.location)
    if source.is_url:
        archive = work / "download"
        say(f"downloading {mask_urls(source.location)}")
        digest = download(source.location, archive, say)
    else:
        digest = _sha256(archive)
    say(f"unpacking {Path(source.location).name}")
    extract(archive, work / "unpacked", source.location)
    return Fetched(pack_root(work / "unpacked", source.location), digest=digest)


def pack_root(folder: Path, label: str) -> Path:
    """The folder holding the manifest: ``folder`` itself, or its one top-level folder (as in
    an archive of ``tools-1.0/...``)."""
    if (folder / MANIFEST_NAME).is_file():
        return folder
    entries = [e for e in folder.iterdir() if e.name != ".git"] if folder.is_dir() else []
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink() \
            and (entries[0] / MANIFEST_NAME).is_file():
        return entries[0]
    raise ManifestError(f"{label} has no {MANIFEST_NAME} at its top (or in its one top-level "
                    "folder), so it is not a silica pack; start one with 'silica packs new'")


# -- git ---------------------------------------------------------------------------------


def _git(args: list[str], cwd: Path | None = None) -> str:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}  # never wait for a password prompt
    try:
        done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=GIT_TIMEOUT)
    except FileNotFoundError:
        raise PackError("git is not installed; install git to use git sources") from None
    except subprocess.TimeoutExpired:
        raise PackError(f"git {args[0]} did not finish within {GIT_TIMEOUT:g} s; check the "
                        "URL and your connection") from None
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
        raise PackError(f"git {args[0]} failed: {' '.join(lines[-3:]) or done.returncode}")
    return done.stdout.strip()


def _clone(source: Source, dest: Path, say: Status) -> str:
    say(f"cloning {mask_urls(source.location)}")
    try:
        _git(["clone", "--quiet", "--no-checkout", "--", source.location, str(dest)])
    except PackError as exc:
        raise PackError(f"{exc}; check the URL and that you can read the repository") from None
    commit = _resolve(source, dest)
    _check_tree(dest, commit)
    say(f"checking out {source.ref or 'the default branch'} ({commit[:12]})")
    _git(["-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", commit],
         cwd=dest)
    return commit


def _resolve(source: Source, repo: Path) -> str:
    if not source.ref:
        try:
            return _git(["rev-parse", "--verify", "HEAD^{commit}"], cwd=repo)
        except PackError:
            raise PackError(f"{source.location} has no commits on its default branch; "
                            "name a branch, tag or commit with --ref") from None
    if source.ref.startswith("-"):
        raise PackError(f"{source.ref!r} is not a branch, tag or commit name")
    for candidate in (source.ref, f"origin/{source.ref}"):
        try:
            return _git(["rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}"],
                        cwd=repo)
        except PackError:
            continue
    raise PackError(f"{source.location} has no branch, tag or commit {source.ref!r}; check "
                    "the ref")


def _check_tree(repo: Path, commit: str) -> None:
    """Refuse a commit over the caps (entries, bytes) before a single file is checked out.

    The tree is listed by ``git ls-tree`` as a stream and the listing stops at the cap.
    """
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    budget = Budget()
    lister = subprocess.Popen(["git", "ls-tree", "-r", "-t", "-l", "-z", commit], cwd=repo,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert lister.stdout is not None
        pending = b""
        while chunk := lister.stdout.read(64 * 1024):
            *records, pending = (pending + chunk).split(b"\0")
            for record in records:
                meta, _, name = record.partition(b"\t")  # "<mode> <type> <id> <size>"
                path = name.decode("utf-8", errors="replace")
                budget.add_entry(path)
                size = meta.split()[-1] if meta.split() else b"-"
                if size.isdigit():
                    budget.add_bytes(path, int(size))
        code = lister.wait(timeout=GIT_TIMEOUT)
    finally:
        if lister.poll() is None:
            lister.kill()
            lister.wait()
    if code != 0:
        raise PackError(f"git ls-tree failed on commit {commit[:12]} (exit {code}); the "
                        "repository may be damaged: clone it yourself to check")


# -- archives ----------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1024 * 1024):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()
