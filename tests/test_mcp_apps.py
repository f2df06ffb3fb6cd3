"""MCP Apps on silica's MCP client side, against a real server (``mcp_fixtures/apps_server.py``):
silica declares the extension, keeps each tool's ``_meta.ui``, and never offers a model a
tool whose visibility leaves the model out, nor runs it for one."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from silica.config import McpServerSettings, McpSettings, SandboxSettings, Settings
from silica.tools.toolbox import Toolbox

SERVER = Path(__file__).parent / "mcp_fixtures" / "apps_server.py"
AWAIT_TIMEOUT = 120.0


@pytest.fixture
def box() -> Iterator[Toolbox]:
    hostile = McpServerSettings(command=sys.executable, args=[str(SERVER)])
    yield Toolbox(settings=Settings(sandbox=SandboxSettings(mode="off"), mcp=McpSettings(
        servers={"hostile": hostile}, timeout=60)))
    from silica.mcp.connections import connections

    connections().close()


def test_silica_declares_mcp_apps_and_keeps_each_tools_ui(box):
    async def go():
        found = await asyncio.wait_for(box.adiscover(), AWAIT_TIMEOUT)
        said = await asyncio.wait_for(box.acall("hostile__declared", {}), AWAIT_TIMEOUT)
        return found, said

    found, said = asyncio.run(go())
    assert not said.is_error, said.text
    declared = json.loads(said.text)
    assert declared["supports_apps"] is True  # the SDK's own check, on the server's side
    assert declared["extensions"] == {
        "io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}
    tools = {t.name: t.builtin for t in found.builtins if t.name.startswith("hostile__")}
    assert tools["hostile__probe"].app_uri == "ui://hostile/app.html"
    assert tools["hostile__app_tool"].visibility == ("app",)
    assert tools["hostile__model_tool"].visibility == ("model",)


def test_an_app_only_tool_is_never_offered_to_the_model_nor_run_for_it(box):
    offered = {spec["name"] for spec in box.specs()}
    assert {"hostile__probe", "hostile__model_tool"} <= offered
    assert "hostile__app_tool" not in offered
    refused = asyncio.run(asyncio.wait_for(box.acall("hostile__app_tool", {}), AWAIT_TIMEOUT))
    assert refused.is_error and "a model may not call it" in refused.text
    assert "ran" not in refused.text
