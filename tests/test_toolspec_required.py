"""Tools written the usual cyclopts way, with required parameters, list and run unchanged.

cyclopts refuses ``weather.py --toolspec`` when ``city`` is required, before the function
runs. The helper, imported by the tool with ``--toolspec`` on the command line, answers in
cyclopts' place. Most tests run real tool files through the Toolbox (real ``uv``); the last
ones look at the hook itself, with this interpreter's cyclopts.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import cyclopts
import pytest
from conftest import cyclopts_tool, write_tool

from silica.tools.toolbox import Toolbox

HELPER_PATH = Path(__file__).resolve().parents[1] / "silica" / "tools" / "_silica_toolspec.py"
IMPORT_HELPER = """\
sys.path.insert(0, str(Path(__file__).parent))
from _silica_toolspec import generate_schema, generate_schemas_for_commands
"""


def by_name(tools: list) -> dict[str, Any]:
    return {t.name: t for t in tools}


# --- real tools, listed and run by silica ----------------------------------------------------

WEATHER = '''\
"""Weather."""
import json
import sys
from pathlib import Path

import cyclopts

sys.path.insert(0, str(Path(__file__).parent))
from _silica_toolspec import generate_schema

app = cyclopts.App()


@app.default
def weather(city: str, *, toolspec: bool = False):
    """Weather for a city.

    Args:
        city: The city to look up.
    """
    if toolspec:
        print(json.dumps(generate_schema(weather)))
        return
    print(json.dumps({"city": city, "temperature": 21}))


if __name__ == "__main__":
    app()
'''


def test_the_usual_cyclopts_tool_with_a_required_parameter_lists_ok_and_runs(user_tools):
    write_tool(user_tools, "weather.py", WEATHER)
    [tool] = Toolbox().discover().tools
    assert (tool.name, str(tool.status)) == ("weather", "ok"), tool.reason
    assert tool.spec.description == "Weather for a city."
    assert tool.spec.input_schema == {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city to look up."}},
        "required": ["city"],
    }
    result = Toolbox().call("weather", {"city": "Oslo"})
    assert not result.is_error, result.text
    assert json.loads(result.text) == {"city": "Oslo", "temperature": 21}


NOTES = '''\
"""Notes."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _silica_toolspec  # imported before cyclopts: the helper hooks it as it loads

import cyclopts

app = cyclopts.App()


@app.command
def add_note(text: str, tags: list[str] | None = None):
    """Add a note.

    Args:
        text: The note itself.
    """
    print(json.dumps({"text": text, "tags": tags}))


@app.command(name="count")
def count_words(text: str, unique: bool = False):
    """Count the words in a text."""
    words = text.split()
    print(len(set(words)) if unique else len(words))


@app.command(show=False)
def debug(level: int):
    """Not for models."""


if __name__ == "__main__":
    app()
