"""MCP servers as a tool source, against the real reference servers from npm:
``@modelcontextprotocol/server-memory`` and ``@modelcontextprotocol/server-everything``,
run by ``node`` and called through ``Toolbox`` as the agent calls them.

They are installed once per session at the versions pinned in ``tests/npm`` (its
package.json and package-lock.json, ``npm ci`` into a temporary folder; the npm cache makes
later runs quick). node and npm are required (``.ci/run`` installs them):
these tests fail without them, they never skip. Every await is bounded; no time is asserted.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import pytest
from npm_packages import install_npm
from PIL import Image

from silica.blocks import ImageBlock, ToolResult
from silica.config import McpServerSettings, McpSettings, Settings
from silica.tools.model import ToolStatus
from silica.tools.toolbox import Toolbox

AWAIT_TIMEOUT = 120.0  # node's first start of a server, and its handshake, on a slow machine
# Tools every recent server-everything has (its names use dashes since 2025).
EVERYTHING_TOOLS = {"echo", "get-sum", "get-tiny-image", "get-structured-content",
                    "get-resource-links", "get-resource-reference",
                    "toggle-subscriber-updates"}


@pytest.fixture(scope="session")
def npm_servers(tmp_path_factory) -> Path:
    """The installed packages' ``node_modules/@modelcontextprotocol`` folder."""
    return install_npm(tmp_path_factory) / "node_modules" / "@modelcontextprotocol"


@pytest.fixture
def box(npm_servers, home) -> Iterator[Toolbox]:
    # The servers run confined: the memory file goes in the server's own start folder, the
    # one folder it may write (the project is not trusted), not inside node_modules.
    memory_file = home / "mcp-servers" / "memory" / "memory.jsonl"
    memory = McpServerSettings(
        command="node", args=[str(npm_servers / "server-memory" / "dist" / "index.js")],
        env={"MEMORY_FILE_PATH": str(memory_file)})
    everything = McpServerSettings(
        command="node",
        args=[str(npm_servers / "server-everything" / "dist" / "index.js"), "stdio"])
    yield Toolbox(settings=Settings(mcp=McpSettings(
        servers={"memory": memory, "everything": everything}, timeout=60)))
    stop_servers()


def stop_servers() -> None:
    """Stop the servers this test started: silica keeps a live connection to each for the
    life of the process, and the next test must start from a fresh one."""
    from silica.mcp.connections import connections

    connections().close()


async def bounded(step: Awaitable[Any]) -> Any:
    return await asyncio.wait_for(step, AWAIT_TIMEOUT)


def calls(box: Toolbox, *steps: tuple[str, dict]) -> list[ToolResult]:
    """Discover, then make the calls one after the other on the same Toolbox."""

    async def go() -> list[ToolResult]:
        await bounded(box.adiscover())
        return [await bounded(box.acall(name, args)) for name, args in steps]

    return asyncio.run(go())


def ok(result: ToolResult) -> ToolResult:
    assert not result.is_error, result.text
    return result


# -- server-everything ------------------------------------------------------------------


def test_everything_lists_a_row_per_tool_all_ok(box):
    found = asyncio.run(bounded(box.adiscover()))
    rows = [t for t in found.builtins if t.folder.origin == "mcp:everything"]
    names = {t.name.removeprefix("everything__") for t in rows}
    assert names >= EVERYTHING_TOOLS, sorted(names)
    assert "*" not in names  # the server was listed, not an error row
    assert all(t.status is ToolStatus.OK for t in rows), \
        [(t.name, t.reason) for t in rows if t.status is not ToolStatus.OK]
    echo = next(t for t in rows if t.name == "everything__echo")
    assert echo.spec.input_schema["required"] == ["message"]
    assert echo.to_row()["path"] == "<mcp:everything>"


def test_everything_echo_text_comes_back(box):
    [echo] = calls(box, ("everything__echo", {"message": "hello from silica"}))
    assert ok(echo).text == "Echo: hello from silica" and not echo.images


def test_everything_tiny_image_passes_the_image_check(box):
    # Its sample PNG carries an iCCP chunk with a bad CRC: silica salvages it.
    [result] = calls(box, ("everything__get-tiny-image", {}))
    ok(result)
    [image] = result.images
    assert isinstance(image, ImageBlock) and image.media_type == "image/png"
    img = Image.open(io.BytesIO(image.data))
    img.load()  # decodes fully, as the provider would
    assert img.format == "PNG" and img.width > 0 and img.height > 0
    assert "[image dropped" not in result.text
    assert "MCP logo" in result.text  # the text blocks around the image are kept


def test_everything_structured_content_and_resources(box):
    structured, links, text_ref, blob_ref = calls(
        box, ("everything__get-structured-content", {"location": "Chicago"}),
        ("everything__get-resource-links", {"count": 2}),
        ("everything__get-resource-reference", {"resourceType": "Text", "resourceId": 1}),
        ("everything__get-resource-reference", {"resourceType": "Blob", "resourceId": 1}))
    weather = json.loads(ok(structured).text)  # its content is the structured JSON as text
    assert {"temperature", "conditions", "humidity"} <= set(weather)
    assert ok(links).text.count("[resource link: demo://resource/") == 2
    assert "[resource: demo://resource/dynamic/text/1]\nResource 1:" in ok(text_ref).text
    assert "[resource: demo://resource/dynamic/blob/1, " in ok(blob_ref).text
    assert not any(r.images for r in (structured, links, text_ref, blob_ref))


def test_everything_keeps_its_session_between_calls(box):
    # The toggle is held per session in the server process: only a live connection, kept
    # between calls, sees it go on and then off.
    first, second = calls(box, ("everything__toggle-subscriber-updates", {}),
                          ("everything__toggle-subscriber-updates", {}))
    assert ok(first).text.startswith("Started"), first.text
    assert ok(second).text.startswith("Stopped"), second.text


# -- server-memory ----------------------------------------------------------------------


def test_memory_entity_created_in_one_call_is_read_in_the_next(box):
    entity = {"name": "Ada_Lovelace", "entityType": "person",
              "observations": ["wrote the first program"]}
    made, graph, found = calls(box, ("memory__create_entities", {"entities": [entity]}),
                               ("memory__read_graph", {}),
                               ("memory__search_nodes", {"query": "Ada"}))
    assert "Ada_Lovelace" in ok(made).text
    names = [e["name"] for e in json.loads(ok(graph).text)["entities"]]
    assert names == ["Ada_Lovelace"]
    assert "wrote the first program" in ok(found).text


def test_everything_tiny_image_reaches_the_model_as_text_image_text(npm_servers, home,
                                                                     monkeypatch):
    # server-everything sends words, the image, words about the image above: in that order
    from wire import text, tool_call
    from wire.responses_wire import responses_server

    from silica.agent.loop import Agent

    everything = McpServerSettings(
        command="node",
        args=[str(npm_servers / "server-everything" / "dist" / "index.js"), "stdio"])
    settings = Settings(provider="openai-responses",
                        mcp=McpSettings(servers={"everything": everything}, timeout=60))
    script = [tool_call("everything__get-tiny-image", {}, id="call_t"), text("Seen.")]
    try:
        with responses_server(script) as srv:
            srv.use(monkeypatch)
            agent = Agent.start(settings)
            assert asyncio.run(bounded(agent.send("show me"))) == "Seen."
    finally:
        stop_servers()
    [output] = [i for i in srv.requests[1]["input"] if i.get("type") == "function_call_output"]
    kinds = [part["type"] for part in output["output"]]
    assert kinds == ["input_text", "input_image", "input_text"]
    assert "MCP logo" in output["output"][2]["text"]
