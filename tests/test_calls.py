"""Calling tools: JSON input reaches the real cyclopts CLI intact, failures become results."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest
from conftest import cyclopts_tool, script_tool, simple_spec, unconfined, write_tool

from silica.tools.toolbox import Toolbox

ECHO_PARAMS = """\
count: int = 0,
ratio: float = 0.0,
text: str = "",
flag: bool = True,
words: list[str] | None = None,
numbers: list[int] | None = None,
options: dict | None = None,
mode: Literal["fast", "slow"] = "fast",
max_dimension: int = 1568,
label: str = "default\""""

ECHO_BODY = """\
print(json.dumps(dict(count=count, ratio=ratio, text=text, flag=flag, words=words,
                      numbers=numbers, options=options, mode=mode,
                      max_dimension=max_dimension, label=label)))"""


@pytest.fixture
def echo(user_tools):
    path = cyclopts_tool(user_tools, "echo", params=ECHO_PARAMS, body=ECHO_BODY,
                         doc="Echo every argument back as JSON.")
    path.write_text(path.read_text().replace("import json\n",
                                             "import json\nfrom typing import Literal\n"))
    return Toolbox()


def call_json(box, arguments):
    result = box.call("echo", arguments)
    assert not result.is_error, result.text
    return json.loads(result.text)


def test_values_that_look_like_options_reach_the_tool_intact(echo):
    got = call_json(echo, {"count": -5, "ratio": -0.25, "text": "--not-an-option",
                           "words": ["-a", "b c", "--x=1"], "numbers": [-1, 0, 7],
                           "max_dimension": 640, "mode": "slow"})
    assert got["count"] == -5 and got["ratio"] == -0.25
    assert got["text"] == "--not-an-option"
    assert got["words"] == ["-a", "b c", "--x=1"]
    assert got["numbers"] == [-1, 0, 7]
    assert got["max_dimension"] == 640 and got["mode"] == "slow"


def test_false_null_empty_list_and_objects(echo):
    got = call_json(echo, {"flag": False, "label": None, "words": [],
                           "options": {"a": "1", "b": "two"}})
    assert got["flag"] is False
    assert got["label"] == "default"  # null leaves the tool's default
    assert got["words"] == []
    assert got["options"] == {"a": "1", "b": "two"}
    assert call_json(echo, {"flag": True})["flag"] is True


def test_unicode_and_newlines_survive(echo):
    text = "Oslo – 北京\nline two \"quoted\" $HOME `x`"
    assert call_json(echo, {"text": text})["text"] == text


def test_bad_input_is_an_error_result_naming_the_problem(echo):
    unknown = echo.call("echo", {"colour": "red"})
    assert unknown.is_error and "no parameter 'colour'" in unknown.text
    not_object = echo.call("echo", ["a"])
    assert not_object.is_error and "must be a JSON object" in not_object.text
    wrong_type = echo.call("echo", {"count": "many"})
    assert wrong_type.is_error and "exited with code" in wrong_type.text


def test_required_parameter_missing(user_tools):
    cyclopts_tool(user_tools, "need", params="city: str", body="print(city)")
    result = Toolbox().call("need", {})
    assert result.is_error and "needs the parameter 'city'" in result.text


MULTI = '''\
"""Mail tools."""
import json
import sys
from pathlib import Path

import cyclopts

sys.path.insert(0, str(Path(__file__).parent))
from _silica_toolspec import generate_schemas_for_commands

app = cyclopts.App()


@app.command
def search(query: str, max_results: int = 10):
    """Search mail."""
    print(json.dumps({"cmd": "search", "query": query, "max_results": max_results}))


@app.command
def list_labels(include_hidden: bool = False):
    """List labels."""
    print(json.dumps({"cmd": "list_labels", "include_hidden": include_hidden}))


if __name__ == "__main__":
    if "--toolspec" in sys.argv:
        print(json.dumps(generate_schemas_for_commands(
            [(search, "mail_search"), (list_labels, None)])))
    else:
        app()
'''


def test_multi_tool_file_runs_the_right_subcommand(user_tools):
    write_tool(user_tools, "mail.py", MULTI)
    box = Toolbox()
    from_files = {n for n, t in box.discover().runnable().items() if t.builtin is None}
    assert from_files == {"mail_search", "list_labels"}
    got = json.loads(box.call("mail_search", {"query": "-urgent", "max_results": 3}).text)
    assert got == {"cmd": "search", "query": "-urgent", "max_results": 3}
    got = json.loads(box.call("list_labels", {"include_hidden": True}).text)
    assert got == {"cmd": "list_labels", "include_hidden": True}


def test_original_style_multi_tool_file_without_subcommand_key(user_tools):
    old = '''        print(json.dumps(generate_schemas_for_commands(
            [(search, "mail_search"), (list_labels, None)])))'''
    new = '''        specs = generate_schemas_for_commands([(search, "mail_search")])
        for s in specs:
            s.pop("_subcommand")
        print(json.dumps(specs))'''
    write_tool(user_tools, "mail.py", MULTI.replace(old, new))
    got = json.loads(Toolbox().call("mail_search", {"query": "x"}).text)
    assert got["cmd"] == "search"  # mail_search in mail.py: the 'search' command


