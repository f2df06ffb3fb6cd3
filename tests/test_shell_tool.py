"""The agent's ``shell`` tool: off by default, allow-list, approval, ``ask``/``chat`` flags and
``mcp serve --shell``; real subprocesses, the real CLI and the official MCP client."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from escape_streams import png
from mcp import ClientSession, StdioServerParameters, stdio_client
from wire import anthropic_server, text, tool_call

from silica.config import Settings, ShellSettings
from silica.tools.shell import SessionApproval, allowed_by, always_pattern
from silica.tools.toolbox import Toolbox


def toolbox(enabled: bool = True, allow: list[str] | None = None, approve=None) -> Toolbox:
    box = Toolbox(settings=Settings(shell=ShellSettings(enabled=enabled, allow=allow or [])))
    box.approve = approve
    return box


def names(box: Toolbox) -> list[str]:
    return [s["name"] for s in box.specs()]


def write_config(home: Path, body: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(body, encoding="utf-8")


def silica(*args: str, env: dict | None = None, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          text=True, env=env or os.environ.copy(), input=stdin, timeout=300)


# -- offered or not -----------------------------------------------------------------------


def test_not_offered_by_default():
    assert "shell" not in names(Toolbox())
    assert "shell" not in names(Toolbox(settings=Settings()))


def test_offered_with_shell_enabled_in_config(home):
    write_config(home, '[shell]\nenabled = true\nallow = ["chafa *", "echo *"]\n')
    done = silica("tools", "spec", "shell")
    assert done.returncode == 0, done.stderr
    spec = json.loads(done.stdout)
    assert spec["input_schema"]["required"] == ["command"]
    assert "`chafa *`" in spec["description"] and "`echo *`" in spec["description"]
    assert "kitty" in spec["description"] and "sixel" in spec["description"]


# -- which commands run -------------------------------------------------------------------


def test_patterns_match_whole_lines_and_never_let_operators_through():
    assert allowed_by("chafa -f kitty a.png", ["chafa *"]) == "chafa *"
    assert allowed_by("  chafa x ", ["chafa *"]) == "chafa *"
    assert allowed_by("chafa x; rm -rf ~", ["chafa *"]) is None
    assert allowed_by("chafa $(rm x)", ["chafa *"]) is None
    assert allowed_by("chafa x\nrm y", ["chafa *"]) is None
    assert allowed_by("python plot.py | head", ["python plot.py *"]) is None
    assert allowed_by("python plot.py 3 | head", ["python plot.py * | head"]) is not None
    assert allowed_by("anything; at all", ["*"]) == "*"
    assert allowed_by("chafabomb", ["chafa *"]) is None
    assert always_pattern("python plot.py 3") == "python *"
    assert always_pattern("  ls") == "ls"  # what the person saw: ls with no arguments
    assert always_pattern("; ls") is None


def test_an_allowed_pattern_runs(project):
    box = toolbox(allow=["echo *"])
    result = box.call("shell", {"command": "echo hi from the shell"})
    assert not result.is_error, result.text
    assert "hi from the shell" in result.text


def test_it_runs_in_the_workspace_and_images_become_image_blocks(project):
    data = base64.b64encode(png(5, 4)).decode()
    (project / "emit.py").write_text(
        f"import sys\nsys.stdout.write('pic\\x1b_Gf=100,a=T;{data}\\x1b\\\\\\n')\n")
    box = toolbox(allow=["*"])
    result = box.call("shell", {"command": f"{sys.executable} emit.py"})
    assert not result.is_error, result.text
    [image] = result.images
    assert image.media_type == "image/png" and (image.width, image.height) == (5, 4)
    assert "pic" in result.text


def test_outside_the_allow_list_with_nobody_to_ask_it_is_refused_not_run(project):
    marker = project / "marker"
    box = toolbox(allow=["echo *"])
    result = box.call("shell", {"command": f"touch {marker}"})
    assert result.is_error
    assert not marker.exists()
    assert "--allow-shell" in result.text and "[shell] allow" in result.text
    assert '"touch *"' in result.text


def test_a_failing_command_is_an_error_result_with_its_status(project):
    result = toolbox(allow=["*"]).call("shell", {"command": "echo out; echo bad >&2; exit 3"})
    assert result.is_error
    assert "exited with code 3" in result.text and "bad" in result.text


def test_a_bad_input_is_an_error_result():
    box = toolbox(allow=["*"])
    assert box.call("shell", {"command": "  "}).is_error
    assert box.call("shell", {"command": "true", "timeout": 0}).is_error


def test_approval_always_allows_the_rest_of_the_pattern(project):
    asked: list[str] = []

    async def prompt(command: str) -> bool | str:
        asked.append(command)
        return always_pattern(command) or False

    box = toolbox(allow=[], approve=SessionApproval(prompt))
    one, two = project / "one", project / "two"
    assert not box.call("shell", {"command": f"touch {one}"}).is_error
    assert not box.call("shell", {"command": f"touch {two}"}).is_error
    assert one.exists() and two.exists()
    assert asked == [f"touch {one}"]  # asked once: "always" covered the second
    box.call("shell", {"command": f"touch {one}; rm {one}"})  # an operator: asked again
    assert len(asked) == 2


def test_approval_no_refuses_and_the_model_is_told(project):
    marker = project / "marker"

    async def prompt(command: str) -> bool | str:
        return False

    result = toolbox(approve=SessionApproval(prompt)).call(
        "shell", {"command": f"touch {marker}"})
    assert result.is_error and "did not allow" in result.text
    assert not marker.exists()


# -- ask and chat -------------------------------------------------------------------------


@pytest.fixture
def shell_config(home):
    write_config(home, '[shell]\nenabled = true\nallow = ["echo *"]\n')


def last_tool_result(request: dict) -> str:
    blocks = request["messages"][-1]["content"]
    [result] = [b for b in blocks if b.get("type") == "tool_result"]
    return "".join(c.get("text", "") for c in result["content"])


def test_ask_refuses_a_command_outside_the_allow_list(shell_config, project):
    marker = project / "marker"
    with anthropic_server([tool_call("shell", {"command": f"touch {marker}"}),
                           text("Refused.")]) as srv:
        done = silica("ask", "make a file", env={**os.environ, **srv.env})
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    told = last_tool_result(srv.requests[1])
    assert "refused" in told and "--allow-shell" in told


def test_ask_with_allow_shell_runs_it(project):
    marker = project / "marker"
    with anthropic_server([tool_call("shell", {"command": f"touch {marker} && echo made"}),
                           text("Done.")]) as srv:
        done = silica("ask", "make a file", "--allow-shell", env={**os.environ, **srv.env})
    assert done.returncode == 0, done.stderr
    assert marker.exists()
    assert "made" in last_tool_result(srv.requests[1])
    assert "shell" in [t["name"] for t in srv.requests[0]["tools"]]


def test_ask_without_shell_does_not_offer_it(project):
    with anthropic_server([text("Hi.")]) as srv:
        done = silica("ask", "hi", env={**os.environ, **srv.env})
    assert done.returncode == 0, done.stderr
    assert "shell" not in [t["name"] for t in srv.requests[0].get("tools", [])]


def test_chat_asks_and_always_covers_the_pattern(shell_config, project):
    one, two = project / "one", project / "two"
    with anthropic_server([tool_call("shell", {"command": f"touch {one}"}), text("One."),
                           tool_call("shell", {"command": f"touch {two}"}),
                           text("Two.")]) as srv:
        done = silica("chat", env={**os.environ, **srv.env},
                      stdin="first\na\nsecond\n/exit\n")
    assert done.returncode == 0, done.stderr
    assert one.exists() and two.exists()
    assert done.stderr.count("[a]lways for `touch *`") == 1


# -- mcp serve --shell --------------------------------------------------------------------


def call_over_mcp(*flags: str, command: str | None = None) -> tuple[list[str], object]:
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "silica", "mcp", "serve", *flags],
                                   env=os.environ.copy(), cwd=os.getcwd())

    async def act():
        with open(os.devnull, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                listed = [t.name for t in (await session.list_tools()).tools]
                result = await session.call_tool("shell", {"command": command}) \
                    if command else None
                return listed, result

    return asyncio.run(asyncio.wait_for(act(), 120))


def text_of(result) -> str:
    return "\n".join(c.text for c in result.content if hasattr(c, "text"))


def test_mcp_serve_shell_lists_and_runs_it(project):
    listed, result = call_over_mcp("--shell", command="echo hi | tr a-z A-Z")
    assert "shell" in listed
    assert result.is_error is False and "HI" in text_of(result)


def test_mcp_serve_without_shell_has_no_shell_tool(home):
    write_config(home, "[shell]\nenabled = true\n")  # config alone does not serve it
    listed, _ = call_over_mcp()
    assert "shell" not in listed and "read_file" in listed


def test_mcp_serve_with_an_allow_list_refuses_others(home, project):
    write_config(home, '[shell]\nallow = ["echo *"]\n')
    marker = project / "marker"
    _, refused = call_over_mcp("--shell", command=f"touch {marker}")
    assert refused.is_error and "[shell] allow" in text_of(refused)
    assert not marker.exists()
    _, allowed = call_over_mcp("--shell", command="echo fine")
    assert allowed.is_error is False and "fine" in text_of(allowed)
