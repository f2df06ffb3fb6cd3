"""Discovery: which tools a user sees, from which folder, with what status and why."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import cyclopts_tool, script_tool, simple_spec, trust, unconfined

from silica.tools.discovery import DiscoveryOptions
from silica.tools.helper import HELPER_NAME, helper_source
from silica.tools.toolbox import Toolbox


def by_name(tools):
    return {t.name: t for t in tools}


def test_user_tool_is_discovered_with_its_description(user_tools):
    cyclopts_tool(user_tools, "weather", params="city: str", doc="Weather for a city.",
                  body="print(city)")
    [tool] = Toolbox().discover().tools
    assert (tool.name, str(tool.status), tool.folder.origin) == ("weather", "ok", "user")
    assert tool.spec.description == "Weather for a city."
    assert tool.spec.input_schema["required"] == ["city"]
    assert (user_tools / HELPER_NAME).read_text() == helper_source()


def test_tools_dir_variable_overrides_the_user_folder(tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    script_tool(elsewhere, "ping.py", simple_spec("ping"))
    monkeypatch.setenv("SILICA_TOOLS_DIR", str(elsewhere))
    assert [t.name for t in Toolbox().discover().tools] == ["ping"]


def test_a_relative_tools_dir_works_like_an_absolute_one(project, monkeypatch):
    script_tool(project / "mytools", "ping.py", simple_spec("ping"), body="print('pong')")
    monkeypatch.setenv("SILICA_TOOLS_DIR", "mytools")
    box = Toolbox()
    assert box.discover().tools[0].path == project / "mytools" / "ping.py"
    assert box.call("ping", {}).text.strip() == "pong"


def test_project_folders_up_to_git_root_and_closest_wins(project, user_tools):
    sub = project / "pkg" / "deep"
    sub.mkdir(parents=True)
    script_tool(user_tools, "a.py", simple_spec("same"))
    script_tool(project / ".agent" / "tools", "b.py", simple_spec("same"))
    script_tool(sub / ".silica" / "tools", "c.py", simple_spec("same"))
    script_tool(project.parent / ".silica" / "tools", "outside.py", simple_spec("outside"))
    trust(project)
    tools = Toolbox(cwd=sub).discover()
    winner = tools.runnable()["same"]
    assert winner.path.name == "c.py"
    shadowed = sorted(t.path.name for t in tools.tools if str(t.status) == "shadowed")
    assert shadowed == ["a.py", "b.py"]
    assert "outside" not in tools.runnable()  # above the git root


def test_helper_files_and_hidden_files_are_not_tools(user_tools):
    script_tool(user_tools, "_private.py", simple_spec("private"))
    script_tool(user_tools, ".hidden.py", simple_spec("hidden"))
    script_tool(user_tools, "real.py", simple_spec("real"))
    assert [t.name for t in Toolbox().discover().tools] == ["real"]


def test_multi_tool_file_gives_one_tool_per_spec(user_tools):
    script_tool(user_tools, "mail.py", [simple_spec("mail_search"), simple_spec("mail_send")])
    tools = by_name(Toolbox().discover().tools)
    assert set(tools) == {"mail_search", "mail_send"}
    assert all(t.multi and t.ok for t in tools.values())


@pytest.mark.parametrize(
    ("printed", "status", "reason_part"),
    [
        ("this is not json", "error", "printed no JSON"),
        ("", "error", "printed nothing"),
        (json.dumps({"name": "bad name!", "description": "d",
                     "input_schema": {"type": "object"}}), "invalid spec", "name"),
        (json.dumps({"name": "x", "description": "d", "input_schema": {"type": "string"}}),
         "invalid spec", "input_schema"),
        (json.dumps({"name": "x", "description": "", "input_schema": {"type": "object"}}),
         "invalid spec", "description"),
        (json.dumps({"name": "x", "description": "d",
                     "input_schema": {"type": "object", "properties": {},
                                      "required": ["ghost"]}}),
         "invalid spec", "ghost"),
        (json.dumps([simple_spec("twice"), simple_spec("twice")]), "invalid spec",
         "declared twice"),
    ],
)
def test_broken_specs_get_a_status_and_a_reason(user_tools, printed, status, reason_part):
    script_tool(user_tools, "broken.py", printed)
    script_tool(user_tools, "fine.py", simple_spec("fine"))
    tools = Toolbox().discover().tools
    broken = [t for t in tools if t.path.name == "broken.py" and str(t.status) != "ok"]
    assert broken, [(t.name, t.status) for t in tools]
    assert str(broken[0].status) == status
    assert reason_part in broken[0].reason
    assert by_name(tools)["fine"].ok  # the other tools keep working


def test_crashing_toolspec_shows_the_error(user_tools):
    (user_tools / "crash.py").write_text("raise SystemExit('cannot start: missing key')\n")
    [tool] = Toolbox().discover().tools
    assert (tool.name, str(tool.status)) == ("crash", "error")
    assert "exited with code 1" in tool.reason and "missing key" in tool.reason


def test_hanging_toolspec_times_out_and_others_still_load(user_tools):
    (user_tools / "hang.py").write_text("import time\ntime.sleep(60)\n")
    script_tool(user_tools, "fine.py", simple_spec("fine"))
    tools = by_name(Toolbox(options=DiscoveryOptions(spec_timeout=2)).discover().tools)
    assert str(tools["hang"].status) == "error"
    assert "did not finish within 2 s" in tools["hang"].reason
    assert tools["fine"].ok


def test_stray_lines_around_the_spec_are_tolerated(user_tools):
    printed = "warning: something noisy\n" + json.dumps(simple_spec("noisy")) + "\nbye\n"
    script_tool(user_tools, "noisy.py", printed)
    [tool] = Toolbox().discover().tools
    assert tool.ok and tool.name == "noisy"


def test_duplicate_name_in_one_folder_is_reported(user_tools):
    script_tool(user_tools, "a.py", simple_spec("dup"))
    script_tool(user_tools, "b.py", simple_spec("dup"))
    tools = Toolbox().discover().tools
    second = next(t for t in tools if t.path.name == "b.py")
    assert str(second.status) == "invalid spec"
    assert "a.py declares it too" in second.reason
    assert Toolbox().discover().runnable()["dup"].path.name == "a.py"


def test_metadata_block_is_read_without_running_the_tool(user_tools):
    doc = ("Lookup tool.\n\nMetadata:\n    category: web\n    tags: api, weather\n"
           "    long_running: true\n    timeout: 5\n")
    cyclopts_tool(user_tools, "lookup", module_doc=doc)
    [tool] = Toolbox().discover().tools
    meta = tool.metadata
    assert (meta.category, meta.tags, meta.long_running, meta.timeout) == (
        "web", ["api", "weather"], True, 5.0)


AUTH_BODY = '''
import json, os, sys
if "--authorize" in sys.argv:
    ok = os.path.exists(os.path.join(os.path.dirname(__file__), "token"))
    print(json.dumps({"success": ok, "message": "ok" if ok else "no token: run the login"}))
'''


def test_requires_auth_tool_is_checked_with_authorize(user_tools):
    path = script_tool(user_tools, "secure.py", simple_spec("secure"), body=AUTH_BODY)
    text = path.read_text()
    path.write_text('"""Secure.\n\nMetadata:\n    requires_auth: true\n"""\n' + text)
    [tool] = Toolbox().discover().tools
    assert str(tool.status) == "needs authorization"
    assert "no token" in tool.reason
    result = Toolbox().call("secure", {})
    assert result.is_error and "--authorize" in result.text
    (user_tools / "token").write_text("x")
    assert Toolbox().discover().tools[0].ok


# Counts its --toolspec runs in a file beside it: only unconfined (a spec run writes nowhere).
COUNTING_BODY = '''
import json, pathlib, sys
if "--toolspec" in sys.argv:
    with open(pathlib.Path(__file__).with_suffix(".runs"), "a") as f:
        f.write("x")
    print(json.dumps({"name": "counted", "description": "VERSION",
                      "input_schema": {"type": "object"}}))
'''


def test_spec_cache_skips_unchanged_files_and_rereads_changed_ones(user_tools, home):
    path = user_tools / "counted.py"
    path.write_text(COUNTING_BODY.replace("VERSION", "one"))
    runs = user_tools / "counted.runs"
    first = Toolbox(settings=unconfined()).discover()
    assert first.specs_fetched == 1 and runs.read_text() == "x"
    second = Toolbox(settings=unconfined()).discover()
    assert second.specs_fetched == 0 and runs.read_text() == "x"  # no process spawned
    assert second.tools[0].spec.description == "one"
    path.write_text(COUNTING_BODY.replace("VERSION", "two"))
    third = Toolbox(settings=unconfined()).discover()
    assert third.tools[0].spec.description == "two" and runs.read_text() == "xx"


def test_corrupt_or_foreign_cache_entries_are_ignored_and_rewritten(user_tools, home):
    (user_tools / "counted.py").write_text(COUNTING_BODY.replace("VERSION", "v"))
    Toolbox(settings=unconfined()).discover()
    [entry] = (home / "cache" / "specs").glob("*.json")
    for junk in ("{not json", json.dumps({"format": 1, "key": "other", "specs": {}}), "[]"):
        entry.write_text(junk)
        found = Toolbox(settings=unconfined()).discover()
        assert found.specs_fetched == 1 and found.tools[0].ok
        assert json.loads(entry.read_text())["specs"]["name"] == "counted"


def test_outdated_helper_is_rewritten_and_current_one_kept(user_tools):
    (user_tools / HELPER_NAME).write_text('HELPER_VERSION = "0"\n')
    script_tool(user_tools, "t.py", simple_spec("t"))
    Toolbox().discover()
    assert (user_tools / HELPER_NAME).read_text() == helper_source()


def test_unreadable_folder_is_a_warning_not_a_crash(user_tools, project, monkeypatch):
    script_tool(project / ".silica" / "tools", "fine.py", simple_spec("fine"))
    trust(project)
    import silica.tools.discovery as discovery

    real_listdir = os.listdir

    def listdir(path):  # what a folder without read permission does for a normal user
        if os.fspath(path) == os.fspath(user_tools):
            raise PermissionError(13, "Permission denied")
        return real_listdir(path)

    monkeypatch.setattr(discovery.os, "listdir", listdir)
    found = Toolbox().discover()
    assert [t.name for t in found.tools] == ["fine"]
    assert f"cannot read the tools folder {user_tools}: Permission denied" in found.warnings[0]


def test_read_only_folder_still_lists_its_tools(user_tools, monkeypatch):
    script_tool(user_tools, "ro.py", simple_spec("ro"))
    import silica.tools.discovery as discovery

    # A read-only folder: writing the helper fails the way it does on a read-only mount.
    monkeypatch.setattr(discovery, "ensure_helper", lambda folder: False)
    found = Toolbox().discover()
    assert found.tools[0].ok
    assert any("read-only" in w for w in found.warnings)


def test_missing_folders_are_fine_and_a_file_in_place_of_a_folder_warns(home, monkeypatch,
                                                                       tmp_path):
    assert Toolbox().discover().tools == []
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    monkeypatch.setenv("SILICA_TOOLS_DIR", str(not_a_dir))
    found = Toolbox().discover()
    assert found.tools == [] and "is not a folder" in found.warnings[0]


def test_links_to_nothing_and_folders_are_not_tool_files(user_tools):
    script_tool(user_tools, "fine.py", simple_spec("fine"))
    (user_tools / "dangling.py").symlink_to(user_tools / "nowhere.py")
    (user_tools / "adir.py").mkdir()
    tools = by_name(Toolbox().discover().tools)
    assert set(tools) == {"fine"}  # a dangling link or a folder is not a tool file


def test_no_uv_gives_every_tool_a_reason(user_tools, monkeypatch):
    script_tool(user_tools, "t.py", simple_spec("t"))
    monkeypatch.setenv("SILICA_UV", "/nonexistent/uv")
    [tool] = Toolbox().discover().tools
    assert str(tool.status) == "error" and "SILICA_UV" in tool.reason


def test_a_deeply_nested_toolspec_is_one_error_row(user_tools):
    script_tool(user_tools, "deep.py", "[" * 100_000 + "]" * 100_000)
    script_tool(user_tools, "deepobj.py", '{"a":' * 100 + "1" + "}" * 100)
    script_tool(user_tools, "fine.py", simple_spec("fine"))
    rows = by_name(Toolbox().discover().tools)
    assert rows["fine"].ok
    assert str(rows["deep"].status) == "error" and "nested more than 64" in rows["deep"].reason
    assert "nested more than 64" in rows["deepobj"].reason
    listed = subprocess.run([sys.executable, "-m", "silica", "tools", "list", "--json"],
                            capture_output=True, text=True)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr


def test_a_hostile_helper_version_does_not_crash_discovery(user_tools):
    (user_tools / HELPER_NAME).write_text('HELPER_VERSION = "' + "9" * 5000 + '"\n')
    script_tool(user_tools, "t.py", simple_spec("t"))
    [tool] = Toolbox().discover().tools
    assert tool.ok
    assert (user_tools / HELPER_NAME).read_text() == helper_source()  # replaced by ours


def test_a_tools_dependencies_run_from_bytecode_made_with_its_environment(user_tools,
                                                                       monkeypatch):
    """A confined tool cannot write bytecode (its environment is read-only there), nor can
    any tool where PYTHONDONTWRITEBYTECODE is set: its environment is made with it, or
    every run compiles its dependencies again."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    cyclopts_tool(user_tools, "where", params="",
                  body="import os\nprint(os.path.exists(cyclopts.__cached__))")
    box = Toolbox()
    assert str(box.discover().runnable()["where"].status) == "ok"
    assert box.call("where", {}).text.strip() == "True"
