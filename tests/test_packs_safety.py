"""Hostile packs: each is refused with the reason, and the disk is left exactly as it was."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_packs import call_text, commit_all, git, make_pack, make_repo, snapshot, tar_of

from silica import packs
from silica.packs.safety import MAX_FILES, MAX_TOTAL_BYTES, member_path


def entry(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"x = 1\n",
          link: str = "", size: int | None = None) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    if size is not None:
        info.size = size
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = 1, 3
    return info, data


def hostile_tar(tmp_path: Path, *extras: tuple[tarfile.TarInfo, bytes]) -> Path:
    """A good pack in ``pack/``, plus the hostile ``extras``."""
    src = make_pack(tmp_path / "hostile-src")
    archive = tmp_path / "hostile.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src, arcname="pack")
        for info, data in extras:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return archive


def hostile_zip(tmp_path: Path, *extras: tuple[zipfile.ZipInfo | str, bytes]) -> Path:
    src = make_pack(tmp_path / "hostile-src")
    archive = tmp_path / "hostile.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(src.rglob("*")):
            zf.write(path, path.relative_to(src).as_posix())
        for info, data in extras:
            zf.writestr(info, data)
    return archive


def zip_link(name: str, target: str) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info, target.encode()


def sparse_tar(tmp_path: Path) -> Path:
    """A tar holding a file over the cap, written as a sparse file: the test writes no data."""
    src = make_pack(tmp_path / "hostile-src")
    archive = tmp_path / "huge.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(src, arcname="pack")
    huge = tarfile.TarInfo("pack/huge.bin")
    huge.size = MAX_TOTAL_BYTES + 1
    body = archive.read_bytes().rstrip(b"\0")
    body += b"\0" * (-len(body) % 512)
    with open(archive, "wb") as f:
        f.write(body + huge.tobuf(format=tarfile.GNU_FORMAT))
        f.seek(huge.size + (-huge.size % 512), os.SEEK_CUR)  # a hole, not bytes
        f.write(b"\0" * 1024)  # the end-of-archive blocks
    return archive


def zip_bomb(tmp_path: Path) -> Path:
    """Over the cap once unpacked, a few KiB packed."""
    info = zipfile.ZipInfo("bomb.bin")
    info.compress_type = zipfile.ZIP_DEFLATED
    return hostile_zip(tmp_path, (info, bytes(MAX_TOTAL_BYTES + 1)))


def many_files(tmp_path: Path) -> Path:
    return hostile_tar(tmp_path, *(entry(f"pack/data/{i}.txt", data=b"") for i in
                                   range(MAX_FILES)))


def empty_folders(tmp_path: Path) -> Path:
    """A small archive of 20,000 empty folders: no file at all, but an inode each."""
    return hostile_tar(tmp_path, *(entry(f"pack/d/{i}", tarfile.DIRTYPE) for i in
                                   range(20_000)))


def deep_folders(tmp_path: Path) -> Path:
    """100 files, each 120 folders deep: every folder a path implies is made, so it counts."""
    return hostile_tar(tmp_path, *(entry(f"pack/{i}/" + "d/" * 120 + "x.py") for i in
                                   range(100)))


def cut_short(tmp_path: Path) -> Path:
    whole = tar_of(make_pack(tmp_path / "src"), tmp_path / "whole.tgz").read_bytes()
    (tmp_path / "cut.tgz").write_bytes(whole[:len(whole) // 2])
    return tmp_path / "cut.tgz"


ENTRIES_CAP = "more than 10,000 files, folders and links"


HOSTILE = {
    "zip-slip": (lambda p: hostile_zip(p, ("../evil.py", b"x")), "'..' component"),
    "zip absolute": (lambda p: hostile_zip(p, (str(p / "outside" / "evil.py"), b"x")),
                     "absolute path"),
    "zip backslash": (lambda p: hostile_zip(p, ("..\\evil.py", b"x")), "backslash"),
    "zip symlink out": (lambda p: hostile_zip(p, zip_link("passwd", "/etc/passwd")),
                        "passwd points to '/etc/passwd'"),
    "zip bomb": (zip_bomb, "more than 50 MiB"),
    "tar slip": (lambda p: hostile_tar(p, entry("pack/../../evil.py")), "'..' component"),
    "tar absolute": (lambda p: hostile_tar(p, entry(str(p / "outside" / "evil.py"))),
                     "absolute path"),
    "tar symlink to /etc/passwd": (
        lambda p: hostile_tar(p, entry("pack/passwd", tarfile.SYMTYPE, link="/etc/passwd")),
        "points to '/etc/passwd'"),
    "tar symlink up": (
        lambda p: hostile_tar(p, entry("pack/up", tarfile.SYMTYPE, link="../../x")),
        "points to '../../x', outside"),
    "tar symlink chain out": (  # each link looks inside on its own; together they leave
        lambda p: hostile_tar(p, entry("pack/a/b/up", tarfile.SYMTYPE, link="../.."),
                              entry("pack/a/b/esc", tarfile.SYMTYPE, link="up/../../..")),
        "pack/a/b/esc leads outside the pack"),
    "tar write through a link": (
        lambda p: hostile_tar(p, entry("pack/dir", tarfile.SYMTYPE, link="."),
                              entry("pack/dir/x.py")),
        "pack/dir is both a file and a folder"),
    "tar hard link out": (
        lambda p: hostile_tar(p, entry("pack/pw", tarfile.LNKTYPE, link="/etc/passwd")),
        "hard link pack/pw points to '/etc/passwd'"),
    "tar hard link to nothing": (
        lambda p: hostile_tar(p, entry("pack/pw", tarfile.LNKTYPE, link="etc/passwd")),
        "not a file earlier in the archive"),
    "tar fifo": (lambda p: hostile_tar(p, entry("pack/pipe", tarfile.FIFOTYPE)), "a FIFO"),
    "tar device": (lambda p: hostile_tar(p, entry("pack/mem", tarfile.CHRTYPE)),
                   "a character device"),
    "tar huge file": (sparse_tar, "more than 50 MiB"),
    "tar too many files": (many_files, ENTRIES_CAP),
    "tar of 20,000 empty folders": (empty_folders, ENTRIES_CAP),
    "tar of files 120 folders deep": (deep_folders, ENTRIES_CAP),
    "tar of a name too long": (lambda p: hostile_tar(p, entry("pack/" + "d/" * 600 + "x")),
                               "has a name longer than 1,024 characters"),
    "tar duplicate": (lambda p: hostile_tar(p, entry("pack/greet.py")), "greet.py twice"),
    "not an archive": (lambda p: (p / "x.zip").write_bytes(b"hello") and p / "x.zip",
                       "x.zip is not a .tar.gz, .tgz, .tar or .zip archive: it is a text file; "
                       "give a pack folder, a git URL or an archive"),
    "an empty file": (lambda p: (p / "x.tgz").write_bytes(b"") or p / "x.tgz",
                      "x.tgz is not a .tar.gz, .tgz, .tar or .zip archive: it is empty"),
    "a gzip cut short": (cut_short, "cut.tgz is not a .tar.gz, .tgz, .tar or .zip archive: it "
                                    "is damaged or cut short"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_archive_is_refused_and_nothing_changes(case, tmp_path, home):
    packs.install(str(make_pack(tmp_path / "good", name="good")))
    make, reason = HOSTILE[case]
    archive = make(tmp_path)
    before = snapshot(tmp_path)

    with pytest.raises(packs.PackError, match=reason.replace("(", r"\(")) as refused:
        packs.install(str(archive))

    assert snapshot(tmp_path) == before, refused.value
    assert [p.name for p in packs.installed()] == ["good"]


def test_a_hostile_archive_into_an_empty_home_leaves_no_packs_folder(tmp_path, home):
    archive = hostile_zip(tmp_path, ("../evil.py", b"x"))
    with pytest.raises(packs.UnsafePack):
        packs.install(str(archive))
    assert not (home / "packs").exists() and not (tmp_path / "evil.py").exists()


def test_links_inside_the_pack_are_kept(tmp_path, home):
    src = make_pack(tmp_path / "src", bodies={"greet": "print(open('data/x.txt').read())"})
    (src / "shared").mkdir()
    (src / "shared" / "x.txt").write_text("through a link")
    (src / "data").symlink_to("shared")
    archive = tmp_path / "pack.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src, arcname="pack")

    packs.install(str(archive))

    assert os.readlink(home / "packs" / "team" / "data") == "shared"
    assert call_text("greet") == "through a link"


def test_a_folder_of_many_empty_folders_is_refused_before_a_copy(tmp_path, home):
    src = make_pack(tmp_path / "src")
    for i in range(MAX_FILES):
        (src / "d" / str(i)).mkdir(parents=True)
    with pytest.raises(packs.UnsafePack, match=ENTRIES_CAP):
        packs.install(str(src))
    assert not (home / "packs").exists()


def test_a_git_tree_over_the_cap_is_refused_before_checkout(tmp_path, home):
    """5,000 folders of one file each: 5,002 files, under the old count; 10,002 entries."""
    repo = make_repo(tmp_path / "repo")

    def plumbing(*args: str, given: str = "") -> str:
        return subprocess.run(["git", *args], cwd=repo, input=given, text=True,
                              capture_output=True, check=True).stdout.strip()

    blob = plumbing("hash-object", "-w", "--stdin")
    folder = plumbing("mktree", given=f"100644 blob {blob}\tx\n")
    listing = plumbing("ls-tree", "HEAD") + "\n" + \
        "".join(f"040000 tree {folder}\td{i}\n" for i in range(5000))
    top = plumbing("mktree", given=listing)
    commit = git(repo, "commit-tree", top, "-p", "HEAD", "-m", "many folders")
    git(repo, "update-ref", "refs/heads/main", commit)

    with pytest.raises(packs.UnsafePack, match=ENTRIES_CAP):
        packs.install(str(repo))
    assert not (home / "packs").exists()


@pytest.mark.parametrize(("target", "reason"), [
    ("/etc/passwd", "evil points to '/etc/passwd'"),
    ("../../../x", "evil points to '../../../x'"),
])
def test_a_git_repository_with_a_link_out_is_refused(tmp_path, home, target, reason):
    repo = make_repo(tmp_path / "repo")
    (repo / "evil").symlink_to(target)
    commit_all(repo, "a link out")

    with pytest.raises(packs.UnsafePack, match=reason):
        packs.install(str(repo))
    assert not (home / "packs").exists()


def test_a_folder_with_a_fifo_is_refused(tmp_path, home):
    src = make_pack(tmp_path / "src")
    os.mkfifo(src / "pipe")
    with pytest.raises(packs.UnsafePack, match="pipe is a FIFO"):
        packs.install(str(src))


@pytest.mark.parametrize(("manifest", "reason"), [
    ('name = "Team Tools"\nversion = "1"\ndescription = "d"\n', "field 'name': must be"),
    ('name = "team"\ndescription = "d"\n', "field 'version' is missing"),
    ('name = "team"\nversion = "1"\ndescription = "d"\ntool = ["x"]\n',
     "field 'tool': is not a manifest field"),
    ('name = "team"\nversion = "1"\ndescription = "d"\ntools = ["nope"]\n',
     "field 'tools' lists 'nope', but the pack has no nope.py"),
    ('name = "team"\nversion = "1"\ndescription = "d"\nmin_silica = "soon"\n',
     "field 'min_silica': must be a version"),
    ('name = "team"\nversion = \n', "is not valid TOML"),
])
def test_a_bad_manifest_is_refused_naming_the_field_and_the_file(tmp_path, home, manifest,
                                                                 reason):
    good = make_pack(tmp_path / "good", name="good")
    packs.install(str(good))
    src = make_pack(tmp_path / "src")
    (src / "silica-pack.toml").write_text(manifest)
    before = snapshot(tmp_path)

    with pytest.raises(packs.ManifestError, match=reason) as refused:
        packs.install(str(src))

    assert str(src / "silica-pack.toml") in str(refused.value)
    assert snapshot(tmp_path) == before


def test_a_git_manifest_error_names_the_repository_and_ref(tmp_path):
    repo = make_repo(tmp_path / "repo")
    (repo / "silica-pack.toml").write_text('name = "team"\n')
    commit_all(repo, "oops")
    git(repo, "tag", "v2")
    with pytest.raises(packs.ManifestError,
                       match=f"silica-pack.toml of {repo} at v2: field 'version' is missing"):
        packs.install(str(repo), ref="v2")


@given(st.text(alphabet="ab./\\:\0", max_size=12))
def test_member_paths_never_leave_the_pack(name):
    try:
        rel = member_path(name)
    except packs.UnsafePack:
        return
    if rel is None:
        return
    dest = "/pack"
    assert os.path.normpath(os.path.join(dest, *rel.parts)).startswith(dest + "/")
    assert ".." not in rel.parts and not rel.is_absolute()
