"""Tool packs as a user meets them: install from a folder, git, an archive or a URL, see the
tools in discovery, call them, update, remove. Real files, real git, real archives, real HTTP.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import subprocess
import sys
import tarfile
import threading
import zipfile
from pathlib import Path

import pytest
from conftest import cyclopts_tool, script_tool, simple_spec

from silica import packs
from silica.packs.lock import LOCK_NAME
from silica.packs.locking import FLOCK_NAME
from silica.packs.manifest import manifest_toml
from silica.packs.sources import SourceKind, parse_source
from silica.tools.toolbox import Toolbox

# -- helpers (also used by the other test_packs_* files) --------------------------------


def make_pack(folder: Path, name: str = "team", version: str = "0.1.0",
              bodies: dict[str, str] | None = None, **manifest) -> Path:
    """A pack folder: a manifest, and one dependency-free tool per ``bodies`` item
    (``{"greet": "print('hi')"}``: tool ``greet`` runs that body)."""
    folder.mkdir(parents=True, exist_ok=True)
    m = packs.PackManifest(name=name, version=version,
                           description=manifest.pop("description", f"the {name} pack"),
                           **manifest)
    (folder / "silica-pack.toml").write_text(manifest_toml(m), encoding="utf-8")
    for tool, body in (bodies if bodies is not None else {"greet": "print('hello')"}).items():
        script_tool(folder, f"{tool}.py", simple_spec(tool), body=body)
    return folder


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=Pack Author", "-c", "user.email=a@example.org",
                           "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false",
                           "-c", "init.defaultBranch=main", *args],
                          cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def make_repo(folder: Path, **pack) -> Path:
    make_pack(folder, **pack)
    git(folder, "init", "-q")
    commit_all(folder, "first")
    return folder


def tar_of(folder: Path, archive: Path, top: str | None = "pack-1.0") -> Path:
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=top or ".")
    return archive


def zip_of(folder: Path, archive: Path) -> Path:
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            zf.write(path, path.relative_to(folder).as_posix())
    return archive


def snapshot(root: Path) -> dict[str, object]:
    """Everything under ``root``: folders, links and file bytes, by relative path."""
    seen: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                seen[rel] = "link:" + os.readlink(path)
            elif path.is_dir():
                seen[rel] = "dir"
            else:
                seen[rel] = path.read_bytes()
    return seen


def pack_tools(name: str) -> dict[str, object]:
    found = Toolbox().discover()
    return {t.name: t for t in found.tools if t.folder.origin == f"pack:{name}"}


def call_text(tool: str, arguments: dict | None = None) -> str:
    result = Toolbox().call(tool, arguments or {})
    assert not result.is_error, result
    return "".join(b.text for b in result.blocks).strip()


@pytest.fixture
def served(tmp_path):
    """A folder served over HTTP on 127.0.0.1; yields (folder, base URL)."""
    folder = tmp_path / "www"
    folder.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


# -- installing --------------------------------------------------------------------------


def test_a_folder_pack_shows_up_in_discovery_and_its_tools_run(tmp_path, home):
    src = make_pack(tmp_path / "src", bodies={"greet": "print('hello from the pack')"})
    cyclopts_tool(src, "shout", params="text: str", body="print(text.upper() + '!')",
                  doc="Shout some text.")

    change = packs.install(str(src))

    assert change.entry.kind == "folder" and change.entry.source == str(src)
    assert (home / "packs" / "team" / "greet.py").is_file()
    tools = pack_tools("team")
    assert set(tools) == {"greet", "shout"}
    assert all(t.status == "ok" for t in tools.values())
    assert call_text("greet") == "hello from the pack"
    assert call_text("shout", {"text": "pack"}) == "PACK!"


def test_a_relative_folder_is_recorded_as_an_absolute_path(tmp_path, project):
    make_pack(project / "mine", name="mine")
    change = packs.install("mine")
    assert change.entry.source == str(project / "mine")


def test_the_manifest_tools_list_installs_only_those_tools_and_every_helper(tmp_path, home):
    src = make_pack(tmp_path / "src", bodies={"keep": "print('kept')", "drop": "print('no')"},
                    tools=["keep"])
    (src / "_shared.py").write_text("VALUE = 1\n")
    (src / "data").mkdir()
    (src / "data" / "table.csv").write_text("a,b\n")

    packs.install(str(src))

    installed = home / "packs" / "team"
    assert sorted(p.name for p in installed.iterdir()) == \
        ["_shared.py", "data", "keep.py", "silica-pack.toml"]
    assert set(pack_tools("team")) == {"keep"}


def test_git_pack_at_a_tag_and_at_a_commit(tmp_path):
    repo = make_repo(tmp_path / "repo", version="1.0.0", bodies={"greet": "print('v1')"})
    first = git(repo, "rev-parse", "HEAD")
    git(repo, "tag", "v1")
    make_pack(repo, version="2.0.0", bodies={"greet": "print('v2')"})
    commit_all(repo, "second")

    at_tag = packs.install(str(repo), ref="v1")
    assert (at_tag.entry.version, at_tag.entry.ref, at_tag.entry.commit) == ("1.0.0", "v1", first)
    assert call_text("greet") == "v1"
    assert not (Path(os.environ["SILICA_HOME"]) / "packs" / "team" / ".git").exists()

    at_commit = packs.install(f"{repo}#{first[:10]}")
    assert at_commit.entry.commit == first and at_commit.entry.ref == first[:10]

    head = packs.install(str(repo))
    assert head.entry.version == "2.0.0" and head.entry.ref is None
    assert head.changed == ["greet"]
    assert call_text("greet") == "v2"


def test_git_ref_that_does_not_exist_is_refused(tmp_path, home):
    repo = make_repo(tmp_path / "repo")
    with pytest.raises(packs.PackError, match="no branch, tag or commit 'nope'"):
        packs.install(str(repo), ref="nope")
    assert not (home / "packs").exists()


def test_git_url_over_file_protocol_at_a_branch(tmp_path):
    repo = make_repo(tmp_path / "repo", bodies={"greet": "print('main')"})
    git(repo, "checkout", "-q", "-b", "next")
    make_pack(repo, bodies={"greet": "print('next')"})
    commit_all(repo, "on next")
    git(repo, "checkout", "-q", "main")

    change = packs.install(f"file://{repo}", ref="next")

    assert change.entry.kind == "git" and change.entry.source == f"file://{repo}"
    assert call_text("greet") == "next"


@pytest.mark.parametrize("kind", ["tar.gz", "tgz", "zip"])
def test_archive_packs(tmp_path, kind):
    src = make_pack(tmp_path / "src", bodies={"greet": f"print('from {kind}')"})
    archive = tmp_path / f"pack.{kind}"
    if kind == "zip":
        zip_of(src, archive)
    else:
        tar_of(src, archive)

    change = packs.install(str(archive))

    assert change.entry.kind == "archive"
    assert change.entry.digest == "sha256:" + hashlib.sha256(archive.read_bytes()).hexdigest()
    assert call_text("greet") == f"from {kind}"


def test_archive_pack_over_http(tmp_path, served):
    www, base = served
    tar_of(make_pack(tmp_path / "src", bodies={"greet": "print('downloaded')"}),
           www / "team-1.0.tar.gz")

    change = packs.install(f"{base}/team-1.0.tar.gz")

    assert change.entry.source == f"{base}/team-1.0.tar.gz"
    assert call_text("greet") == "downloaded"
    with pytest.raises(packs.PackError, match="HTTP 404"):
        packs.install(f"{base}/missing.zip")


def test_update_from_a_source_that_is_gone_says_so(tmp_path):
    src = make_pack(tmp_path / "src")
    archive = tar_of(src, tmp_path / "team.tgz")
    packs.install(str(archive))
    archive.unlink()
    with pytest.raises(packs.PackError, match="team.tgz is gone; install the pack again"):
        packs.update("team")
    assert call_text("greet") == "hello"


def test_the_lock_file_records_where_each_pack_came_from(tmp_path, home):
    repo = make_repo(tmp_path / "repo", name="alpha")
    packs.install(str(make_pack(tmp_path / "beta", name="beta")))
    packs.install(str(repo))

    lock = json.loads((home / "packs" / LOCK_NAME).read_text())

    assert list(lock["packs"]) == ["alpha", "beta"]
    alpha = lock["packs"]["alpha"]
    assert alpha["kind"] == "git" and alpha["commit"] == git(repo, "rev-parse", "HEAD")
    assert alpha["content_hash"].startswith("sha256:") and alpha["installed_at"]
    assert set(alpha["files"]) == {"silica-pack.toml", "greet.py"}


def test_packs_come_after_project_and_user_tools_and_in_name_order(tmp_path, user_tools):
    packs.install(str(make_pack(tmp_path / "b", name="bravo",
                                bodies={"same": "print('bravo')", "b_only": "print('b')"})))
    packs.install(str(make_pack(tmp_path / "a", name="alpha", bodies={"same": "print('alpha')"})))
    script_tool(user_tools, "b_only.py", simple_spec("b_only"), body="print('user')")

    found = Toolbox().discover()

    origins = {(t.name, t.folder.origin): str(t.status) for t in found.tools}
    assert origins[("same", "pack:alpha")] == "ok"
    assert origins[("same", "pack:bravo")] == "shadowed"
    assert origins[("b_only", "user")] == "ok"
    assert origins[("b_only", "pack:bravo")] == "shadowed"
    assert call_text("same") == "alpha"
    clashes = [w for w in found.warnings if w.startswith("name clash")]
    assert len(clashes) == 2
    assert any("'same' from pack:alpha" in w and "pack:bravo" in w for w in clashes)
    assert any("'b_only' from user" in w and "pack:bravo" in w for w in clashes)


def test_tools_list_shows_a_clash_between_packs(tmp_path):
    packs.install(str(make_pack(tmp_path / "a", name="alpha", bodies={"same": "print(1)"})))
    packs.install(str(make_pack(tmp_path / "b", name="bravo", bodies={"same": "print(2)"})))
    done = subprocess.run([sys.executable, "-m", "silica", "tools", "list"], text=True,
                          capture_output=True, timeout=300)
    assert done.returncode == 0
    assert "name clash: 'same' from pack:alpha" in " ".join(done.stderr.split())
    assert "shadowed" in done.stdout


def test_the_same_name_from_another_source_needs_force(tmp_path):
    packs.install(str(make_pack(tmp_path / "one", bodies={"greet": "print('one')"})))
    other = make_pack(tmp_path / "two", bodies={"greet": "print('two')"})

    with pytest.raises(packs.PackError, match="already installed from .*one.*--force"):
        packs.install(str(other))
    assert call_text("greet") == "one"

    packs.install(str(other), force=True)
    assert call_text("greet") == "two"


def test_a_pack_that_needs_a_newer_silica_is_refused(tmp_path, home):
    src = make_pack(tmp_path / "src", min_silica="99.0")
    with pytest.raises(packs.ManifestError, match="needs silica 99.0 or newer"):
        packs.install(str(src))
    assert not (home / "packs").exists()


def test_the_reference_pack_installs(tmp_path):
    repo_tools = Path(__file__).resolve().parent.parent / "user_tools"
    change = packs.install(str(repo_tools))
    assert change.entry.name == "silica-examples"
    assert {"hello", "chart"} <= {p[:-3] for p in change.entry.files}


# -- updating and removing ---------------------------------------------------------------


def test_update_reports_added_changed_and_removed_tools(tmp_path):
    repo = make_repo(tmp_path / "repo", bodies={"greet": "print('v1')", "old": "print('old')",
                                               "same": "print('same')"})
    packs.install(str(repo))
    (repo / "old.py").unlink()
    make_pack(repo, version="0.2.0", bodies={"greet": "print('v2')", "fresh": "print('new')",
                                            "same": "print('same')"})
    commit_all(repo, "second")

    change = packs.update("team")

    assert (change.old_version, change.entry.version) == ("0.1.0", "0.2.0")
    assert (change.added, change.changed, change.removed) == (["fresh"], ["greet"], ["old"])
    assert change.entry.commit == git(repo, "rev-parse", "HEAD")
    assert call_text("greet") == "v2" and set(pack_tools("team")) == {"greet", "fresh", "same"}

    again = packs.update("team")
    assert again.up_to_date and again.files_changed == 0


def test_update_of_a_pack_pinned_to_a_tag_stays_at_the_tag(tmp_path):
    repo = make_repo(tmp_path / "repo", bodies={"greet": "print('v1')"})
    git(repo, "tag", "v1")
    packs.install(str(repo), ref="v1")
    make_pack(repo, bodies={"greet": "print('v2')"})
    commit_all(repo, "second")

    assert packs.update("team").up_to_date
    assert call_text("greet") == "v1"


def test_reading_specs_is_not_a_local_edit_but_editing_a_file_is(tmp_path, home):
    repo = make_repo(tmp_path / "repo", bodies={"greet": "print('v1')"})
    packs.install(str(repo))
    assert call_text("greet") == "v1"  # discovery wrote _silica_toolspec.py, uv ran it
    assert packs.get_pack("team").local_edits() == []

    installed = home / "packs" / "team"
    (installed / "greet.py").write_text((installed / "greet.py").read_text().replace("v1", "mine"))
    (installed / "notes.txt").write_text("my notes")
    make_pack(repo, bodies={"greet": "print('v2')"})
    commit_all(repo, "second")
    lock_before = (home / "packs" / LOCK_NAME).read_bytes()

    with pytest.raises(packs.LocalEdits, match="changed: greet.py; added: notes.txt.*--force"):
        packs.update("team")
    assert call_text("greet") == "mine"
    assert (home / "packs" / LOCK_NAME).read_bytes() == lock_before

    change = packs.update("team", force=True)
    assert change.changed == ["greet"] and change.files_changed == 2
    assert call_text("greet") == "v2" and not (installed / "notes.txt").exists()


def test_local_edits_are_kept_when_the_source_has_not_changed(tmp_path, home):
    packs.install(str(make_pack(tmp_path / "src")))
    (home / "packs" / "team" / "greet.py").write_text("# mine\n")

    change = packs.update("team")

    assert change.up_to_date and change.kept_edits == ["changed: greet.py"]
    assert (home / "packs" / "team" / "greet.py").read_text() == "# mine\n"


def test_a_failing_update_keeps_the_old_version_working(tmp_path, home):
    repo = make_repo(tmp_path / "repo", bodies={"greet": "print('v1')"})
    packs.install(str(repo))
    (repo / "silica-pack.toml").write_text('name = "team"\nversion = 2\n')
    commit_all(repo, "broken manifest")
    before = snapshot(home / "packs")

    with pytest.raises(packs.ManifestError, match="field 'version'.*field 'description' is"):
        packs.update("team")

    assert snapshot(home / "packs") == before
    assert call_text("greet") == "v1"


def test_an_archive_that_turned_hostile_is_not_installed_over_the_old_one(tmp_path, served):
    www, base = served
    src = make_pack(tmp_path / "src", bodies={"greet": "print('v1')"})
    tar_of(src, www / "team.tgz")
    packs.install(f"{base}/team.tgz")
    make_pack(src, version="0.2.0", bodies={"greet": "print('v2')"})
    with tarfile.open(www / "team.tgz", "w:gz") as tar:
        tar.add(src, arcname="pack")
        link = tarfile.TarInfo("pack/passwd")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    home = Path(os.environ["SILICA_HOME"])
    before = snapshot(home / "packs")

    with pytest.raises(packs.UnsafePack, match="pack/passwd points to '/etc/passwd'"):
        packs.update("team")

    assert snapshot(home / "packs") == before
    assert call_text("greet") == "v1"


def test_a_lock_file_that_cannot_be_written_leaves_the_old_version(tmp_path, home, monkeypatch):
    repo = make_repo(tmp_path / "repo", bodies={"greet": "print('v1')"})
    packs.install(str(repo))
    make_pack(repo, bodies={"greet": "print('v2')"})
    commit_all(repo, "second")
    before = snapshot(home / "packs")

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("silica.packs.journal.write_lock", full_disk)
    with pytest.raises(packs.PackError, match="No space left on device; check the free space"):
        packs.update("team")

    assert snapshot(home / "packs") == before
    assert call_text("greet") == "v1"


def test_remove_takes_the_folder_and_the_lock_entry(tmp_path, home):
    packs.install(str(make_pack(tmp_path / "a", name="alpha")))
    packs.install(str(make_pack(tmp_path / "b", name="bravo", bodies={"other": "print(1)"})))

    packs.remove("alpha")

    assert sorted(os.listdir(home / "packs")) == [FLOCK_NAME, "bravo", LOCK_NAME]
    assert [p.name for p in packs.installed()] == ["bravo"]
    assert set(pack_tools("alpha")) == set()
    with pytest.raises(packs.PackError, match="no pack named 'alpha' is installed"):
        packs.remove("alpha")
    with pytest.raises(packs.PackError, match="is not a pack name"):
        packs.remove("../bravo")


# -- sources -----------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "kind", "ref"), [
    ("https://example.org/team/tools.git", SourceKind.GIT, None),
    ("https://example.org/team/tools.git#v1.2", SourceKind.GIT, "v1.2"),
    ("git@example.org:team/tools.git", SourceKind.GIT, None),
    ("ssh://git@example.org/team/tools", SourceKind.GIT, None),
    ("https://example.org/team/tools-1.0.tar.gz", SourceKind.ARCHIVE, None),
    ("https://example.org/dl/tools.zip?token=x", SourceKind.ARCHIVE, None),
])
def test_sources_are_told_apart(text, kind, ref):
    source = parse_source(text)
    assert (source.kind, source.ref) == (kind, ref)


def test_local_sources_are_told_apart(tmp_path):
    plain = make_pack(tmp_path / "plain")
    repo = make_repo(tmp_path / "repo")
    archive = tar_of(plain, tmp_path / "x.tgz")
    assert parse_source(str(plain)).kind is SourceKind.FOLDER
    assert parse_source(str(repo)).kind is SourceKind.GIT
    assert parse_source(str(archive)).kind is SourceKind.ARCHIVE
    with pytest.raises(packs.PackError, match="applies only to git sources"):
        parse_source(str(archive), ref="v1")
    with pytest.raises(packs.PackError, match="nothing-here does not exist"):
        parse_source(str(tmp_path / "nothing-here"))


def test_a_folder_without_a_manifest_is_not_a_pack(tmp_path, home):
    (tmp_path / "loose").mkdir()
    script_tool(tmp_path / "loose", "t.py", simple_spec("t"))
    with pytest.raises(packs.ManifestError, match="loose has no silica-pack.toml at its top"):
        packs.install(str(tmp_path / "loose"))
    assert not (home / "packs").exists()