'''


def test_a_tool_with_several_commands_and_required_params_lists_each_command(user_tools):
    write_tool(user_tools, "notes.py", NOTES)
    tools = Toolbox().discover().tools
    assert [(t.name, str(t.status)) for t in tools] == [
        ("notes_add_note", "ok"), ("notes_count", "ok")], [t.reason for t in tools]
    add, count = tools
    assert (add.spec.subcommand, count.spec.subcommand) == ("add-note", "count")
    assert add.spec.input_schema["required"] == ["text"]
    assert add.spec.input_schema["properties"]["text"]["description"] == "The note itself."
    assert count.spec.description == "Count the words in a text."

    box = Toolbox()
    assert box.call("notes_count", {"text": "a b a", "unique": True}).text.strip() == "2"
    added = box.call("notes_add_note", {"text": "buy milk", "tags": ["home"]})
    assert json.loads(added.text) == {"text": "buy milk", "tags": ["home"]}


def test_tools_that_answer_toolspec_themselves_keep_their_own_answer(user_tools):
    # Before app(), in `if __name__ == "__main__"`: the App is never called for --toolspec.
    own = cyclopts_tool(user_tools, "echo", params="text: str", body="print(text)")
    own.write_text(own.read_text().replace("generate_schema(echo)",
                                           'generate_schema(echo, "shout")'))
    # Inside the default command, which cyclopts can run: its answer, with its own prefix.
    write_tool(user_tools, "kit.py", '''\
        import json
        import sys
        from pathlib import Path

        import cyclopts

        sys.path.insert(0, str(Path(__file__).parent))
        from _silica_toolspec import generate_schemas_for_commands

        app = cyclopts.App()


        @app.command
        def resize(path: str, width: int):
            """Resize an image."""
            print(path, width)


        @app.default
        def main(*, toolspec: bool = False):
            if toolspec:
                print(json.dumps(generate_schemas_for_commands([(resize, None)], prefix="img_")))


        if __name__ == "__main__":
            app()
        ''')
    tools = by_name(Toolbox().discover().tools)
    assert sorted(tools) == ["img_resize", "shout"]
    assert all(str(t.status) == "ok" for t in tools.values())
    assert tools["img_resize"].spec.input_schema["required"] == ["path", "width"]
    assert Toolbox().call("shout", {"text": "hey"}).text.strip() == "hey"
    assert Toolbox().call("img_resize", {"path": "a.png", "width": 3}).text.strip() == "a.png 3"


def test_authorize_in_the_function_still_runs_the_tools_own_authorization(user_tools):
    write_tool(user_tools, "mail.py", '''\
        """Mail.

        Metadata:
            requires_auth: true
        """
        import json
        import sys
        from pathlib import Path

        import cyclopts

        sys.path.insert(0, str(Path(__file__).parent))
        import _silica_toolspec

        app = cyclopts.App()


        @app.default
        def mail(to: str, *, authorize: bool = False):
            """Send a mail."""
            if authorize:
                ok = (Path(__file__).parent / "token").exists()
                print(json.dumps({"success": ok, "message": "ok" if ok else "no token: log in"}))
                return
            print("sent to", to)


        if __name__ == "__main__":
            app()
        ''')
    [tool] = Toolbox().discover().tools
    assert str(tool.status) == "needs authorization"
    assert "no token" in tool.reason
    (user_tools / "token").write_text("x")
    [tool] = Toolbox().discover().tools
    assert str(tool.status) == "ok", tool.reason
    assert tool.spec.input_schema["required"] == ["to"]
    assert Toolbox().call("mail", {"to": "bo"}).text.strip() == "sent to bo"


@pytest.mark.parametrize(("params", "refusal"), [
    ("city: str, *, toolspec: bool = False", "requires an argument"),
    ("city: str", "Unknown option"),
])
def test_a_tool_that_does_not_import_the_helper_gets_cyclopts_refusal_as_reason(
        user_tools, params, refusal):
    write_tool(user_tools, "bare.py", f'''\
        import cyclopts

        app = cyclopts.App()


        @app.default
        def bare({params}):
            """Bare."""


        if __name__ == "__main__":
            app()
        ''')
    [tool] = Toolbox().discover().tools
    assert str(tool.status) == "error"
    assert "--toolspec exited with code" in tool.reason
    assert refusal in tool.reason
    assert "import _silica_toolspec" in tool.reason  # says exactly how to fix the tool


# --- the hook itself ---------------------------------------------------------------------------


def run_script(folder: Path, source: str, *args: str) -> subprocess.CompletedProcess:
    """Run ``source`` as a script beside a copy of the helper, with this interpreter."""
    (folder / "_silica_toolspec.py").write_bytes(HELPER_PATH.read_bytes())
    script = folder / "tool.py"
    script.write_text("import sys\nfrom pathlib import Path\n" + source)
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                          timeout=120, cwd=folder)


def test_the_helper_never_imports_cyclopts_and_hooks_nothing_without_the_flags(tmp_path):
    probe = IMPORT_HELPER + 'print("cyclopts" in sys.modules)\n'
    assert run_script(tmp_path, probe, "--toolspec").stdout.strip() == "False"
    hooked = (IMPORT_HELPER + "import cyclopts\n"
              'print(hasattr(cyclopts.App.__call__, "_silica_toolspec_hook"))\n')
    assert run_script(tmp_path, hooked, "--toolspec").stdout.strip() == "True"
    assert run_script(tmp_path, hooked, "--city", "x").stdout.strip() == "False"


def test_a_tool_without_cyclopts_is_left_alone(tmp_path):
    argparse_tool = IMPORT_HELPER + (
        "import argparse\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--city', required=True)\n"
        "parser.add_argument('--toolspec', action='store_true')\n"
        "print(parser.parse_args())\n"
    )
    done = run_script(tmp_path, argparse_tool, "--toolspec")
    assert done.returncode == 2 and "the following arguments are required" in done.stderr


def test_a_meta_app_is_described_by_its_commands(tmp_path):
    source = IMPORT_HELPER + '''\
