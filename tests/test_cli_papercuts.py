"""Papercuts a new user hits in ``silica tools``: each gives a clear, actionable answer."""

from __future__ import annotations

import json
import os
import re
import string
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import script_tool, simple_spec, write_tool
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from wire import anthropic_server, tool_call

from silica.errors import SilicaError


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


def test_new_refuses_a_builtins_name_unless_replacing_builtins_is_allowed(home, user_tools):
    builtin = silica("tools", "new", "read_file")
    assert builtin.returncode == 2 and not (user_tools / "read_file.py").exists()
    said = " ".join(builtin.stderr.split())
    assert "'read_file' is the name of silica's built-in tool" in said
    assert "choose another name (or, to replace the built-in, set allow_shadow_builtins = " \
           "true under [tools] in config.toml)" in said
    (home / "config.toml").write_text("[tools]\nallow_shadow_builtins = true\n")
    allowed = silica("tools", "new", "read_file")
    assert allowed.returncode == 0 and (user_tools / "read_file.py").is_file()
    assert "this tool replaces silica's built-in 'read_file'" in allowed.stderr
    listed = silica("tools", "list", "--json")
    [winner] = [t for t in json.loads(listed.stdout)
                if t["name"] == "read_file" and t["status"] == "ok"]
    assert winner["origin"] == "user"


def test_new_warns_when_a_project_tool_shadows_the_users_tool(project, user_tools):
    script_tool(user_tools, "mine.py", simple_spec("mine"))
    shadow = silica("tools", "new", "mine", "--project")
    assert shadow.returncode == 0
    assert f"shadows your own {user_tools / 'mine.py'}" in shadow.stderr


def test_save_images_pointing_at_a_file_says_to_give_a_folder(user_tools, tmp_path):
    script_tool(user_tools, "t.py", simple_spec("t"), body="print('hi')")
    taken = tmp_path / "pictures"
    taken.write_text("a file")
    done = silica("tools", "run", "t", "--save-images", str(taken))
    assert done.returncode == 2
    assert f"--save-images {taken} is a file, not a folder" in done.stderr
    assert "File exists" not in done.stderr


def run_env(*args: str, **env: str) -> subprocess.CompletedProcess:
    import os

    environ = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          text=True, env={**environ, **env}, timeout=300)


def test_piped_output_is_never_wrapped(user_tools):
    name = "a_tool_with_a_rather_long_name_indeed"
    spec = simple_spec(name)
    spec["description"] = "A description long enough to be wrapped at eighty columns " * 2
    script_tool(user_tools, f"{name}.py", spec)
    listed = run_env("tools", "list")
    [row] = [line for line in listed.stdout.splitlines() if line.startswith(name)]
    assert str(user_tools / f"{name}.py") in row and "eighty columns A description" in row
    missing = run_env("tools", "run", name + "_nope")
    assert len(missing.stderr.strip().splitlines()) == 1  # one message, one line


def test_a_narrow_terminal_never_splits_a_name_or_a_path(user_tools):
    name = "a_tool_with_a_rather_long_name_indeed"
    script_tool(user_tools, f"{name}.py", simple_spec(name))
    listed = run_env("tools", "list", COLUMNS="40")
    assert name in listed.stdout and str(user_tools / f"{name}.py") in listed.stdout


def every_command(app, path=()):
    """``(words, app)`` for every command of the ``silica`` CLI, loading lazy ones."""
    for name in list(app):
        if name in ("--help", "-h", "--version"):
            continue
        sub = app[name]
        if sub is not app:
            yield from every_command(sub, (*path, name))
    if app.default_command:
        yield path, app


def test_every_parameter_of_every_command_has_a_description():
    from silica.cli import app

    commands = dict(every_command(app))
    assert {("tools", "run"), ("trust",), ("packs", "install"), ("sessions", "delete"),
            ("mcp", "serve"), ("ask",), ("chat",)} <= set(commands)
    bare = [f"silica {' '.join(words)} {arg.name}"
            for words, sub in commands.items()
            for arg in sub.assemble_argument_collection(parse_docstring=True)
            if arg.show and not arg.parameter.help]
    assert bare == []
    shown = silica("packs", "show", "--help").stdout
    assert "The installed pack, as 'silica packs list' names it." in " ".join(shown.split())


def test_exec_calls_a_plain_command_the_command():
    failed = silica("exec", "--", "sh", "-c", "echo oops >&2; exit 3")
    assert failed.returncode == 3
    assert "[the command exited with code 3]" in failed.stdout + failed.stderr
    killed = silica("exec", "--", "sh", "-c", "kill -9 $$")
    assert killed.returncode == 137
    assert "[the command was ended by signal 9 (SIGKILL)]" in killed.stdout + killed.stderr
    quiet = silica("exec", "--", "true")
    assert "(the command printed nothing)" in quiet.stdout
    for done in (failed, killed, quiet):
        assert "the tool" not in done.stdout + done.stderr


