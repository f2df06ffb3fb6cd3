"""Papercuts a new user hits in ``silica tools``: each gives a clear, actionable answer."""

from __future__ import annotations

import subprocess
import sys

from conftest import script_tool, simple_spec


def silica(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def test_run_and_spec_without_a_name_say_how_to_give_one():
    for command in ("run", "spec"):
        done = silica("tools", command)
        assert done.returncode == 2
        assert f"give the tool's name: silica tools {command} NAME" in done.stderr
        assert "--name requires" not in done.stderr


def test_new_project_tool_from_a_subfolder_uses_the_projects_folder(project):
    (project / ".agent" / "tools").mkdir(parents=True)
    sub = project / "src" / "pkg"
    sub.mkdir(parents=True)
    done = silica("tools", "new", "helper_tool", "--project", cwd=sub)
    assert done.returncode == 0, done.stderr
    assert (project / ".agent" / "tools" / "helper_tool.py").is_file()
    assert not (sub / ".silica").exists()


def test_new_project_tool_without_a_folder_goes_to_the_git_root(project):
    sub = project / "src"
    sub.mkdir()
    assert silica("tools", "new", "rooted", "--project", cwd=sub).returncode == 0
    assert (project / ".silica" / "tools" / "rooted.py").is_file()


def test_new_warns_when_the_name_shadows_a_builtin_or_the_users_tool(project, user_tools):
    script_tool(user_tools, "mine.py", simple_spec("mine"))
    builtin = silica("tools", "new", "read_file")
    assert "is also the name of a built-in tool" in builtin.stderr
    shadow = silica("tools", "new", "mine", "--project")
    assert shadow.returncode == 0
    assert f"shadows your own {user_tools / 'mine.py'}" in shadow.stderr
