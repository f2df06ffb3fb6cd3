"""MCP Apps on silica's MCP client side, against a real server (``mcp_fixtures/apps_server.py``):
silica declares the extension, keeps each tool's ``_meta.ui``, and never offers a model a
tool whose visibility leaves the model out, nor runs it for one; an app's HTML is read from a
stdio server within ``APP_ANSWER_MAX``, never held whole past it."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from silica.config import McpServerSettings, McpSettings, SandboxSettings, Settings
from silica.mcp.bounded import APP_ANSWER_MAX, TOO_LARGE, BoundedLines, RequestWatch
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


# -- an app's HTML is read within bounds -------------------------------------------------


class Sink:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send(self, item: bytes) -> None:
        self.sent.append(item)


def read_request(rid, uri: str = "ui://a/app") -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "resources/read",
                       "params": {"uri": uri}}).encode() + b"\n"


def test_an_answer_to_an_app_read_is_refused_past_its_bound_without_being_held_whole():
    lines, sink = BoundedLines(None), Sink()
    watch = RequestWatch(sink, lines)
    asyncio.run(watch.send(read_request(7)))
    asyncio.run(watch.send(read_request(8, "file:///a.png")))  # not an app: no bound
    assert sink.sent == [read_request(7), read_request(8, "file:///a.png")]
    assert lines.limits == {7: APP_ANSWER_MAX}
    lines.feed(b'{"jsonrpc":"2.0","id":7,"result":{"contents":[{"uri":"ui://a/app","text":"')
    chunk = b"x" * 65536
    held = 0
    for _ in range(2 * APP_ANSWER_MAX // len(chunk)):
        lines.feed(chunk)
        held = max(held, len(lines._held))
    lines.feed(b'"}]}}\n')
    assert held <= APP_ANSWER_MAX + len(chunk)  # never the whole answer
    answer = json.loads(bytes(lines._ready))
    assert answer["id"] == 7 and answer["error"]["data"] == TOO_LARGE
    assert "over 8,388,608 bytes" in answer["error"]["message"]
    assert lines.limits == {}


@given(st.binary(max_size=400) | st.builds(read_request, st.integers() | st.text(max_size=8)
                                           | st.none() | st.booleans()))
def test_whatever_silica_writes_to_a_server_passes_unchanged(item):
    lines, sink = BoundedLines(None), Sink()
    asyncio.run(RequestWatch(sink, lines).send(item))
    assert sink.sent == [item]
    assert all(isinstance(k, int | str) and not isinstance(k, bool) for k in lines.limits)
