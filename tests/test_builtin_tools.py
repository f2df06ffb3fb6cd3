"""Built-in tools in the Toolbox, and the settings a Toolbox takes."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys

import pytest
from conftest import script_tool, simple_spec, trust
from PIL import Image

from silica.blocks import ImageBlock, TextBlock, ToolResult
from silica.config import Settings, ToolSettings
from silica.hookspecs import hookimpl
from silica.plugins import get_plugin_manager
from silica.tools.builtin import BuiltinTool
from silica.tools.toolbox import Toolbox

SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}}


@pytest.fixture
def register():
    pm = get_plugin_manager()
    added = []

    def add(*tools: BuiltinTool | object, raises: Exception | None = None):
        class Plugin:
            @hookimpl
            def silica_builtin_tools(self, register):
                for tool in tools:
                    register(tool)
                if raises:
                    raise raises

        plugin = Plugin()
        pm.register(plugin, name=f"test-builtins-{len(added)}")
        added.append(plugin)

    yield add
    for plugin in added:
        pm.unregister(plugin)


def builtin(name: str, run) -> BuiltinTool:
    return BuiltinTool(name=name, description=f"the {name} tool", input_schema=SCHEMA, run=run)


def test_builtins_are_listed_with_origin_builtin():
    found = Toolbox().discover()
    [tool] = [t for t in found.builtins if t.name == "read_file"]
    assert (str(tool.status), tool.folder.origin, tool.path.name) == ("ok", "builtin",
                                                                      "<builtin>")
    assert tool.to_row()["origin"] == "builtin"
    assert found.runnable()["read_file"] is tool and tool in found.all_tools
    assert found.tools == []  # the tool files found: none here
    assert "read_file" in [s["name"] for s in Toolbox().specs()]


def test_a_project_or_user_file_cannot_silently_replace_a_builtin(user_tools, project):
    trust(project)
    for folder in (user_tools, project / ".silica" / "tools"):
        script_tool(folder, "read_file.py", simple_spec("read_file", path="string"),
                    body="print('an impostor')")
    (project / "notes.txt").write_text("the real file\n")
    box = Toolbox()
    found = box.discover()
    assert found.runnable()["read_file"].folder.origin == "builtin"
    files = [t for t in found.tools if t.name == "read_file"]
    assert [str(t.status) for t in files] == ["shadowed", "shadowed"]
    assert "allow_shadow_builtins = true" in files[0].reason
    assert sum("like silica's built-in" in w for w in found.warnings) == 2
    assert box.call("read_file", {"path": "notes.txt"}).text.endswith("the real file")
    listed = subprocess.run([sys.executable, "-m", "silica", "tools", "list"],
                            capture_output=True, text=True, check=True)
    assert "names a tool 'read_file', like silica's built-in" in listed.stderr


def test_with_allow_shadow_builtins_a_user_tool_replaces_the_builtin(user_tools):
    script_tool(user_tools, "read_file.py", simple_spec("read_file", path="string"),
                body="print('the user version')")
    box = Toolbox(settings=Settings(tools=ToolSettings(allow_shadow_builtins=True)))
    found = box.discover()
    assert found.runnable()["read_file"].folder.origin == "user"
    [shadowed] = [t for t in found.builtins if t.name == "read_file"]
    assert str(shadowed.status) == "shadowed" and "read_file.py (user)" in shadowed.reason
    assert box.call("read_file", {"path": "x"}).text.strip() == "the user version"


def test_a_builtin_runs_in_process_with_the_toolbox_context(register, project):
    seen = []

    async def run(arguments, context):
        seen.append((arguments, context.workdir, context.settings.max_turns))
        return ToolResult(blocks=[TextBlock(text="done")])

    register(builtin("probe", run))
    box = Toolbox(settings=Settings(max_turns=7))
    assert box.call("probe", {"x": 3}).text == "done"
    assert seen == [({"x": 3}, project.resolve(), 7)]
    unknown = box.call("probe", {"y": 1})  # the same input checks as a tool file
    assert unknown.is_error and "no parameter 'y'" in unknown.text and len(seen) == 1


def test_a_builtin_that_raises_gives_an_error_result(register):
    async def run(arguments, context):
        raise RuntimeError("disk on fire")

    async def wrong(arguments, context):
        return "not a result"

    register(builtin("boom", run), builtin("wrong", wrong))
    box = Toolbox()
    result = box.call("boom", {})
    assert result.is_error and "boom failed: RuntimeError: disk on fire" in result.text
    assert "returned str, not a ToolResult" in box.call("wrong", {}).text


def test_a_slow_builtin_times_out(register):
    async def run(arguments, context):
        await asyncio.sleep(30)

    register(builtin("sleepy", run))
    result = Toolbox(timeout=0.2).call("sleepy", {})
    assert result.is_error and "did not finish within 0.2 s" in result.text


def test_images_a_builtin_returns_go_through_prepare_image(register):
    buf = io.BytesIO()
    Image.new("RGB", (4000, 1000), (0, 90, 200)).save(buf, format="BMP")

    async def run(arguments, context):
        return ToolResult(blocks=[ImageBlock(media_type="image/bmp", data=buf.getvalue()),
                                  ImageBlock(media_type="image/png", data=b"not an image")])

    register(builtin("draw", run))
    result = Toolbox().call("draw", {})
    [image] = result.images
    assert (image.media_type, image.width, image.height, image.source) == \
        ("image/png", 1568, 392, "draw")
    assert "[image dropped:" in result.text  # the bad one says why, as from any tool


def test_bad_registrations_are_warnings_and_the_rest_still_load(register):
    async def run(arguments, context):
        return ToolResult(blocks=[TextBlock(text="first")])

    register(builtin("twice", run), builtin("twice", run), "not a tool",
             raises=RuntimeError("half-way"))
    found = Toolbox().discover()
    twice = [t for t in found.builtins if t.name == "twice"]
    assert [str(t.status) for t in twice] == ["ok", "invalid spec"]
    assert "registered twice" in twice[1].reason
    assert any("not a BuiltinTool" in w for w in found.warnings)
    assert any("half-way" in w for w in found.warnings)
    assert "read_file" in found.runnable()


def test_builtins_need_no_uv(monkeypatch, project):
    monkeypatch.setenv("SILICA_UV", str(project / "no-such-uv"))
    (project / "a.txt").write_text("hello\n")
    assert Toolbox().call("read_file", {"path": "a.txt"}).text == "     1\thello"


# -- settings ----------------------------------------------------------------------------


def test_settings_timeout_is_the_default_call_timeout(user_tools):
    script_tool(user_tools, "slow.py", simple_spec("slow"),
                body="import time\nprint('started', flush=True)\ntime.sleep(30)")
    box = Toolbox(settings=Settings(tools=ToolSettings(timeout=1)))
    assert box.timeout == 1
    result = box.call("slow", {})
    assert result.is_error and "timed out after 1 s" in result.text
    explicit = Toolbox(timeout=5, settings=Settings(tools=ToolSettings(timeout=1)))
    assert explicit.timeout == 5


def test_settings_env_withhold_hides_variables(user_tools, monkeypatch):
    monkeypatch.setenv("DEPLOY_TOKEN", "t0ken")
    monkeypatch.setenv("AWS_SECRET", "s3cret")
    monkeypatch.setenv("VISIBLE", "yes")
    monkeypatch.setenv("SILICA_TOOL_ENV_WITHHOLD", "AWS_*")
    names = ["DEPLOY_TOKEN", "AWS_SECRET", "VISIBLE"]
    script_tool(user_tools, "env.py", simple_spec("env"),
                body=f"import json, os\nprint(json.dumps({{n: os.environ.get(n) "
                     f"for n in {names!r}}}))")
    settings = Settings(tools=ToolSettings(env_withhold=["*_TOKEN"]))
    hidden = json.loads(Toolbox(settings=settings).call("env", {}).text)
    assert hidden == {"DEPLOY_TOKEN": None, "AWS_SECRET": None, "VISIBLE": "yes"}
    granted = Settings(tools=ToolSettings(env_grant={"env": ["DEPLOY_TOKEN"]}))
    plain = json.loads(Toolbox(settings=granted).call("env", {}).text)
    assert plain == {"DEPLOY_TOKEN": "t0ken", "AWS_SECRET": None, "VISIBLE": "yes"}


def test_settings_env_withhold_applies_to_toolspec_runs(user_tools, monkeypatch):
    monkeypatch.setenv("DEPLOY_TOKEN", "t0ken")
    spec = simple_spec("probe")
    user_tools.mkdir(parents=True, exist_ok=True)
    (user_tools / "probe.py").write_text(
        "import json, os, sys\n"
        f"spec = {spec!r}\n"
        "spec['description'] = 'token: ' + str(os.environ.get('DEPLOY_TOKEN'))\n"
        "print(json.dumps(spec))\n")
    settings = Settings(tools=ToolSettings(env_withhold=["DEPLOY_TOKEN"]))
    [tool] = Toolbox(settings=settings).discover().tools
    assert tool.spec.description == "token: None"
