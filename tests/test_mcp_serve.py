"""``silica mcp serve`` as an MCP host sees it: a real server process, the official MCP client.

Every await is bounded (``bounded``), and every server process is stopped when its test ends.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

import mcp.types as types
import pytest
from conftest import script_tool, simple_spec, write_tool
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from mcp_http import mcp_http_process
from PIL import Image

from silica.tools.toolbox import Toolbox

REPO = Path(__file__).resolve().parent.parent
CALL_TIMEOUT = 120.0  # a tool's first run may install its dependencies
CHANGE_TIMEOUT = 20.0  # the watcher looks every second; discovering one new tool is quick


@pytest.fixture
def examples(user_tools):
    for name in ("hello.py", "chart.py"):
        shutil.copy(REPO / "user_tools" / name, user_tools / name)
    return user_tools


def bounded(coro, timeout: float = CALL_TIMEOUT):
    """Run ``coro`` to the end, failing the test after ``timeout`` seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def serve_stdio(errlog):
    """``silica mcp serve`` as a host starts it; the process is stopped when the client exits."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "silica", "mcp", "serve"],
                                   env=os.environ.copy(), cwd=os.getcwd())
    return stdio_client(params, errlog=errlog)


@asynccontextmanager
async def connected(errlog, on_message=None):
    """A handshake-era session with a fresh server; fails if stdout carried anything but
    the protocol (the client reports unreadable lines as exceptions)."""
    faults = []

    async def handle(message):
        if isinstance(message, Exception):
            faults.append(message)
        elif on_message:
            await on_message(message)

    async with serve_stdio(errlog) as (read, write), \
            ClientSession(read, write, message_handler=handle) as session:
        await session.initialize()
        yield session
    assert not faults, faults


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def test_lists_every_runnable_tool_with_its_spec(examples, errlog):
    script_tool(examples, "broken.py", "not json")

    async def act():
        async with connected(errlog) as session:
            return await session.list_tools()

    listed = bounded(act())
    served = {t.name: {"name": t.name, "description": t.description,
                       "input_schema": t.input_schema} for t in listed.tools}
    assert {"chart", "hello", "read_file"} <= set(served)
    assert "broken" not in served  # only tools that can run are offered
    assert served == {s["name"]: s for s in Toolbox().specs()}  # what `tools spec` prints
    assert served["chart"]["input_schema"]["required"] == ["values"]


def test_chart_gives_a_real_png_and_its_summary(examples, errlog):
    async def act():
        async with connected(errlog) as session:
            return await session.call_tool("chart", {"values": [3, 1, 4, 1, 5]})

    result = bounded(act())
    assert result.is_error is False
    [image] = [c for c in result.content if isinstance(c, types.ImageContent)]
    assert image.mime_type == "image/png"
    with Image.open(io.BytesIO(base64.b64decode(image.data))) as img:
        img.verify()
        assert img.format == "PNG" and img.size == (640, 400)
    assert "bar chart of 5 values" in text_of(result)


def test_errors_are_results_and_the_server_keeps_serving(examples, errlog):
    script_tool(examples, "fail.py", simple_spec("fail"),
                body="import sys\nprint('disk full', file=sys.stderr)\nsys.exit(3)\n")

    async def act():
        async with connected(errlog) as session:
            return (await session.call_tool("fail", {}),
                    await session.call_tool("no_such_tool", {}),
                    await session.call_tool("hello", {"shout": True}),
                    await session.call_tool("hello", {"name": "MCP"}))

    failed, unknown, bad_input, fine = bounded(act())
    assert failed.is_error and "exited with code 3" in text_of(failed)
    assert "disk full" in text_of(failed)
    assert unknown.is_error and "no tool named 'no_such_tool'" in text_of(unknown)
    assert bad_input.is_error and "shout" in text_of(bad_input)
    assert not fine.is_error and text_of(fine).strip() == "Hello, MCP."


def test_a_new_tool_file_is_announced_while_connected(examples, errlog):
    async def act():
        changed = asyncio.Event()

        async def on_message(message):
            if isinstance(message, types.ToolListChangedNotification):
                changed.set()

        async with connected(errlog, on_message) as session:
            before = {t.name for t in (await session.list_tools()).tools}
            script_tool(examples, "added.py", simple_spec("added", text="string"),
                        body="print('added ran')")
            await asyncio.wait_for(changed.wait(), CHANGE_TIMEOUT)
            after = {t.name for t in (await session.list_tools()).tools}
            return before, after, await session.call_tool("added", {"text": "x"})

    before, after, result = bounded(act())
    assert "added" not in before
    assert after == before | {"added"}
    assert text_of(result).strip() == "added ran"


def test_a_2026_client_hears_of_changes_on_its_listen_stream(examples, errlog):
    async def act():
        async with Client(serve_stdio(errlog)) as client, \
                client.listen(tools_list_changed=True) as subscription:
            script_tool(examples, "added.py", simple_spec("added"), body="print('hi')")
            event = await asyncio.wait_for(anext(aiter(subscription)), CHANGE_TIMEOUT)
            tools = await client.list_tools(cache_mode="refresh")
            return client.session.protocol_version, event, {t.name for t in tools.tools}

    version, event, names = bounded(act())
    assert version in MODERN_PROTOCOL_VERSIONS
    assert isinstance(event, ToolsListChanged)
    assert {"added", "hello", "chart"} <= names


def test_a_cancelled_call_stops_its_tool_and_the_server_keeps_serving(examples, tmp_path,
                                                                     errlog, sandbox_off):
    marker = tmp_path / "pids"
    script_tool(examples, "slow.py", simple_spec("slow"), body=f"""\
        import os, subprocess, time
        child = subprocess.Popen(["sleep", "300"])
        with open({str(marker) + ".tmp"!r}, "w") as f:
            f.write(f"{{os.getpid()}} {{child.pid}}")
        os.replace({str(marker) + ".tmp"!r}, {str(marker)!r})
        time.sleep(300)
        """)

    async def act():
        async with connected(errlog) as session:
            call = asyncio.create_task(session.call_tool("slow", {}))
            while not marker.exists():
                assert not call.done(), call.result()
                await asyncio.sleep(0.05)
            pids = [int(p) for p in marker.read_text().split()]
            # The client's way to cancel: abandoning the request sends notifications/cancelled.
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call
            while not all(gone(pid) for pid in pids):  # bounded by ``bounded``
                await asyncio.sleep(0.05)
            return (pids, await session.list_tools(),
                    await session.call_tool("hello", {"name": "again"}))

    pids, listed, again = bounded(act())
    assert len(pids) == 2 and all(gone(pid) for pid in pids)
    assert "slow" in {t.name for t in listed.tools}
    assert not again.is_error and text_of(again).strip() == "Hello, again."


@contextlib.contextmanager
def mcp_http(*args: str, tmp_path: Path):
    """``silica mcp serve --http --port 0 ARGS``: the URL it reports on stderr, and stderr."""
    err = tmp_path / "http.err"
    env = {k: v for k, v in os.environ.items() if k != "SILICA_MCP_TOKEN"}
    argv = [sys.executable, "-m", "silica", "mcp", "serve", "--http", "--port", "0", *args]
    with mcp_http_process(argv, err, env=env, stdout=subprocess.PIPE) as (url, proc):
        yield url, err.read_text()
        stdout = proc.stdout
    assert stdout is not None
    with stdout:
        assert stdout.read() == b""  # over HTTP too, logs go to stderr


@pytest.fixture
def http_server(examples, tmp_path):
    """``silica mcp serve --http``: its URL, and the token it printed for hosts."""
    with mcp_http(tmp_path=tmp_path) as (url, said):
        token = re.search(r'Authorization: Bearer ([^"\s]+)', said)
        assert token, said
        yield url, token.group(1)


def test_http_serves_on_loopback(http_server):
    url, token = http_server

    async def act():
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with client, streamable_http_client(url, http_client=client) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            return (await session.list_tools(),
                    await session.call_tool("hello", {"name": "HTTP", "excited": True}))

    assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
    listed, result = bounded(act())
    assert {"hello", "chart", "read_file"} <= {t.name for t in listed.tools}
    assert not result.is_error and text_of(result).strip() == "Hello, HTTP!"


# -- a client that goes away ---------------------------------------------------------------

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "leaving-host", "version": "1"}}}


def start_raw_server(tmp_path):
    """``silica mcp serve`` on pipes this test drives by hand, its stderr in a file."""
    errfile = open(tmp_path / "serve.err", "w+", encoding="utf-8")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "silica", "mcp", "serve"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errfile,
                            env=os.environ.copy())
    proc.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
    proc.stdin.flush()
    return proc, errfile


def ended_quietly(proc, errfile) -> str:
    """Wait for the server to end; its stderr (it must not be a traceback)."""
    try:
        code = proc.wait(timeout=CALL_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    errfile.seek(0)
    said = errfile.read()
    errfile.close()
    assert "Traceback" not in said and "Exception ignored" not in said, said
    assert code == 0, said
    return said


def wait_for_file(path: Path, proc) -> int:
    deadline = time.monotonic() + CALL_TIMEOUT
    while not (path.exists() and path.read_text()):
        assert proc.poll() is None, "the server ended before the tool started"
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)
    return int(path.read_text())


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # dead, not yet reaped
    except FileNotFoundError:
        return True


def test_a_client_that_closes_stdin_after_initialize_ends_the_server_quietly(examples,
                                                                            tmp_path):
    proc, errfile = start_raw_server(tmp_path)
    proc.stdin.close()
    ended_quietly(proc, errfile)
    with proc.stdout:
        lines = proc.stdout.read().splitlines()
    assert all(json.loads(line)["jsonrpc"] == "2.0" for line in lines)  # only the protocol


def test_a_client_killed_mid_call_ends_the_server_quietly_and_the_call(user_tools, tmp_path,
                                                                      sandbox_off):
    marker = tmp_path / "call.pid"
    script_tool(user_tools, "slow.py", simple_spec("slow"),
                body=f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\n"
                     "time.sleep(300)\n")
    proc, errfile = start_raw_server(tmp_path)
    assert json.loads(proc.stdout.readline())["id"] == 1
    proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n'
                     b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", '
                     b'"params": {"name": "slow", "arguments": {}}}\n')
    proc.stdin.flush()
    pid = wait_for_file(marker, proc)
    proc.stdin.close()  # the host dies: both of its pipe ends close at once
    proc.stdout.close()
    ended_quietly(proc, errfile)
    assert gone(pid), "the tool the call started outlived the server"


def test_a_client_leaving_while_tools_are_discovered_stops_the_discovery(user_tools,
                                                                         tmp_path, sandbox_off):
    marker = tmp_path / "toolspec.pid"
    write_tool(user_tools, "unhurried.py", f"""\
        import os, sys, time
        if "--toolspec" in sys.argv:  # says it started, then never gives its spec
            with open({str(marker)!r}, "w") as f:
                f.write(str(os.getpid()))
            time.sleep(300)
        """, deps="")
    proc, errfile = start_raw_server(tmp_path)
    pid = wait_for_file(marker, proc)
    proc.stdin.close()
    ended_quietly(proc, errfile)
    assert gone(pid), "the --toolspec process outlived the server"


def test_a_change_upstream_reaches_the_hosts_of_mcp_serve(examples, home, errlog):
    """An MCP server silica uses says its tools changed: silica mcp serve tells its host."""
    state_server = Path(__file__).parent / "mcp_fixtures" / "state_server.py"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f'[mcp.servers.st]\ncommand = "{sys.executable}"\n'
        f'args = ["{state_server}", "--tools", "1"]\n')

    async def act():
        async with Client(serve_stdio(errlog)) as client, \
                client.listen(tools_list_changed=True) as subscription:
            before = {t.name for t in (await client.list_tools()).tools}
            grew = await client.call_tool("st__grow", {})
            event = await asyncio.wait_for(anext(aiter(subscription)), CHANGE_TIMEOUT)
            after = {t.name for t in (await client.list_tools(cache_mode="refresh")).tools}
            return before, grew, event, after

    before, grew, event, after = bounded(act())
    assert "st__grow" in before and "st__grown" not in before
    assert text_of(grew) == "grew"
    assert isinstance(event, ToolsListChanged) and "st__grown" in after
