"""``silica packs ...`` as a user runs it: real processes, exit codes, stdout and stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import script_tool
from test_packs import commit_all, git, make_pack, make_repo

from silica import packs
from silica.packs.authoring import PACK_PLACEHOLDER, TOOL_PLACEHOLDERS
from silica.tools.scaffold import TEMPLATE


def silica(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "500"}  # messages on one line, for the asserts
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=300)


def test_install_list_show_update_remove(tmp_path, home):
    repo = make_repo(tmp_path / "repo", bodies={"greet": "print('v1')", "old": "print(0)"})

    done = silica("packs", "install", str(repo))
    assert done.returncode == 0, done.stderr
    assert f"Installed team 0.1.0 from {repo} (git, commit " in done.stdout
    assert "Tools: greet, old" in done.stdout

    done = silica("packs", "list", "--json")
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)
    assert (row["name"], row["version"], row["kind"], row["edited"]) == \
        ("team", "0.1.0", "git", False)
    assert row["commit"] == git(repo, "rev-parse", "HEAD")

    done = silica("packs", "show", "team", "--json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["manifest"]["description"] == "the team pack"
    assert shown["lock"]["source"] == str(repo)
    assert {(t["name"], t["status"], t["origin"]) for t in shown["tools"]} == \
        {("greet", "ok", "pack:team"), ("old", "ok", "pack:team")}

    (repo / "old.py").unlink()
    make_pack(repo, version="0.2.0", bodies={"greet": "print('v2')", "fresh": "print(1)"})
    commit_all(repo, "second")
    done = silica("packs", "update")
    assert done.returncode == 0, done.stderr
    assert "team 0.1.0 -> 0.2.0: added fresh; changed greet; removed old" in done.stdout
    done = silica("packs", "update", "team")
    assert done.stdout.strip() == "team 0.2.0: up to date"

    done = silica("packs", "remove", "team")
    assert done.returncode == 0 and done.stdout.strip() == "Removed team 0.2.0"
    assert json.loads(silica("packs", "list", "--json").stdout) == []


def test_errors_go_to_stderr_with_a_non_zero_exit(tmp_path, home):
    done = silica("packs", "install", str(tmp_path / "nowhere"))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"error: {tmp_path / 'nowhere'} does not exist; check the path")

    for args in (("remove", "ghost"), ("show", "ghost"), ("update", "ghost")):
        done = silica("packs", *args)
        assert done.returncode == 1, args
        assert "no pack named 'ghost' is installed" in done.stderr


def test_install_over_another_source_needs_force(tmp_path):
    done = silica("packs", "install", str(make_pack(tmp_path / "one")))
    assert done.returncode == 0, done.stderr
    other = make_pack(tmp_path / "two")

    done = silica("packs", "install", str(other))
    assert done.returncode == 1 and "--force" in done.stderr

    done = silica("packs", "install", str(other), "--force")
    assert done.returncode == 0, done.stderr
    assert packs.get_pack("team").entry.source == str(other)


def test_update_refuses_local_edits_until_forced(tmp_path, home):
    repo = make_repo(tmp_path / "repo")
    silica("packs", "install", f"{repo}#main")
    (home / "packs" / "team" / "greet.py").write_text("# edited\n")
    make_pack(repo, version="0.2.0")
    commit_all(repo, "second")

    done = silica("packs", "list", "--json")
    assert json.loads(done.stdout)[0]["local_edits"] == ["changed: greet.py"]
    done = silica("packs", "update", "team")
    assert done.returncode == 1
    assert "changed: greet.py" in done.stderr and "--force" in done.stderr

    done = silica("packs", "update", "team", "--force")
    assert done.returncode == 0, done.stderr
    assert "team 0.1.0 -> 0.2.0" in done.stdout


def replace_placeholders(folder: Path) -> None:
    """Do what the author of a new pack is asked to: describe the pack and its tool."""
    manifest = folder / "silica-pack.toml"
    manifest.write_text(manifest.read_text().replace(PACK_PLACEHOLDER, "repeat text"))
    for tool in folder.glob("[!_]*.py"):
        tool.write_text(tool.read_text().replace(TOOL_PLACEHOLDERS[0], "repeats text")
                        .replace(f" ({TOOL_PLACEHOLDERS[1]})", ""))


def test_new_then_check_flags_the_placeholders_then_passes_then_install_runs_it(tmp_path,
                                                                               project):
    assert all(phrase in TEMPLATE for phrase in TOOL_PLACEHOLDERS)
    done = silica("packs", "new", "my-pack", cwd=project)
    assert done.returncode == 0, done.stderr
    folder = project / "my-pack"
    assert (folder / "silica-pack.toml").is_file() and (folder / "my_pack.py").is_file()
    assert "placeholder text must go" in done.stdout

    done = silica("packs", "check", str(folder), "--json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert not report["ok"] and report["problems"] == [
        "silica-pack.toml: field 'description' is still the placeholder from 'silica packs "
        "new'; say in one line what the pack's tools do",
        "my_pack.py still has placeholder text from the tool template ('say what this tool "
        "does in one line'); describe what the tool does in its docstrings"]
    done = silica("packs", "check", str(folder))
    assert done.returncode == 1 and "ready to publish" not in done.stdout
    assert "1 tool, 0 broken, 2 problems" in done.stderr

    replace_placeholders(folder)
    done = silica("packs", "check", str(folder), "--json")
    assert done.returncode == 0, done.stdout
    report = json.loads(done.stdout)
    assert report["ok"] and report["manifest"]["name"] == "my-pack"
    assert [(t["name"], t["status"]) for t in report["tools"]] == [("my_pack", "ok")]
    assert "ready to publish" in silica("packs", "check", str(folder)).stdout

    assert silica("packs", "install", str(folder)).returncode == 0
    done = silica("tools", "run", "my_pack", "--input", '{"text": "hi", "repeat": 2}',
                  "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["content"][0]["text"].strip() == '{"result": "hi hi"}'

    done = silica("packs", "new", "my-pack", cwd=project)
    assert done.returncode == 1 and "not an empty folder" in done.stderr


def test_add_tool_writes_into_the_pack_and_check_suggests_it(tmp_path, home):
    src = tmp_path / "src"
    src.mkdir()
    (src / "silica-pack.toml").write_text('name = "src"\nversion = "1"\n'
                                          'description = "Echo tools."\n')
    done = silica("packs", "check", str(src))
    assert done.returncode == 1
    assert f"the pack has no tools; add one with 'silica packs add-tool {src} NAME'" \
        in done.stderr
    assert "tools new" not in done.stderr

    done = silica("packs", "add-tool", str(src), "echo")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Created {src / 'echo.py'}")
    assert not (home / "tools").exists()  # nothing written outside the pack
    report = json.loads(silica("packs", "check", str(src), "--json").stdout)
    assert [t["name"] for t in report["tools"]] == ["echo"]
    assert report["problems"] == ["echo.py still has placeholder text from the tool template "
                                  "('say what this tool does in one line'); describe what "
                                  "the tool does in its docstrings"]

    (src / "silica-pack.toml").write_text('name = "src"\nversion = "1"\n'
                                          'description = "Echo tools."\ntools = ["echo"]\n')
    done = silica("packs", "add-tool", str(src), "other")
    assert done.returncode == 0 and (src / "other.py").is_file()
    assert "add 'other' to 'tools' there" in done.stderr

    for args, reason in (((str(src), "echo"), "already exists"),
                         ((str(tmp_path / "nowhere"), "x"), "is not a folder"),
                         ((str(tmp_path), "x"), "silica-pack.toml is missing")):
        done = silica("packs", "add-tool", *args)
        assert done.returncode == 1 and reason in done.stderr, args


def test_a_file_that_is_not_an_archive_is_refused_in_words(tmp_path, home):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")

    done = silica("packs", "install", str(notes))

    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == (f"error: {notes} is not a .tar.gz, .tgz, .tar or .zip "
                                   "archive: it is a text file; give a pack folder, a git URL "
                                   "or an archive")


def test_check_reports_a_broken_pack(tmp_path):
    src = make_pack(tmp_path / "src", bodies={"greet": "print('hi')"}, tools=["greet", "gone"])
    script_tool(src, "broken.py", "this is not json")

    done = silica("packs", "check", str(src), "--json")

    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert not report["ok"]
    assert report["problems"] == ["silica-pack.toml: field 'tools' lists 'gone', but there is no "
                                  "gone.py; add the file or take it off the list"]
    assert [t["name"] for t in report["tools"]] == ["greet"]  # broken.py is not listed

    (src / "silica-pack.toml").write_text('name = "src"\nversion = "1"\ndescription = "d"\n')
    done = silica("packs", "check", str(src))
    assert done.returncode == 1
    assert "broken" in done.stdout and "1 broken" in done.stderr


def test_check_of_a_bad_manifest_names_the_field(tmp_path):
    src = make_pack(tmp_path / "src")
    (src / "silica-pack.toml").write_text('name = "src"\nversion = "1"\n')

    done = silica("packs", "check", str(src))

    assert done.returncode == 1
    assert "field 'description' is missing" in done.stderr
    assert "greet" in done.stdout  # the tools are still checked
