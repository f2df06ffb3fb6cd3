"""MCP servers as a tool source: real servers (the official SDK, stdio and HTTP) started by
silica, their tools listed beside user tools, their answers turned into checked blocks.

The server is ``mcp_fixtures/picture_server.py``: one tool per kind of result, good or bad.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import script_tool, simple_spec, wait_for_port
from PIL import Image
from wire import anthropic_server, text, tool_call

from silica.agent.loop import Agent
from silica.blocks import ImageBlock, ToolResult
from silica.config import ConfigError, McpServerSettings, McpSettings, Settings, load_settings
from silica.mcp.connections import connections
from silica.mcp.source import tool_name
from silica.tools.model import TOOL_NAME_PATTERN, ToolStatus
from silica.tools.toolbox import Toolbox

PICTURE_SERVER = Path(__file__).parent / "mcp_fixtures" / "picture_server.py"
PICTURE_TOOLS = ["echo", "png", "jpeg_as_png", "broken_png", "bad_base64", "audio",
                 "resource_link", "fail", "crash", "sleep"]


def pictures() -> McpServerSettings:
    return McpServerSettings(command=sys.executable, args=[str(PICTURE_SERVER)])


def with_servers(timeout: float = 30, **servers: McpServerSettings) -> Settings:
    return Settings(mcp=McpSettings(servers=servers, timeout=timeout))


def call_all(box: Toolbox, *calls: tuple[str, dict]) -> list[ToolResult]:
    """Discover once, then make the calls at once, as the agent does."""

    async def go():
        await box.adiscover()
        return await asyncio.gather(*(box.acall(name, args) for name, args in calls))

    return asyncio.run(go())


def pillow(block: ImageBlock) -> Image.Image:
    img = Image.open(io.BytesIO(block.data))
    img.load()
    return img


# -- discovery --------------------------------------------------------------------------


def test_each_mcp_tool_is_listed_under_its_server_with_origin_mcp():
    found = Toolbox(settings=with_servers(pictures=pictures())).discover()
    mine = [t for t in found.builtins if t.folder.origin == "mcp:pictures"]
    assert sorted(t.name for t in mine) == sorted(f"pictures__{n}" for n in PICTURE_TOOLS)
    assert all(t.status is ToolStatus.OK for t in mine)
    echo = next(t for t in mine if t.name == "pictures__echo")
    assert echo.spec.description == "Say the text back."
    assert echo.spec.input_schema["required"] == ["text"]
    row = echo.to_row()
    assert row["origin"] == "mcp:pictures" and row["path"] == "<mcp:pictures>"
    assert found.runnable()["read_file"].folder.origin == "builtin"


def test_without_servers_nothing_is_started_and_the_sdk_is_not_imported(project):
    code = ("import sys; from silica.tools.toolbox import Toolbox; "
            "names = [t.name for t in Toolbox().discover().builtins]; "
            "print(names, 'mcp' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=project, check=True).stdout
    assert out.strip() == "['read_file'] False"


def test_tool_names_are_prefixed_and_sanitised():
    assert tool_name("files", "read") == "files__read"
    assert tool_name("my.server", "get file/v2") == "my_server__get_file_v2"
    long_a, long_b = tool_name("s", "x" * 80 + "a"), tool_name("s", "x" * 80 + "b")
    assert len(long_a) == 64 and long_a != long_b
    assert all(re.match(TOOL_NAME_PATTERN, n) for n in (long_a, long_b))


# -- results ----------------------------------------------------------------------------


def test_images_are_sniffed_checked_and_fitted_like_any_tool_image():
    box = Toolbox(settings=with_servers(pictures=pictures()))
    png, jpeg, broken, bad = call_all(box, ("pictures__png", {}), ("pictures__jpeg_as_png", {}),
                                      ("pictures__broken_png", {}), ("pictures__bad_base64", {}))
    assert png.text == "here is a PNG" and not png.is_error
    [image] = png.images
    assert image.media_type == "image/png" and pillow(image).size == (120, 80)
    [image] = jpeg.images
    assert image.media_type == "image/jpeg" and pillow(image).format == "JPEG"
    assert broken.images == [] and broken.text.startswith("[image dropped:")
    assert bad.images == [] and bad.text == \
        "[image dropped: MCP server 'pictures' sent invalid base64]"


def test_text_audio_resources_and_errors():
    box = Toolbox(settings=with_servers(pictures=pictures()))
    echo, audio, links, fail = call_all(box, ("pictures__echo", {"text": "hi"}),
                                        ("pictures__audio", {}),
                                        ("pictures__resource_link", {}), ("pictures__fail", {}))
    assert echo.text == "echo: hi" and not echo.is_error
    assert audio.text == "[audio from pictures: audio/wav, 1024 bytes, not shown]"
    assert links.text == ("[resource link: file:///srv/report.pdf]\n"
                          "[resource: file:///srv/notes.txt]\nthe notes say hi")
    assert fail.is_error and fail.text == "no such city: Atlantis"
    assert not any(r.images for r in (echo, audio, links, fail))


def test_bad_input_is_refused_before_the_server_is_started():
    box = Toolbox(settings=with_servers(pictures=pictures()))
    result = box.call("pictures__echo", {})
    assert result.is_error and "needs the parameter 'text'" in result.text


# -- failures ---------------------------------------------------------------------------


def test_a_server_that_crashes_mid_call_gives_an_error_and_the_rest_keeps_working(user_tools):
    script_tool(user_tools, "hello.py", simple_spec("hello"), body="print('hello from a file')")
    box = Toolbox(settings=with_servers(pictures=pictures()))
    # one connection per server: calls in flight when it dies share its fate, so crash alone
    [crash] = call_all(box, ("pictures__crash", {}))
    echo, hello = call_all(box, ("pictures__echo", {"text": "still here"}), ("hello", {}))
    assert crash.is_error
    assert "MCP server 'pictures' stopped during the call of 'crash'" in crash.text
    assert "crashing on purpose" in crash.text  # the end of its stderr
    assert echo.text == "echo: still here" and not echo.is_error
    assert hello.text.strip() == "hello from a file" and not hello.is_error
    assert box.call("pictures__png").images  # the server was started again


def test_a_server_whose_command_does_not_exist_is_a_row_with_the_reason(user_tools):
    script_tool(user_tools, "hello.py", simple_spec("hello"), body="print('hi')")
    box = Toolbox(settings=with_servers(
        ghost=McpServerSettings(command="no-such-mcp-server-here"), pictures=pictures()))
    found = box.discover()
    [row] = [t for t in found.all_tools if t.folder.origin == "mcp:ghost"]
    assert row.name == "ghost__*" and row.status is ToolStatus.ERROR and row.broken
    assert row.reason == ("cannot start the MCP server 'ghost': no command "
                          "'no-such-mcp-server-here' (is it installed and on PATH?)")
    names = {spec["name"] for spec in box.specs()}
    assert {"hello", "pictures__echo", "read_file"} <= names and "ghost__*" not in names
    assert box.call("pictures__echo", {"text": "ok"}).text == "echo: ok"
    assert box.call("ghost__*").is_error


def test_a_server_that_hangs_or_speaks_garbage_times_out_with_a_clear_reason():
    hang = McpServerSettings(command=sys.executable,
                             args=["-c", "import time; time.sleep(60)"])
    junk = McpServerSettings(command=sys.executable, args=[
        "-c", "print('hello, not json', flush=True); import time; time.sleep(60)"])
    box = Toolbox(settings=with_servers(timeout=1, hang=hang, junk=junk))
    found = box.discover()
    rows = {t.name: t for t in found.builtins if t.folder.origin.startswith("mcp:")}
    assert rows["hang__*"].status is ToolStatus.ERROR
    assert rows["hang__*"].reason == "the MCP server 'hang' did not answer within 1 s " \
        "(starting up)"
    assert rows["junk__*"].reason.endswith(
        "it printed text that is not MCP on stdout: 'hello, not json'")


def test_a_server_over_streamable_http(free_port):
    server = subprocess.Popen([sys.executable, str(PICTURE_SERVER), "--http", str(free_port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(free_port)
        box = Toolbox(settings=with_servers(
            web=McpServerSettings(url=f"http://127.0.0.1:{free_port}/mcp"),
            gone=McpServerSettings(url="http://127.0.0.1:9/mcp")))
        png, echo = call_all(box, ("web__png", {}), ("web__echo", {"text": "over http"}))
    finally:
        connections().close()  # a live connection would hold the server's shutdown
        server.terminate()
        server.wait(10)
    assert pillow(png.images[0]).format == "PNG" and echo.text == "echo: over http"
    [gone] = [t for t in box.discover().builtins if t.folder.origin == "mcp:gone"]
    assert gone.reason.startswith("cannot reach the MCP server 'gone' at http://127.0.0.1:9/mcp")


# -- configuration ----------------------------------------------------------------------


def test_config_declares_servers_and_refuses_bad_ones(home):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        '[mcp]\ntimeout = 5\n'
        '[mcp.servers.files]\ncommand = "uvx"\nargs = ["files-mcp", "--root", "."]\n'
        'env = { LOG_LEVEL = "warning" }\n'
        '[mcp.servers.remote]\nurl = "http://127.0.0.1:9000/mcp"\n')
    mcp = load_settings().mcp
    assert mcp.timeout == 5 and mcp.servers["files"].args == ["files-mcp", "--root", "."]
    assert mcp.servers["remote"].url == "http://127.0.0.1:9000/mcp"
    for body, problem in [
        ('[mcp.servers.both]\ncommand = "x"\nurl = "http://h/mcp"', 'give either "command"'),
        ("[mcp.servers.none]\nargs = []", 'give either "command"'),
        ('[mcp.servers.s]\ncommand = "x"\nport = 3', "mcp.servers.s.port: unknown key"),
        ('[mcp.servers.s]\nurl = "ftp://h"', "mcp.servers.s.url"),
    ]:
        (home / "config.toml").write_text(body)
        with pytest.raises(ConfigError, match=re.escape(problem)):
            load_settings()


# -- the agent --------------------------------------------------------------------------


def test_the_agent_sends_mcp_images_to_the_model_checked(monkeypatch):
    calls = (tool_call("pictures__png", {}, id="png") +
             tool_call("pictures__jpeg_as_png", {}, id="jpeg") +
             tool_call("pictures__broken_png", {}, id="broken"))
    with anthropic_server([calls, text("Two pictures and a broken one.")]) as srv:
        srv.use(monkeypatch)
        agent = Agent.start(Settings(provider="anthropic",
                                     mcp=McpSettings(servers={"pictures": pictures()})))
        answer = asyncio.run(agent.send("show me the pictures"))
    assert answer == "Two pictures and a broken one."
    first, second = srv.requests
    assert {"pictures__png", "pictures__jpeg_as_png", "pictures__broken_png"} <= \
        {t["name"] for t in first["tools"]}
    results = {b["tool_use_id"]: b for b in second["messages"][-1]["content"]
               if b["type"] == "tool_result"}
    assert sorted(results) == ["broken", "jpeg", "png"]
    formats = {}
    for call_id, result in results.items():
        assert result.get("is_error") is not True
        for block in result["content"]:
            if block["type"] == "image":
                source = block["source"]
                img = Image.open(io.BytesIO(base64.b64decode(source["data"])))
                img.load()
                assert Image.MIME[img.format] == source["media_type"]
                formats.setdefault(call_id, []).append(img.format)
    assert formats == {"png": ["PNG"], "jpeg": ["JPEG"]}
    [notice] = results["broken"]["content"]
    assert notice["type"] == "text" and notice["text"].startswith("[image dropped:")
    assert "base64" not in json.dumps(results["broken"])