def test_counts_in_messages_agree_with_their_nouns(user_tools):
    from silica.words import counted

    assert [counted(n, "tool") for n in (0, 1, 2)] == ["0 tools", "1 tool", "2 tools"]
    assert counted(1, "image was", "images were") == "1 image was"
    script_tool(user_tools, "only.py", simple_spec("only"))
    checked = silica("tools", "check")
    assert checked.returncode == 0, checked.stderr
    assert "tools, 0 broken" in checked.stdout  # the built-in tools are counted too
    # "1 tool, 0 broken, 2 problems" of a pack: tests/test_packs_cli.py


def test_a_negative_number_of_days_is_quoted_as_given():
    done = silica("sessions", "delete", "--older-than", "-1")
    assert done.returncode == 2
    assert done.stderr.strip().endswith("0 or more, not -1") and "-1.0" not in done.stderr


def test_a_misspelled_config_key_suggests_the_known_one(home):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('provder = "openai"\n[images]\nmax_sise_bytes = 5\n'
                                      '[tools]\ntimeout = -1.0\n[agents.coder]\nmodle = "x"\n'
                                      '[mcp.servers.a]\ncomand = "x"\n[zzz]\n')
    done = silica("tools", "list")
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1
    said = done.stderr
    assert "provder: unknown key; did you mean 'provider'?" in said
    assert "images.max_sise_bytes: unknown key; did you mean 'max_size_bytes'?" in said
    assert "agents.coder.modle: unknown key; did you mean 'model'?" in said
    assert "mcp.servers.a.comand: unknown key; did you mean 'command'?" in said
    assert "zzz: unknown key;" not in said and said.rstrip().endswith("zzz: unknown key")
    assert "tools.timeout: must be greater than 0, not -1;" in said


def test_a_turn_limit_of_one_is_one_request(monkeypatch, user_tools):
    script_tool(user_tools, "ping.py", simple_spec("ping"), body="print('pong')")
    with anthropic_server([tool_call("ping", {})]) as srv:
        srv.use(monkeypatch)
        done = silica("ask", "--max-turns", "1", "call ping forever")
    assert done.returncode == 1
    assert "still calling tools after 1 request;" in done.stderr


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=24))
def test_an_unknown_key_gets_at_most_one_known_key_as_advice(key):
    import tempfile
    from pathlib import Path

    from silica.config import ImageOverrides, load_settings

    known = set(ImageOverrides.model_fields)
    assume(key not in known)
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "config.toml").write_text(f"[images]\n{key} = 1\n")
        with pytest.raises(SilicaError) as raised:
            load_settings(Path(folder), {})
    said = str(raised.value)
    assert f"images.{key}: unknown key" in said
    suggested = re.findall(r"did you mean '(\w+)'\?", said)
    assert len(suggested) <= 1 and set(suggested) <= known


def test_untrust_from_a_subfolder_untrusts_the_trusted_folder(tmp_path):
    data = tmp_path / "data"  # not a repository: trust records the folder itself
    sub = data / "sub" / "deeper"
    sub.mkdir(parents=True)
    assert silica("trust", str(data)).returncode == 0
    done = silica("untrust", cwd=sub)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"No longer trusted: {data}"
    assert "No project is trusted yet" in silica("trust", "--list").stdout


def test_untrust_of_a_folder_trusted_twice_says_what_still_trusts_it(tmp_path):
    outer = tmp_path / "outer"
    inner = outer / "inner"
    inner.mkdir(parents=True)
    for folder in (outer, inner):
        assert silica("trust", str(folder)).returncode == 0
    done = silica("untrust", cwd=inner)
    assert done.stdout.strip() == f"No longer trusted: {inner}"
    assert f"still trusted, as a folder in {outer}; to stop its tools too: silica untrust " \
           f"{outer}" in " ".join(done.stderr.split())