from typing import Annotated
import cyclopts

app = cyclopts.App()


@app.command
def greet(name: str):
    """Greet someone."""
    print("hi", name)


@app.meta.default
def launcher(*tokens: Annotated[str, cyclopts.Parameter(show=False, allow_leading_hyphen=True)]):
    app(tokens)


app.meta()
'''
    done = run_script(tmp_path, source, "--toolspec")
    assert done.returncode == 0, done.stderr
    [spec] = json.loads(done.stdout)
    assert (spec["name"], spec["_subcommand"]) == ("tool_greet", "greet")
    assert run_script(tmp_path, source, "greet", "--name", "Bo").stdout.strip() == "hi Bo"


def load_helper() -> Any:
    spec = importlib.util.spec_from_file_location("_silica_toolspec", HELPER_PATH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def helper(monkeypatch) -> Any:
    module = load_helper()
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__file__="/t/cal.py"))
    return module


def test_app_spec_for_a_default_command_is_named_after_it_or_after_the_file(helper):
    app = cyclopts.App()

    @app.default
    def forecast(city: str, days: int = 1, *, toolspec: bool = False):
        """Forecast."""

    assert helper.app_spec(app) == {
        "name": "forecast",
        "description": "Forecast.",
        "input_schema": {"type": "object",
                         "properties": {"city": {"type": "string", "description": ""},
                                        "days": {"type": "integer", "description": "",
                                                 "default": 1}},
                         "required": ["city"]},
    }
    other = cyclopts.App()
    other.default(lambda: None)
    assert helper.app_spec(other)["name"] == "cal"  # a lambda has no usable name
    third = cyclopts.App()

    @third.default
    def main(x: int):
        """Main."""

    assert helper.app_spec(third)["name"] == "cal"
    assert helper.app_spec(cyclopts.App()) is None


def test_app_spec_lists_commands_silica_can_run_with_one_token(helper):
    app = cyclopts.App()

    @app.default
    def main(x: int):
        """Not listed: the commands describe the tool."""

    @app.command(name="list", alias="ls")
    def list_events(day: str):
        """List events."""

    @app.command(show=False)
    def hidden():
        """Hidden."""

    group = cyclopts.App(name="admin")
    app.command(group)

    @group.command
    def purge():
        """Two tokens away: not listed."""

    assert [(s["name"], s["_subcommand"]) for s in helper.app_spec(app)] == [
        ("cal_list", "list")]


def test_only_the_first_app_call_with_the_flag_is_answered(helper, capsys):
    app = cyclopts.App()

    @app.default
    def forecast(city: str, *, toolspec: bool = False):
        """Forecast."""

    assert helper._answer_in_cyclopts_place(app, ["--city", "x"]) == (False, None)
    assert helper._answer_in_cyclopts_place(app, ["--", "--toolspec"]) == (False, None)
    # cyclopts can parse this one: the tool answers the flag itself.
    assert helper._answer_in_cyclopts_place(app, ["--city", "x", "--toolspec"]) == (False, None)
    assert helper._answer_in_cyclopts_place(app, ["--toolspec"]) == (False, None)  # answered

    helper._hook_state["answered"] = False
    with pytest.raises(SystemExit) as exited:
        helper._answer_in_cyclopts_place(app, ["--toolspec"])
    assert exited.value.code == 0
    assert json.loads(capsys.readouterr().out)["input_schema"]["required"] == ["city"]
