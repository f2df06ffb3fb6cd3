"""The tools ``silica mcp serve`` serves, as an MCP host sees them: their metadata in
``tools/list``, ``structuredContent`` beside text and images, and built-ins that talk back
(elicitation, logging) through the host. Real server processes, the official MCP client
over stdio and HTTP; every await is bounded."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import mcp.types as types
from conftest import script_tool, write_tool
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from mcp_http import mcp_http_process
from PIL import Image
from test_mcp_serve import bounded, connected, text_of

from silica.blocks import TextBlock, ToolResult
from silica.mcp.served import structured_object
from silica.mcp.talkback import Rounds
from silica.tools.metadata import parse_metadata

REPO = Path(__file__).resolve().parent.parent
SERVE_FIXTURES = REPO / "tests" / "conformance" / "serve_fixtures.py"


def png(width: int = 4, height: int = 3) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


WEATHER = '''\
"""Weather for a city.

Metadata:
    title: Weather forecast
    read_only: true
    destructive: false
    idempotent: true
    open_world: true
    icon: https://example.org/icons/weather.svg
"""
import json, sys
SPEC = {"name": "weather", "description": "the weather",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
if "--toolspec" in sys.argv:
    print(json.dumps(SPEC))
    sys.exit(0)
print("sunny")
'''

COUNT_SCHEMA = {"type": "object", "properties": {"count": {"type": "integer"},
                                                 "label": {"type": "string"}},
                "required": ["count"]}


def counting_tool(folder: Path, name: str, printed: dict) -> None:
    """A tool declaring ``COUNT_SCHEMA`` as its output schema, printing ``printed``."""
    spec = {"name": name, "description": f"the {name} tool",
            "input_schema": {"type": "object", "properties": {}},
            "output_schema": COUNT_SCHEMA}
    script_tool(folder, f"{name}.py", spec, body=f"print({json.dumps(printed)!r})\n")


def test_tools_list_carries_title_annotations_icon_and_output_schema(user_tools, errlog):
    write_tool(user_tools, "weather.py", WEATHER, deps="")
    counting_tool(user_tools, "count", {"count": 1})

    async def act():
        async with connected(errlog) as session:
            return await session.list_tools()

    tools = {t.name: t for t in bounded(act()).tools}
    weather = tools["weather"]
    assert weather.title == "Weather forecast"
    assert weather.annotations is not None
    assert (weather.annotations.read_only_hint, weather.annotations.destructive_hint,
            weather.annotations.idempotent_hint, weather.annotations.open_world_hint) == \
        (True, False, True, True)
    assert weather.icons is not None
    assert [(i.src, i.mime_type) for i in weather.icons] == \
        [("https://example.org/icons/weather.svg", "image/svg+xml")]
    assert weather.output_schema is None
    assert tools["count"].output_schema == COUNT_SCHEMA
    assert tools["count"].annotations is None  # nothing said, nothing claimed
    # a built-in says the same things: read_file only reads
    read_file = tools["read_file"]
    assert read_file.title == "Read a file"
    assert read_file.annotations is not None
    assert read_file.annotations.read_only_hint is True
    assert read_file.annotations.open_world_hint is False


def test_tools_are_listed_by_name(user_tools, errlog):
    for name in ("zeta", "alpha", "mid"):
        script_tool(user_tools, f"{name}.py", {"name": name, "description": name,
                                               "input_schema": {"type": "object"}})

    async def act():
        async with connected(errlog) as session:
            return [(await session.list_tools()).tools for _ in range(2)]

    first, again = bounded(act())
    names = [t.name for t in first]
    assert {"alpha", "mid", "zeta", "read_file"} <= set(names)
    assert names == sorted(names)
    assert [t.name for t in again] == names


def test_structured_content_keeps_the_image_beside_it(user_tools, errlog):
    image = base64.b64encode(png()).decode()
    counting_tool(user_tools, "count", {"count": 3, "label": "bars",
                                        "image": {"base64": image, "media_type": "image/png"}})

    async def act():
        async with connected(errlog) as session:
            await session.list_tools()  # the client checks results against outputSchema
            return await session.call_tool("count", {})

    result = bounded(act())
    assert result.is_error is False
    assert result.structured_content is not None
    assert result.structured_content["count"] == 3
    assert result.structured_content["label"] == "bars"
    [picture] = [c for c in result.content if isinstance(c, types.ImageContent)]
    with Image.open(io.BytesIO(base64.b64decode(picture.data))) as img:
        assert img.size == (4, 3)
    assert '"count": 3' in text_of(result) or '"count":3' in text_of(result)


def test_a_result_not_matching_its_output_schema_is_an_error_saying_so(user_tools, errlog):
    counting_tool(user_tools, "miscount", {"count": "many"})
    script_tool(user_tools, "silent.py", {
        "name": "silent", "description": "prints no JSON",
        "input_schema": {"type": "object"}, "output_schema": COUNT_SCHEMA},
        body="print('just words')\n")

    async def act():
        async with connected(errlog) as session:
            return (await session.call_tool("miscount", {}),
                    await session.call_tool("silent", {}))

    miscount, silent = bounded(act())
    assert miscount.is_error is True and miscount.structured_content is None
    assert "does not match its output schema" in text_of(miscount)
    assert "count" in text_of(miscount) and "integer" in text_of(miscount)
    assert silent.is_error is True
    assert "holds no JSON object" in text_of(silent)


# -- built-ins that talk back (the conformance fixtures' built-ins) ------------------------

def fixtures_stdio(errlog):
    params = StdioServerParameters(command=sys.executable, args=[str(SERVE_FIXTURES)],
                                   env=os.environ.copy(), cwd=os.getcwd())
    return stdio_client(params, errlog=errlog)


@contextlib.contextmanager
def fixtures_http(tmp_path: Path):
    """``serve_fixtures.py --http --port 0 --no-token``: the URL it serves at."""
    argv = [sys.executable, str(SERVE_FIXTURES), "--http", "--port", "0", "--no-token"]
    with mcp_http_process(argv, tmp_path / "fixtures.err") as (url, _):
        yield url


@asynccontextmanager
async def http_session(url: str, **callbacks):
    client = create_mcp_http_client()
    async with client, streamable_http_client(url, http_client=client) as (read, write), \
            ClientSession(read, write, **callbacks) as session:
        await session.initialize()
        yield session


def test_a_builtin_elicits_through_the_host_over_http(tmp_path):
    asked: list[types.ElicitRequestParams] = []

    async def answer(context, params):
        asked.append(params)
        return types.ElicitResult(action="accept",
                                  content={"username": "ada", "email": "ada@example.org"})

    async def act(url):
        async with http_session(url, elicitation_callback=answer) as session:
            return await session.call_tool("test_elicitation", {"message": "Who are you?"})

    with fixtures_http(tmp_path) as url:
        result = bounded(act(url))
    assert [p.message for p in asked] == ["Who are you?"]
    assert isinstance(asked[0], types.ElicitRequestFormParams)
    assert asked[0].requested_schema["required"] == ["username", "email"]
    assert result.is_error is False
    assert text_of(result) == \
        'User response: action=accept, content={"username": "ada", "email": "ada@example.org"}'


def test_an_answer_not_matching_the_form_is_declined(tmp_path):
    async def answer(context, params):
        return types.ElicitResult(action="accept", content={"username": "ada"})  # no email

    async def act(url):
        async with http_session(url, elicitation_callback=answer) as session:
            return await session.call_tool("test_elicitation", {"message": "Who?"})

    with fixtures_http(tmp_path) as url:
        result = bounded(act(url))
    assert result.is_error is True
    assert "action=decline" in text_of(result) and "email" in text_of(result)


def test_a_builtin_logs_to_the_host_and_a_client_without_elicitation_is_not_asked(errlog):
    logged: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params):
        logged.append(params)

    async def act():
        async with fixtures_stdio(errlog) as (read, write), \
                ClientSession(read, write, logging_callback=on_log) as session:
            await session.initialize()
            return (await session.call_tool("test_tool_with_logging", {}),
                    await session.call_tool("test_elicitation", {"message": "Who?"}))

    logs, elicit = bounded(act())
    assert logs.is_error is False
    assert [(p.level, p.data) for p in logged] == [
        ("info", "Tool execution started"), ("info", "Tool processing data"),
        ("info", "Tool execution completed")]
    assert elicit.is_error is True
    assert "does not declare elicitation" in text_of(elicit)


# -- the parsers behind them ---------------------------------------------------------------

HINTS = ("read_only", "destructive", "idempotent", "open_world")
YES_NO = st.sampled_from(["true", "false", "yes", "no", "on", "off", "1", "0", "True", "NO"])


@given(said=st.dictionaries(st.sampled_from(HINTS), YES_NO),
       noise=st.dictionaries(st.sampled_from(HINTS), st.text(
           alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=8)),
       title=st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")),
                     max_size=40))
def test_metadata_hints_are_said_only_as_yes_or_no(said, noise, title):
    lines = {**noise, **said}  # a hint is a yes/no word, or not said at all
    block = "".join(f"    {k}: {v}\n" for k, v in lines.items())
    source = repr(f"Tool.\n\nMetadata:\n    title: {title}\n{block}") + "\n"
    meta = parse_metadata(source)
    for hint in HINTS:
        value = lines.get(hint, "").strip().lower()
        expected = True if value in {"true", "yes", "1", "on"} else \
            False if value in {"false", "no", "0", "off"} else None
        assert getattr(meta, hint) is expected
    shown = title.strip()
    assert meta.title == (shown[:200] if shown.isprintable() else "")  # else not a title


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=3), max_leaves=10)


@given(obj=st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=5),
       before=st.text(max_size=20))
def test_the_structured_object_is_the_first_text_that_is_a_json_object(obj, before):
    blocks = [TextBlock(text=before), TextBlock(text=json.dumps(obj, indent=1))]
    found = structured_object(ToolResult(blocks=blocks))
    try:
        first = json.loads(before)
    except ValueError:
        first = None
    assert found == (first if isinstance(first, dict) else obj)
    assert structured_object(ToolResult(blocks=[TextBlock(text=json.dumps([obj]))])) is None


def test_a_2026_client_answers_a_builtin_over_rounds(tmp_path):
    """No channel back on a 2026-07-28 connection: each question is an input_required
    round, and the tool finishes with every answer."""
    asked: list[str] = []

    async def answer(context, params):
        asked.append(params.message)
        content = {"name": "Alice"} if "name" in params.message else {"color": "blue"}
        return types.ElicitResult(action="accept", content=content)

    async def act(url):
        async with Client(url, mode="2026-07-28", elicitation_callback=answer) as client:
            return (client.session.protocol_version,
                    await client.call_tool("test_input_required_result_multi_round", {}))

    with fixtures_http(tmp_path) as url:
        version, result = bounded(act(url))
    assert version in MODERN_PROTOCOL_VERSIONS
    assert asked == ["Step 1: What is your name?", "Step 2: What is your favorite color?"]
    assert result.is_error is False
    assert text_of(result) == "Alice likes blue"


def test_a_2026_request_lacking_a_capability_a_builtin_needs_fails_whole(tmp_path, errlog):
    """A built-in that needs the client's model, called on a 2026-07-28 request that does not
    declare sampling: the request fails with -32021 naming the capability (the protocol's
    MissingRequiredClientCapabilityError); a handshake-era client hears why in the result."""
    from mcp.shared.exceptions import MCPError

    async def act(url):
        async with Client(url, mode="2026-07-28") as client:
            try:
                await client.call_tool("test_missing_capability", {})
            except MCPError as exc:
                return exc.error
            return None

    async def legacy():
        async with fixtures_stdio(errlog) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            return await session.call_tool("test_missing_capability", {})

    with fixtures_http(tmp_path) as url:
        error = bounded(act(url))
    assert error is not None and error.code == -32021
    assert "sampling" in error.message
    assert error.data == {"requiredCapabilities": {"sampling": {}}}
    result = bounded(legacy())
    assert result.is_error and "does not declare sampling" in text_of(result)


def test_a_builtin_attaches_audio_and_a_resource_beside_its_blocks(errlog):
    async def act():
        async with fixtures_stdio(errlog) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            return (await session.call_tool("test_audio_content", {}),
                    await session.call_tool("test_multiple_content_types", {}))

    audio, mixed = bounded(act())
    [sound] = audio.content  # the audio alone: no "(the tool returned nothing)" beside it
    assert isinstance(sound, types.AudioContent) and sound.mime_type == "audio/wav"
    assert base64.b64decode(sound.data).startswith(b"RIFF")
    kinds = [type(c) for c in mixed.content]
    assert kinds == [types.TextContent, types.ImageContent, types.EmbeddedResource]
    resource = mixed.content[2]
    assert isinstance(resource, types.EmbeddedResource)
    assert json.loads(resource.resource.text) == {"test": "data", "value": 123}


def test_a_builtin_lists_the_clients_roots_over_a_2026_round(tmp_path):
    async def roots(context):
        return types.ListRootsResult(roots=[types.Root(uri="file:///work/project")])

    async def act(url):
        async with Client(url, mode="2026-07-28", list_roots_callback=roots) as client:
            return await client.call_tool("test_input_required_result_list_roots", {})

    with fixtures_http(tmp_path) as url:
        result = bounded(act(url))
    assert result.is_error is False
    assert text_of(result) == "Roots: file:///work/project"


def test_a_builtins_progress_reaches_the_host(errlog):
    heard: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress, total, message):
        heard.append((progress, total, message))

    async def act():
        async with fixtures_stdio(errlog) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            return await session.call_tool("test_tool_with_progress", {},
                                           progress_callback=on_progress)

    result = bounded(act())
    assert result.is_error is False
    assert heard == [(0, 100, "0% done"), (50, 100, "50% done"), (100, 100, "100% done")]


@given(state=st.one_of(st.none(), st.text(max_size=30), JSON_VALUES.map(json.dumps)),
       responses=JSON_VALUES)
def test_rounds_take_answers_only_from_objects(state, responses):
    rounds = Rounds(state, responses)
    try:
        kept = json.loads(state) if state else {}
    except ValueError:
        kept = {}
    expected = dict(kept) if isinstance(kept, dict) else {}
    if isinstance(responses, dict):
        expected.update(responses)
    assert rounds.answers == expected
    assert json.loads(json.dumps(rounds.answers)) == rounds.answers  # state it can carry