def test_tools_list_into_a_pipe_prints_whole_lines(user_tools):
    spec = simple_spec("wordy")
    spec["description"] = ("A first paragraph long enough to pass any cut. " * 10 +
                           "\n\nA second\tparagraph, with a tab.")
    script_tool(user_tools, "wordy.py", spec)
    listed = run_env("tools", "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split("\t")[:3] == ["name", "status", "origin"]
    [row] = [line for line in lines if line.startswith("wordy\t")]
    name, status, origin, about, *_, path = row.split("\t")
    assert (status, origin, path) == ("ok", "user", str(user_tools / "wordy.py"))
    assert about == " ".join(spec["description"].split())
    assert "…" not in listed.stdout and "━" not in listed.stdout
    on_terminal = run_env("tools", "list", COLUMNS="400")  # a person's terminal: a table
    assert "…" in on_terminal.stdout and "━" in on_terminal.stdout
    whole = run_env("tools", "list", "--json")
    [tool] = [t for t in json.loads(whole.stdout) if t["name"] == "wordy"]
    assert tool["description"] == spec["description"]


def test_an_mcp_servers_content_keeps_its_order(home):
    forms = Path(__file__).parent / "mcp_fixtures" / "forms_server.py"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(f"[mcp.servers.forms]\ncommand = {json.dumps(sys.executable)}"
                                      f"\nargs = [{json.dumps(str(forms))}]\n")
    done = silica("tools", "run", "forms__interleaved", "--json")
    assert done.returncode == 0, done.stderr
    content = json.loads(done.stdout)["content"]
    assert [(b["type"], b.get("text")) for b in content] == [
        ("text", "before the chart"), ("image", None), ("text", "after the chart")]


def test_a_bad_image_file_gets_advice_for_a_person(monkeypatch, tmp_path, home):
    text_file, cut = tmp_path / "notes.png", tmp_path / "cut.png"
    text_file.write_text("hello")
    cut.write_bytes(b"\x89PNG\r\n\x1a\n" + b"x" * 40)
    with anthropic_server([]) as srv:
        srv.use(monkeypatch)
        said = [silica("ask", "--image", str(f), "what is this?") for f in (text_file, cut)]
    assert [done.returncode for done in said] == [1, 1], [done.stderr for done in said]
    assert f'error: image "{text_file}"' in said[0].stderr
    assert "send a PNG, JPEG, GIF or WebP image" in said[0].stderr
    assert f'error: image "{cut}" was refused: ' in said[1].stderr
    assert "Check that the whole file was sent" in said[1].stderr
    for done in said:
        assert "emit" not in done.stderr and "the tool" not in done.stderr
        assert "[image dropped" not in done.stderr and "object at 0x" not in done.stderr


def test_a_tool_that_asks_for_a_secret_it_lacks_says_how_to_grant_it(user_tools, monkeypatch):
    monkeypatch.setenv("OPENWEATHER_KEY", "ow-FAKE")
    doc = '"""weather tool.\n\nMetadata:\n    env: OPENWEATHER_KEY, DB_PASSWORD\n"""\n'
    write_tool(user_tools, "weather.py", doc + textwrap.dedent(f"""\
        import json, os, sys
        if "--toolspec" in sys.argv:
            print(json.dumps({simple_spec("weather")!r}))
        else:
            print("key" if os.environ.get("OPENWEATHER_KEY") else "no key")
        """), deps="")
    done = silica("tools", "run", "weather")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no key" and "ow-FAKE" not in done.stderr
    hint = [line for line in done.stderr.splitlines() if "not granted" in line]
    assert hint == ["silica: tool weather asked for OPENWEATHER_KEY, DB_PASSWORD, not granted "
                    "to it, so it runs without them; to grant them, put weather = "
                    '["OPENWEATHER_KEY", "DB_PASSWORD"] under [tools.env_grant] in config.toml']
    home = Path(os.environ["SILICA_HOME"])
    (home / "config.toml").write_text(
        '[tools.env_grant]\nweather = ["OPENWEATHER_KEY", "DB_PASSWORD"]\n')
    granted = silica("tools", "run", "weather")
    assert granted.stdout.strip() == "key" and "not granted" not in granted.stderr


def test_the_missing_secret_hint_is_given_once_per_tool(user_tools, capfd):
    from silica.tools.toolbox import Toolbox

    doc = '"""asks tool.\n\nMetadata:\n    env: GITHUB_TOKEN\n"""\n'
    write_tool(user_tools, "asks.py", doc + textwrap.dedent(f"""\
        import json, sys
        print(json.dumps({simple_spec("asks")!r}) if "--toolspec" in sys.argv else "ran")
        """), deps="")
    box = Toolbox()
    assert [box.call("asks", {}).text.strip() for _ in range(3)] == ["ran"] * 3
    assert capfd.readouterr().err.count("asked for GITHUB_TOKEN, not granted") == 1


@given(st.integers(min_value=0, max_value=10**9), st.sampled_from(["tool", "request", "file"]))
def test_counted_is_singular_only_for_one(count, noun):
    from silica.words import counted

    said = counted(count, noun)
    assert said.startswith(f"{count} ")
    assert said.endswith(noun if count == 1 else noun + "s")