def test_non_zero_exit_is_an_error_with_exit_code_and_stderr(user_tools):
    script_tool(user_tools, "fail.py", simple_spec("fail"),
                body="import sys\nprint('partial')\nprint('disk full', file=sys.stderr)\n"
                     "sys.exit(3)\n")
    result = Toolbox().call("fail", {})
    assert result.is_error
    assert "partial" in result.text
    assert "exited with code 3" in result.text and "disk full" in result.text


def test_timeout_stops_the_tool_and_its_children(user_tools, tmp_path):
    pidfile = tmp_path / "child.pid"
    body = f"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
open({str(pidfile)!r}, "w").write(str(child.pid))
time.sleep(300)
"""
    script_tool(user_tools, "slow.py", simple_spec("slow"), body=body)
    result = Toolbox(timeout=2, settings=unconfined()).call("slow", {})  # pids seen outside
    assert result.is_error and "timed out after 2 s" in result.text
    assert not _alive(int(pidfile.read_text()))


def test_metadata_timeout_overrides_the_default(user_tools):
    path = script_tool(user_tools, "slowish.py", simple_spec("slowish"),
                       body="import time\ntime.sleep(300)\n")
    path.write_text('"""Slow.\n\nMetadata:\n    timeout: 1\n"""\n' + path.read_text())
    result = Toolbox(timeout=600).call("slowish", {})
    assert result.is_error and "timed out after 1 s" in result.text


def test_children_that_outlive_the_tool_do_not_hold_the_call(user_tools, tmp_path):
    pidfile = tmp_path / "orphan.pid"
    body = f"""
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
open({str(pidfile)!r}, "w").write(str(child.pid))
print("done")
"""
    script_tool(user_tools, "spawner.py", simple_spec("spawner"), body=body)
    result = Toolbox(settings=unconfined()).call("spawner", {})  # pids seen outside
    assert not result.is_error and result.text.strip() == "done"
    assert not _alive(int(pidfile.read_text()))


def test_flooding_stdout_is_cut_at_the_cap_and_stopped(user_tools):
    body = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"
    script_tool(user_tools, "flood.py", simple_spec("flood"), body=body)
    result = Toolbox(stdout_cap=1_000_000, timeout=60).call("flood", {})
    assert result.is_error
    assert "more than the 1000000-byte cap and was stopped" in result.text
    assert result.text.count("x") == 1_000_000


def test_tool_sees_agent_graphics_and_withheld_variables_are_gone(user_tools, monkeypatch):
    body = ("import json, os\nprint(json.dumps({k: os.environ.get(k) for k in "
            "('AGENT_GRAPHICS', 'MY_SECRET_TOKEN', 'KEEP_ME', 'SILICA_WORKDIR')}))\n")
    script_tool(user_tools, "env.py", simple_spec("env"), body=body)
    monkeypatch.setenv("MY_SECRET_TOKEN", "s3cret")
    monkeypatch.setenv("KEEP_ME", "yes")
    monkeypatch.setenv("SILICA_TOOL_ENV_WITHHOLD", "*_TOKEN, OTHER")
    got = json.loads(Toolbox().call("env", {}).text)
    assert got["AGENT_GRAPHICS"] == "kitty,iterm2,sixel"
    assert got["MY_SECRET_TOKEN"] is None and got["KEEP_ME"] == "yes"
    assert got["SILICA_WORKDIR"] == os.getcwd()


def test_tool_that_vanished_since_discovery(user_tools):
    path = script_tool(user_tools, "gone.py", simple_spec("gone"), body="print('hi')")
    box = Toolbox()
    box.discover()
    path.unlink()
    result = box.call("gone", {})
    assert result.is_error and "is gone since the tools were discovered" in result.text


def test_unknown_tool_suggests_near_names(user_tools):
    script_tool(user_tools, "weather.py", simple_spec("weather"), body="print('sun')")
    result = Toolbox().call("wether", {})
    assert result.is_error and "did you mean weather" in result.text


def test_missing_uv_at_call_time_is_an_error_result(user_tools, monkeypatch):
    script_tool(user_tools, "t.py", simple_spec("t"), body="print('hi')")
    box = Toolbox()
    box.discover()
    from silica.tools.uvbin import find_uv

    monkeypatch.setenv("SILICA_UV", "/nonexistent/uv")
    find_uv.cache_clear()
    result = box.call("t", {})
    assert result.is_error and "SILICA_UV" in result.text


def test_several_calls_run_at_once(user_tools, project):
    # Each call checks in, then waits for the other two: only concurrent calls all meet.
    body = f"""
import os, pathlib, sys, time
room = pathlib.Path({str(project / "room")!r})
room.mkdir(exist_ok=True)
(room / os.urandom(8).hex()).touch()  # pids repeat: each call has its own namespace
for _ in range(200):
    if len(list(room.iterdir())) >= 3:
        print("met the others")
        sys.exit(0)
    time.sleep(0.05)
print("waited alone")
"""
    script_tool(user_tools, "meet.py", simple_spec("meet"), body=body)
    box = Toolbox()
    box.discover()

    async def three():
        return await asyncio.gather(*(box.acall("meet", {}) for _ in range(3)))

    results = asyncio.run(three())
    assert [r.text.strip() for r in results] == ["met the others"] * 3


def _alive(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        try:  # a killed child of ours may linger as a zombie until reaped
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ")[1].startswith("Z"):
                    return False
        except OSError:
            return False
        time.sleep(0.05)
    return True
