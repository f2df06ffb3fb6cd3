"""Resources, prompts, completion and logging of ``silica mcp serve``, as an MCP host sees
them: a real server process with a test plugin registered, the official MCP client over
stdio and over HTTP. Every await is bounded."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import sys
import textwrap
from contextlib import asynccontextmanager
from pathlib import Path

import mcp.types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourceUpdated
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_http import mcp_http_process

from silica.mcp.catalog import MAX_CONTENT_BYTES, PAGE_SIZE, _page, expand, match

TIMEOUT = 60.0
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred"

PLUGIN = '''
import time
from silica.hookspecs import hookimpl
from silica.mcp.catalog import (Embedded, Image, Message, Prompt, PromptArgument, Resource,
                                ResourceTemplate, resource_changed)

def boom():
    raise RuntimeError("disk on fire HOSTILE")

@hookimpl
def silica_mcp_resources(register):
    register(Resource("test://hello", "hello", read=lambda: "hello there",
                      mime_type="text/plain", description="a greeting"))
    register(Resource("test://bin", "bin", read=lambda: bytes(range(256)), size=256))
    register(Resource("test://huge", "huge", read=lambda: "x" * (MAX + 1)))
    register(Resource("test://boom", "boom", read=boom))
    register(Resource("test://watched", "watched", read=lambda: str(time.time())))
    register(Resource("not a uri", "bad", read=lambda: "never"))
    for n in range(150):
        register(Resource(f"test://many/{n:03d}", f"many-{n}", read=lambda: "one of many"))
    register(ResourceTemplate("files://{folder}/{name}", "files",
                              read=lambda v: f"file {v['name']} in {v['folder']}",
                              complete=lambda var, partial: [w for w in ("alpha", "beta", "alps")
                                                             if w.startswith(partial)]))

@hookimpl
def silica_mcp_prompts(register):
    register(Prompt("greet", description="greets someone",
                    arguments=(PromptArgument("who", required=True), PromptArgument("mood")),
                    render=lambda a: [Message(f"Say hello to {a['who']}"),
                                      Message(Image(b"\\x89PNG fake", "image/png")),
                                      Message(Embedded("test://hello", "hello there"))],
                    complete=lambda arg, partial: [f"{partial}{i}" for i in range(300)]))
    register(Prompt("hostile", render=lambda a: [Message("HOSTILE")]))
    register(Prompt("breaks", render=lambda a: boom()))
    register(Prompt("bump", render=lambda a: resource_changed("test://watched") or
                                             [Message("bumped")]))
'''.replace("HOSTILE", HOSTILE.encode("unicode_escape").decode()).replace(
    "MAX", str(MAX_CONTENT_BYTES))

# a plugin whose hooks raise: its entries are lost, the other plugin's are served
BROKEN = '''
from silica.hookspecs import hookimpl

@hookimpl
def silica_mcp_resources(register):
    raise ValueError("no resources today")

@hookimpl
def silica_mcp_prompts(register):
    raise ValueError("no prompts today")
'''

LAUNCH = textwrap.dedent('''
    import importlib.util, sys
    from silica.plugins import get_plugin_manager
    for n, path in enumerate(sys.argv[1].split(",")):
        spec = importlib.util.spec_from_file_location(f"catalog_test_plugin{n}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        get_plugin_manager().register(module, name=f"catalog_test_plugin{n}")
    sys.argv = ["silica", "mcp", "serve", *sys.argv[2:]]
    from silica.cli import main
    main()
''')


def bounded(coro, timeout: float = TIMEOUT):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture
def launch(tmp_path, monkeypatch):
    """The command that starts ``silica mcp serve ARGS`` with the test plugin registered."""
    plugin, broken = tmp_path / "catalog_plugin.py", tmp_path / "broken_plugin.py"
    plugin.write_text(PLUGIN)
    broken.write_text(BROKEN)
    monkeypatch.setenv("SILICA_RESIDENT", "0")  # the serving process holds the plugins
    return [sys.executable, "-c", LAUNCH, f"{plugin},{broken}"]


@asynccontextmanager
async def stdio_session(launch, errlog, logging_callback=None, on_message=None):
    params = StdioServerParameters(command=launch[0], args=launch[1:], env=os.environ.copy(),
                                   cwd=os.getcwd())

    async def handle(message):
        if on_message and not isinstance(message, Exception):
            await on_message(message)

    async with stdio_client(params, errlog=errlog) as (read, write), \
            ClientSession(read, write, logging_callback=logging_callback,
                          message_handler=handle) as session:
        await session.initialize()
        yield session


@contextlib.contextmanager
def http_server(launch, tmp_path):
    err = tmp_path / "http.err"
    argv = [*launch, "--http", "--no-token", "--port", "0"]
    with mcp_http_process(argv, err, timeout=TIMEOUT) as (url, _):
        yield url, err


def test_resources_are_listed_in_pages_in_uri_order_and_read(launch, errlog):
    async def act():
        async with stdio_session(launch, errlog) as session:
            first = await session.list_resources()
            second = await session.list_resources(
                params=types.PaginatedRequestParams(cursor=first.next_cursor))
            templates = await session.list_resource_templates()
            return (first, second, templates, await session.read_resource("test://hello"),
                    await session.read_resource("test://bin"),
                    await session.read_resource("files://docs/a%20b.txt"))

    first, second, templates, text, blob, templated = bounded(act())
    uris = [r.uri for r in first.resources + second.resources]
    assert uris == sorted(uris) and len(uris) == 155  # the invalid uri was skipped
    assert first.next_cursor and second.next_cursor is None and len(first.resources) == 100
    assert "not a uri" not in uris
    hello = next(r for r in first.resources + second.resources if r.uri == "test://hello")
    assert hello.description == "a greeting" and hello.mime_type == "text/plain"
    assert [t.uri_template for t in templates.resource_templates] == ["files://{folder}/{name}"]
    [content] = text.contents
    assert isinstance(content, types.TextResourceContents) and content.text == "hello there"
    [raw] = blob.contents
    assert isinstance(raw, types.BlobResourceContents)
    assert base64.b64decode(raw.blob) == bytes(range(256))
    assert templated.contents[0].text == "file a b.txt in docs"


def test_a_bad_read_is_that_requests_error_and_the_server_keeps_serving(launch, errlog,
                                                                       tmp_path):
    async def act():
        errors = {}
        async with stdio_session(launch, errlog) as session:
            for uri in ("test://huge", "test://boom", "test://nowhere"):
                with pytest.raises(MCPError) as caught:
                    await session.read_resource(uri)
                errors[uri] = caught.value
            return errors, await session.read_resource("test://hello")

    errors, after = bounded(act())
    assert "more than the 8 MiB" in errors["test://huge"].message
    assert len(errors["test://huge"].message) < 1000
    assert "RuntimeError: disk on fire" in errors["test://boom"].message
    assert errors["test://nowhere"].code == -32002  # the handshake era's resource not found
    assert errors["test://nowhere"].data == {"uri": "test://nowhere"}
    assert after.contents[0].text == "hello there"
    logged = Path(errlog.name).read_text(encoding="utf-8", errors="replace")
    assert "catalog_test_plugin1 failed to register" in logged
    assert "ValueError: no resources today" in logged
    assert "disk on fire" in logged and "\x1b" not in logged  # terminal output made safe


def test_prompts_render_with_their_arguments_and_hostile_text_is_data(launch, errlog):
    async def act():
        async with stdio_session(launch, errlog) as session:
            listed = await session.list_prompts()
            greet = await session.get_prompt("greet", {"who": "Ada"})
            hostile = await session.get_prompt("hostile")
            with pytest.raises(MCPError) as missing:
                await session.get_prompt("greet", {})
            with pytest.raises(MCPError) as broken:
                await session.get_prompt("breaks")
            return listed, greet, hostile, missing.value, broken.value

    listed, greet, hostile, missing, broken = bounded(act())
    assert [p.name for p in listed.prompts] == ["breaks", "bump", "greet", "hostile"]
    args = next(p for p in listed.prompts if p.name == "greet").arguments
    assert [(a.name, a.required) for a in args] == [("who", True), ("mood", False)]
    text, image, embedded = (m.content for m in greet.messages)
    assert text.text == "Say hello to Ada"
    assert isinstance(image, types.ImageContent) and base64.b64decode(image.data) == b"\x89PNG fake"
    assert isinstance(embedded, types.EmbeddedResource)
    assert embedded.resource.uri == "test://hello"
    assert hostile.messages[0].content.text == HOSTILE  # passed on as data, unchanged
    assert missing.code == -32602 and "who" in missing.message
    assert broken.code == -32603 and "RuntimeError" in broken.message
    logged = Path(errlog.name).read_text(encoding="utf-8", errors="replace")
    assert "\x1b" not in logged and "\x07" not in logged


def test_completion_of_prompt_arguments_and_template_variables(launch, errlog):
    async def act():
        async with stdio_session(launch, errlog) as session:
            return (await session.complete(types.PromptReference(type="ref/prompt", name="greet"),
                                           {"name": "who", "value": "x"}),
                    await session.complete(
                        types.ResourceTemplateReference(type="ref/resource",
                                                        uri="files://{folder}/{name}"),
                        {"name": "name", "value": "al"}),
                    await session.complete(types.PromptReference(type="ref/prompt",
                                                                 name="hostile"),
                                           {"name": "any", "value": ""}))

    many, template, none = bounded(act())
    assert len(many.completion.values) == 100 and many.completion.has_more
    assert many.completion.total == 300 and many.completion.values[0] == "x0"
    assert template.completion.values == ["alpha", "alps"]
    assert none.completion.values == []


def test_a_subscribed_client_hears_its_resource_changed(launch, errlog):
    async def act():
        updated: asyncio.Queue = asyncio.Queue()

        async def on_message(message):
            if isinstance(message, types.ResourceUpdatedNotification):
                await updated.put(message.params.uri)

        async with stdio_session(launch, errlog, on_message=on_message) as session:
            await session.subscribe_resource("test://watched")
            await session.get_prompt("bump")
            heard = await asyncio.wait_for(updated.get(), 20)
            await session.unsubscribe_resource("test://watched")
            await session.get_prompt("bump")
            await session.send_ping()
            await asyncio.sleep(1)
            return heard, updated.qsize()

    heard, later = bounded(act())
    assert heard == "test://watched" and later == 0


def test_set_level_sends_silica_log_records_at_or_above_it(launch, errlog):
    async def act():
        messages: list[types.LoggingMessageNotificationParams] = []

        async def on_log(params):
            messages.append(params)

        async with stdio_session(launch, errlog, logging_callback=on_log) as session:
            with pytest.raises(MCPError):
                await session.read_resource("test://boom")  # a warning, before any level
            await session.set_logging_level("error")
            with pytest.raises(MCPError):
                await session.read_resource("test://boom")  # a warning, below error
            await session.set_logging_level("warning")
            with pytest.raises(MCPError):
                await session.read_resource("test://boom")
            for _ in range(100):
                if messages:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.5)
            return messages

    messages = bounded(act())
    assert len(messages) == 1
    assert messages[0].level == "warning" and "test://boom failed" in messages[0].data
    assert "RuntimeError: disk on fire" in messages[0].data


def test_http_2026_client_reads_lists_and_hears_updates_on_listen(launch, tmp_path):
    with http_server(launch, tmp_path) as (url, err):
        async def act():
            http = create_mcp_http_client()
            async with http, Client(streamable_http_client(url, http_client=http)) as client:
                with pytest.raises(MCPError) as missing:
                    await client.read_resource("test://nowhere")
                async with client.listen(resource_subscriptions=["test://watched"]) as sub:
                    await client.get_prompt("bump")
                    event = await asyncio.wait_for(anext(aiter(sub)), 20)
                return (client.session.protocol_version, missing.value, event,
                        await client.list_prompts(), await client.read_resource("test://hello"))

        version, missing, event, prompts, hello = bounded(act())
    assert version == "2026-07-28"
    assert missing.code == -32602 and missing.data == {"uri": "test://nowhere"}
    assert isinstance(event, ResourceUpdated) and event.uri == "test://watched"
    assert {p.name for p in prompts.prompts} == {"breaks", "bump", "greet", "hostile"}
    assert hello.contents[0].text == "hello there"


def test_a_handshake_era_http_client_hears_its_subscribed_resource_changed(launch, tmp_path):
    with http_server(launch, tmp_path) as (url, err):
        async def act():
            updated: asyncio.Queue = asyncio.Queue()

            async def on_message(message):
                if isinstance(message, types.ResourceUpdatedNotification):
                    await updated.put(message.params.uri)

            http = create_mcp_http_client()
            async with http, streamable_http_client(url, http_client=http) as (read, write), \
                    ClientSession(read, write, message_handler=on_message) as session:
                await session.initialize()
                await session.subscribe_resource("test://watched")
                await session.get_prompt("bump")
                return session.protocol_version, await asyncio.wait_for(updated.get(), 20)

        version, heard = bounded(act())
    assert version not in ("2026-07-28",) and heard == "test://watched"


def test_a_2026_request_gets_the_log_messages_its_meta_asks_for(launch, tmp_path):
    with http_server(launch, tmp_path) as (url, err):
        async def read_boom(level):
            messages = []

            async def on_log(params):
                messages.append(params)

            http = create_mcp_http_client()
            async with http, Client(streamable_http_client(url, http_client=http),
                                    log_level=level, logging_callback=on_log) as client:
                with pytest.raises(MCPError):
                    await client.read_resource("test://boom")
                await client.read_resource("test://hello")
            return messages

        async def act():
            return await read_boom("warning"), await read_boom("error")

        warned, quiet = bounded(act())
    assert [m.level for m in warned] == ["warning"]
    assert "test://boom failed" in warned[0].data
    assert quiet == []


# -- URI templates -----------------------------------------------------------------------

_values = st.text(min_size=0, max_size=20)


@given(folder=_values, name=_values)
def test_a_template_matches_what_it_expands_to(folder, name):
    template = "files://{folder}/x/{name}.txt"
    uri = expand(template, {"folder": folder, "name": name})
    assert match(template, uri) == {"folder": folder, "name": name}


@given(uri=st.text(max_size=60))
def test_matching_any_text_never_raises_and_fits_back(uri):
    found = match("a://{x}/{y}", uri)
    if found is not None:
        assert set(found) == {"x", "y"}
        assert match("a://{x}/{y}", expand("a://{x}/{y}", found)) == found


# -- cursors -----------------------------------------------------------------------------


ODD_CURSORS = ["²", "٣", "-1", "1e2", "100", " 1"]


@given(cursor=st.one_of(st.none(), st.text(max_size=12), st.sampled_from(ODD_CURSORS)),
       count=st.integers(0, 350))
def test_a_cursor_gives_its_page_or_a_clear_invalid_params_error(cursor, count):
    entries = list(range(count))
    params = types.PaginatedRequestParams(cursor=cursor)
    try:
        page, following = _page(entries, params)
    except MCPError as exc:
        assert exc.code == -32602 and "invalid cursor" in exc.message
        return
    start = int(cursor) if cursor else 0
    assert page == entries[start:start + PAGE_SIZE]
    assert following is None or int(following) == start + PAGE_SIZE < count
