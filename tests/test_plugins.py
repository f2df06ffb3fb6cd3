"""The plugin contract: a plugin registered for one test changes what a user sees."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from conftest import script_tool, simple_spec

from silica.hookspecs import hookimpl
from silica.plugins import DEFAULT_PLUGINS, build_plugin_manager, get_plugin_manager
from silica.tools.model import ToolFolder
from silica.tools.toolbox import Toolbox


@pytest.fixture
def register():
    pm = get_plugin_manager()
    added = []

    def add(plugin):
        pm.register(plugin)
        added.append(plugin)
        return plugin

    yield add
    for plugin in added:
        pm.unregister(plugin)


def test_default_plugins_are_registered_like_any_other():
    pm = build_plugin_manager()
    assert all(pm.get_plugin(name) is not None for name in DEFAULT_PLUGINS)


def test_a_plugin_adds_a_tool_folder(register, tmp_path):
    extra = tmp_path / "team-tools"
    script_tool(extra, "team.py", simple_spec("team"), body="print('from the team')")

    class TeamFolder:
        @hookimpl
        def silica_tool_folders(self, cwd, home):
            return [ToolFolder(extra, "team", 1000)]

    register(TeamFolder())
    box = Toolbox()
    assert box.discover().runnable()["team"].folder.origin == "team"
    assert box.call("team", {}).text.strip() == "from the team"


def test_a_plugin_result_processor_runs_in_order(register, user_tools):
    script_tool(user_tools, "shout.py", simple_spec("shout"), body="print('quiet words')")
    seen = []

    class Upper:
        @hookimpl
        def silica_result_processors(self, register):
            def process(draft):
                seen.append(draft.text)
                draft.text = draft.text.upper()
            register("upper", 150, process)

    register(Upper())
    assert Toolbox().call("shout", {}).text.strip() == "QUIET WORDS"
    assert seen == ["quiet words\n"]


def test_a_failing_processor_is_reported_and_the_output_kept(register, user_tools):
    script_tool(user_tools, "t.py", simple_spec("t"), body="print('still here')")

    class Broken:
        @hookimpl
        def silica_result_processors(self, register):
            def process(draft):
                draft.text = ""
                raise RuntimeError("boom")
            register("broken", 10, process)

    register(Broken())
    result = Toolbox().call("t", {})
    assert "still here" in result.text
    assert "result processor 'broken' failed and was skipped: boom" in result.text


def test_a_plugin_changes_the_tool_environment(register, user_tools):
    body = "import os\nprint(os.environ.get('TEAM_REGION'))"
    script_tool(user_tools, "env.py", simple_spec("env"), body=body)

    class Region:
        @hookimpl
        def silica_tool_env(self, path, env):
            env["TEAM_REGION"] = "eu-north"

    register(Region())
    assert Toolbox().call("env", {}).text.strip() == "eu-north"


def test_result_observers_see_every_call_and_a_raising_one_changes_nothing(
        register, user_tools, capsys):
    script_tool(user_tools, "t.py", simple_spec("t"), body="print('ok')")
    seen = []

    class Watcher:
        @hookimpl
        def silica_tool_result(self, tool, result):
            seen.append((tool.name, result.is_error))

    class Faulty:
        @hookimpl
        def silica_tool_result(self, tool, arguments, result):
            raise RuntimeError("observer broke")

    register(Watcher())
    register(Faulty())
    result = Toolbox().call("t", {})
    assert result.text.strip() == "ok" and not result.is_error
    assert seen == [("t", False)]
    assert "observer broke" in capsys.readouterr().err


def test_entry_point_plugins_obey_the_allow_list(tmp_path, monkeypatch):
    dist = tmp_path / "site" / "teamplugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: teamplugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[silica]\nteam = teamplugin\n")
    (tmp_path / "site" / "teamplugin.py").write_text(textwrap.dedent("""
        from silica.hookspecs import hookimpl

        @hookimpl
        def silica_tool_env(path, env):
            env["FROM_TEAM_PLUGIN"] = "1"
    """))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "teamplugin", raising=False)
    assert build_plugin_manager().get_plugin("team") is not None
    monkeypatch.setenv("SILICA_LOAD_PLUGINS", "someone-else")
    assert build_plugin_manager().get_plugin("team") is None
    monkeypatch.setenv("SILICA_LOAD_PLUGINS", "team")
    pm = build_plugin_manager()
    env: dict[str, str] = {}
    pm.hook.silica_tool_env(path=tmp_path, env=env)
    assert env["FROM_TEAM_PLUGIN"] == "1" and json.dumps(env)


def test_image_work_runs_off_the_event_loop(register, user_tools):
    """A slow image check (a bomb being refused, say) leaves the loop free: a server's other
    clients are answered meanwhile."""
    import asyncio
    import threading

    from silica.blocks import TextBlock

    script_tool(user_tools, "pic.py", simple_spec("pic"),
                body="print('{\"base64\": \"iVBORw0KGgo=\"}')")
    release = threading.Event()
    events: list[str] = []

    class SlowCheck:
        @hookimpl(tryfirst=True)
        def silica_prepare_image(self, payload, limits):
            events.append("image work started")
            release.wait(30)  # bounded: on the loop this would stall the pings below
            events.append("image work ended")
            return TextBlock(text="[image dropped: checked slowly]")

    register(SlowCheck())

    async def scenario():
        box = Toolbox()
        await box.adiscover()
        call = asyncio.create_task(box.acall("pic", {}))
        while "image work started" not in events:
            await asyncio.sleep(0.01)
        for _ in range(3):  # three pings answered while the image is being checked
            await asyncio.sleep(0)
        events.append("pings answered")
        release.set()
        return await call

    result = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert events == ["image work started", "pings answered", "image work ended"]
    assert "checked slowly" in result.text


# -- pluggy's order, for every hook ------------------------------------------------------


def _named_tool(name: str, says: str):
    from silica.blocks import TextBlock, ToolResult
    from silica.tools.builtin import BuiltinTool

    async def run(arguments, context):
        return ToolResult(blocks=[TextBlock(text=says)])

    return BuiltinTool(name=name, description=f"says {says}",
                       input_schema={"type": "object", "properties": {}}, run=run)


def test_a_plugin_replaces_a_default_built_in_tool_by_name(register):
    class Mine:
        @hookimpl
        def silica_builtin_tools(self, register):
            register(_named_tool("read_file", "the plugin's read_file"))

    register(Mine())
    found = Toolbox().discover()
    statuses = [str(t.status) for t in found.builtins if t.name == "read_file"]
    assert statuses == ["ok", "invalid spec"]
    assert Toolbox().call("read_file", {}).text == "the plugin's read_file"


def test_a_tryfirst_built_in_tool_wins_over_one_registered_after_it(register):
    class Early:
        @hookimpl(tryfirst=True)
        def silica_builtin_tools(self, register):
            register(_named_tool("twin", "tryfirst"))

    class Late:
        @hookimpl
        def silica_builtin_tools(self, register):
            register(_named_tool("twin", "plain"))

    register(Early())
    register(Late())
    assert Toolbox().call("twin", {}).text == "tryfirst"


def test_observers_run_in_pluggys_order_and_a_raising_one_is_reported(
        register, user_tools, capsys):
    script_tool(user_tools, "t.py", simple_spec("t"), body="print('ok')")
    seen = []

    def watcher(label, **marks):
        class Watcher:
            @hookimpl(**marks)
            def silica_tool_result(self, tool):
                seen.append(label)
        return Watcher()

    class Faulty:
        @hookimpl(tryfirst=True)
        def silica_tool_result(self, result):
            raise RuntimeError("observer broke")

    register(watcher("last", trylast=True))
    register(watcher("registered first"))
    register(Faulty())
    register(watcher("registered second"))
    register(watcher("first", tryfirst=True))
    Toolbox().call("t", {})
    assert seen == ["first", "registered second", "registered first", "last"]
    assert "observer broke" in capsys.readouterr().err


def test_session_cleanups_run_in_pluggys_order(register, tmp_path, monkeypatch, caplog):
    from silica.agent.sessions import _announce_deletion

    seen = []

    def cleaner(label, **marks):
        class Cleaner:
            @hookimpl(**marks)
            def silica_session_deleted(self, session_id):
                seen.append((label, session_id))
                if label == "broken":
                    raise OSError("service away")
        return Cleaner()

    register(cleaner("broken"))
    register(cleaner("tryfirst", tryfirst=True))
    register(cleaner("newest"))
    _announce_deletion("s1", tmp_path)
    assert [label for label, _ in seen][:3] == ["tryfirst", "newest", "broken"]
    assert "service away" in caplog.text


def test_result_processors_are_registered_once_per_manager(register, user_tools):
    script_tool(user_tools, "t.py", simple_spec("t"), body="print('ok')")
    calls = []

    class Counted:
        @hookimpl
        def silica_result_processors(self, register):
            calls.append(1)
            register("counted", 300, lambda draft: None)

    register(Counted())
    box = Toolbox()
    assert [box.call("t", {}).text.strip() for _ in range(3)] == ["ok"] * 3
    assert len(calls) == 1


PIXEL_PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADE"
             "lEQVR4nGNgYGAAAAAEAAH2FzhVAAAAAElFTkSuQmCC")


def test_a_plugin_replaces_a_default_result_processor_by_name(register, user_tools):
    printed = json.dumps({"base64": PIXEL_PNG})
    script_tool(user_tools, "t.py", simple_spec("t"), body=f"print({printed!r})")

    class Mine:
        @hookimpl
        def silica_result_processors(self, register):
            def process(draft):  # leaves base64 fields as they are
                draft.text = draft.text.strip()
            register("json-images", 200, process)

    register(Mine())
    result = Toolbox().call("t", {})
    assert result.text == printed and not result.images


def test_a_plugin_replaces_a_built_in_provider_by_name(register):
    from silica.providers.registry import provider_factories

    def mine(settings):
        raise AssertionError("not built here")

    class Mine:
        @hookimpl
        def silica_providers(self, register):
            register("Anthropic", mine)

    register(Mine())
    factories = provider_factories(get_plugin_manager())
    assert factories["anthropic"] is mine and "openai" in factories


def test_building_a_plugin_manager_changes_nothing_process_wide():
    import subprocess

    code = textwrap.dedent("""\
        import signal, sys
        before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        from silica.plugins import build_plugin_manager
        from silica.results.pipeline import result_processors
        pm = build_plugin_manager()
        result_processors(pm)
        after = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        print(before == after)
        """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.strip() == "True", done.stderr
