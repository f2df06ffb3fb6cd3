"""One live connection per MCP server: state kept, calls multiplexed, failures contained,
servers restarted and never left behind, lists cached on disk and refreshed on change.

Servers: ``mcp_fixtures/state_server.py`` (the SDK; a counter, a cancellable sleep, a crash,
HTTP headers, list changes) and ``mcp_fixtures/raw_server.py`` (hand-written misbehaviour).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import wait_for_port

from silica.config import (
    ConfigError,
    McpServerSettings,
    McpSettings,
    SandboxSettings,
    Settings,
    load_settings,
)
from silica.mcp.connections import MAX_TOOLS, connections
from silica.tools.model import ToolStatus
from silica.tools.toolbox import Toolbox

FIXTURES = Path(__file__).parent / "mcp_fixtures"
STATE = FIXTURES / "state_server.py"
RAW = FIXTURES / "raw_server.py"
WAIT = 60  # seconds any one wait may take before the test fails


def state(*args: str, **settings) -> McpServerSettings:
    return McpServerSettings(command=sys.executable, args=[str(STATE), *args], **settings)


def raw(*args: str, **settings) -> McpServerSettings:
    return McpServerSettings(command=sys.executable, args=[str(RAW), *args], **settings)


def box_of(timeout: float = 30, **servers: McpServerSettings) -> Toolbox:
    # MCP's own mechanics, watched from outside by pid: unconfined (tests/test_sandbox_escapes.py
    # runs a hostile server confined)
    return Toolbox(settings=Settings(mcp=McpSettings(servers=servers, timeout=timeout),
                                     sandbox=SandboxSettings(mode="off")))


def rows(box: Toolbox) -> dict:
    return {t.name: t for t in box.discover().builtins if t.folder.origin.startswith("mcp:")}


def wait_until(check, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def pids(pidfile: Path) -> list[int]:
    return [int(x) for x in pidfile.read_text().split()] if pidfile.exists() else []


# -- one connection ---------------------------------------------------------------------


def test_a_stateful_server_keeps_its_state_across_calls(tmp_path):
    pidfile = tmp_path / "pids"
    box = box_of(st=state("--pidfile", str(pidfile)))
    assert [box.call("st__count").text for _ in range(10)] == [str(i) for i in range(1, 11)]
    assert len(pids(pidfile)) == 1  # listed and called on one process


def test_twenty_concurrent_calls_share_one_connection(tmp_path):
    pidfile = tmp_path / "pids"
    box = box_of(st=state("--pidfile", str(pidfile)))

    async def go():
        await box.adiscover()
        calls = (box.acall("st__slow", {"seconds": 0.3}) for _ in range(20))
        return await asyncio.wait_for(asyncio.gather(*calls), WAIT)

    assert [r.text for r in asyncio.run(go())] == ["awake"] * 20
    assert len(pids(pidfile)) == 1


def test_concurrent_calls_pipeline_on_one_connection_and_answers_find_their_calls(tmp_path):
    """Twenty calls at once, answered in the reverse order they were made: each caller gets
    its own answer, from the one server process, and they overlap rather than queue."""
    pidfile = tmp_path / "pids"
    box = box_of(st=state("--pidfile", str(pidfile)))

    async def go():
        await box.adiscover()
        calls = (box.acall("st__later", {"text": f"call {i}", "seconds": (20 - i) * 0.05})
                 for i in range(20))
        return await asyncio.wait_for(asyncio.gather(*calls), WAIT)

    assert [r.text for r in asyncio.run(go())] == [f"call {i}" for i in range(20)]
    assert len(pids(pidfile)) == 1


def test_calls_from_several_loops_at_once_each_get_their_own_answers(tmp_path):
    """Callers on their own event loops (threads) share the one connection; every answer
    goes back to the loop that asked."""
    pidfile = tmp_path / "pids"
    box = box_of(st=state("--pidfile", str(pidfile)))
    box.discover()

    def caller(n: int) -> list[str]:
        async def go():
            calls = (box.acall("st__later", {"text": f"{n}.{i}", "seconds": (5 - i) * 0.02})
                     for i in range(5))
            return [r.text for r in await asyncio.wait_for(asyncio.gather(*calls), WAIT)]
        return asyncio.run(go())

    got: dict[int, list[str]] = {}
    threads = [threading.Thread(target=lambda n=n: got.__setitem__(n, caller(n)))
               for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert got == {n: [f"{n}.{i}" for i in range(5)] for n in range(4)}
    assert len(pids(pidfile)) == 1


def test_a_caller_that_gives_up_cancels_its_call_and_the_connection_stays(tmp_path):
    log, pidfile = tmp_path / "cancelled", tmp_path / "pids"
    box = box_of(st=state("--cancel-log", str(log), "--pidfile", str(pidfile)))
    assert box.call("st__count").text == "1"

    async def give_up():
        call = asyncio.ensure_future(box.acall("st__slow", {"seconds": 300}))
        done, _ = await asyncio.wait([call], timeout=1)
        assert not done
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(give_up())
    wait_until(lambda: log.exists() and "cancelled" in log.read_text(),
               "the server never heard that the caller gave up")
    assert box.call("st__count").text == "2"  # same process, state kept
    assert len(pids(pidfile)) == 1


def test_answers_left_for_a_closed_event_loop_are_let_go():
    """A caller's loop that closed before its answers were handed over (its hand-over was
    queued, never run) is not kept, with those answers, for the life of the process."""
    from silica.mcp.connections import McpConnections, _Hop

    manager = McpConnections()
    gone = asyncio.new_event_loop()
    stale = _Hop(asyncio.sleep(0), gone.create_future(), gone)
    stale.coro.close()
    gone.close()
    manager._outbox[gone] = [stale]  # the hand-over that the closed loop never ran

    async def one_call() -> str:
        return await manager._hop(asyncio.sleep(0, "answered"))

    assert asyncio.run(one_call()) == "answered"
    assert gone not in manager._outbox


def test_a_server_that_dies_mid_call_is_an_error_and_is_started_again(tmp_path):
    pidfile = tmp_path / "pids"
    box = box_of(st=state("--pidfile", str(pidfile)))
    assert box.call("st__count").text == "1"
    died = box.call("st__die")
    assert died.is_error
    assert "the MCP server 'st' stopped during the call of 'die'" in died.text
    assert died.text.endswith("state server: dying on purpose")
    assert box.call("st__count").text == "1"  # a new process: state starts over
    assert len(pids(pidfile)) == 2


def test_a_call_past_its_timeout_is_cancelled_and_the_connection_stays(tmp_path):
    log, pidfile = tmp_path / "cancelled", tmp_path / "pids"
    box = box_of(st=state("--cancel-log", str(log), "--pidfile", str(pidfile), timeout=1))
    assert box.call("st__count").text == "1"
    slow = box.call("st__slow", {"seconds": 300})
    assert slow.is_error and slow.text == ("the MCP server 'st' did not answer within 1 s "
                                           "(the call of 'slow'); the call was cancelled")
    wait_until(lambda: log.exists() and "cancelled" in log.read_text(),
               "the server never heard of the cancellation")
    assert box.call("st__count").text == "2"  # same process, state kept
    assert len(pids(pidfile)) == 1


def test_one_broken_server_leaves_the_others_alone(tmp_path):
    box = box_of(st=state(), broken=raw("crash-list"))
    found = rows(box)
    assert found["broken__*"].status is ToolStatus.ERROR
    assert found["broken__*"].reason.startswith("the MCP server 'broken' stopped")
    assert found["broken__*"].reason.endswith("raw server: crashing in tools/list")
    assert found["st__count"].status is ToolStatus.OK
    assert box.call("st__count").text == "1"
    assert box.call("broken__*").is_error


# -- settings ---------------------------------------------------------------------------


def test_a_disabled_server_is_neither_started_nor_listed(tmp_path):
    pidfile = tmp_path / "pids"
    box = box_of(off=state("--pidfile", str(pidfile), enabled=False), on=state())
    names = set(rows(box))
    assert "on__count" in names and not any(n.startswith("off__") for n in names)
    assert not pidfile.exists()


def test_cwd_is_where_a_stdio_server_runs(tmp_path):
    box = box_of(st=state(cwd=tmp_path))
    assert box.call("st__where").text == str(tmp_path)


def test_headers_take_variables_from_the_environment(monkeypatch, tmp_path, free_port):
    port = free_port
    server = subprocess.Popen([sys.executable, str(STATE), "--http", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        monkeypatch.setenv("SILICA_TEST_TOKEN", "s3cret")
        web = McpServerSettings(url=f"http://127.0.0.1:{port}/mcp",
                                headers={"Authorization": "Bearer ${SILICA_TEST_TOKEN}"})
        box = box_of(web=web)
        assert box.call("web__header", {"name": "authorization"}).text == "Bearer s3cret"
        missing = McpServerSettings(url=f"http://127.0.0.1:{port}/mcp",
                                    headers={"X-Key": "${SILICA_TEST_NOT_SET}"})
        monkeypatch.delenv("SILICA_TEST_NOT_SET", raising=False)
        row = rows(box_of(missing=missing))["missing__*"]
        assert row.reason == ("the MCP server 'missing' needs the environment variable "
                              "SILICA_TEST_NOT_SET (in its header 'X-Key'); set it, or "
                              "change headers in config.toml")
    finally:
        connections().close()  # a live connection would hold the server's shutdown
        server.terminate()
        server.wait(10)


def test_a_server_over_the_older_sse_transport(free_port):
    port = free_port
    server = subprocess.Popen([sys.executable, str(STATE), "--sse", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        box = box_of(old=McpServerSettings(url=f"http://127.0.0.1:{port}/sse"))
        assert [box.call("old__count").text for _ in range(3)] == ["1", "2", "3"]
    finally:
        connections().close()  # a live connection would hold the server's shutdown
        server.terminate()
        server.wait(10)


def test_config_takes_the_new_keys_and_explains_bad_ones(home):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        '[mcp.servers.a]\ncommand = "x"\ncwd = "/tmp"\ntimeout = 5\nstartup_timeout = 9\n'
        'enabled = false\n'
        '[mcp.servers.b]\nurl = "http://h/sse"\nheaders = { A = "${T}" }\n'
        '[mcp.servers.c]\nurl = "http://h/events"\ntransport = "sse"\n')
    servers = load_settings().mcp.servers
    assert servers["a"].timeout == 5 and servers["a"].startup_timeout == 9
    assert not servers["a"].enabled and servers["a"].kind == "stdio"
    assert servers["b"].kind == "sse" and servers["c"].kind == "sse"
    for body, problem in [
        ('[mcp.servers.s]\ncommand = "x"\nheaders = { A = "b" }', '"headers" go with "url"'),
        ('[mcp.servers.s]\nurl = "http://h/mcp"\ncwd = "/"', '"cwd" go with "command"'),
        ('[mcp.servers.s]\ncommand = "x"\ntransport = "sse"', 'transport "sse" needs a "url"'),
        ('[mcp.servers.s]\ncommand = "x"\ntimeout = 0', "mcp.servers.s.timeout"),
    ]:
        (home / "config.toml").write_text(body)
        with pytest.raises(ConfigError, match=problem):
            load_settings()


# -- servers that misbehave while listed ------------------------------------------------


def test_misbehaving_servers_give_bounded_listings_or_error_rows():
    box = box_of(timeout=60, many=state("--tools", "10000"),
                 mute=raw("hang-init", startup_timeout=1),
                 crash=raw("crash-list"), huge=raw("huge", "50"), fine=state())
    found = rows(box)
    many = [n for n in found if n.startswith("many__t")]
    assert len(many) <= MAX_TOOLS
    assert found["many__*"].reason.startswith("the MCP server 'many' offers")
    assert found["mute__*"].reason == ("the MCP server 'mute' did not answer within 1 s "
                                       "(starting up)")
    assert found["crash__*"].status is ToolStatus.ERROR
    huge = [t for n, t in found.items() if n.startswith("huge__")]
    assert huge and all(t.status in (ToolStatus.OK, ToolStatus.ERROR) for t in huge)
    assert found["fine__count"].status is ToolStatus.OK
    assert box.call("fine__count").text == "1"


# -- no server outlives silica ----------------------------------------------------------

HOLDER = """\
import sys, time
from silica.config import McpServerSettings, McpSettings, SandboxSettings, Settings
from silica.tools.toolbox import Toolbox
server = McpServerSettings(command=sys.executable, args=[sys.argv[1], "--pidfile", sys.argv[2]])
box = Toolbox(settings=Settings(mcp=McpSettings(servers={"st": server}),
                                sandbox=SandboxSettings(mode="off")))
print(box.call("st__count").text, flush=True)
if sys.argv[3] == "wait":
    time.sleep(300)
"""


@pytest.mark.parametrize("ending", ["exit", "SIGTERM", "SIGINT"])
def test_no_server_process_outlives_the_process_that_started_it(tmp_path, ending):
    pidfile = tmp_path / "pids"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(STATE), str(pidfile),
                             "exit" if ending == "exit" else "wait"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "1"
        if ending != "exit":
            proc.send_signal(getattr(signal, ending))
        proc.wait(WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    [pid] = pids(pidfile)
    wait_until(lambda: not alive(pid), f"the MCP server outlived silica ({ending})")


# -- lists: the disk cache and list changes ---------------------------------------------


def test_a_warm_tools_list_starts_no_server_and_refresh_does(home, tmp_path):
    pidfile = tmp_path / "pids"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(textwrap.dedent(f"""\
        [sandbox]
        mode = "off"
        [mcp.servers.st]
        command = {json.dumps(sys.executable)}
        args = [{json.dumps(str(STATE))}, "--pidfile", {json.dumps(str(pidfile))}]
        """))

    def tools_list(*flags: str) -> dict:
        done = subprocess.run([sys.executable, "-m", "silica", "tools", "list", "--json",
                               *flags], capture_output=True, text=True, timeout=WAIT)
        assert done.returncode == 0, done.stderr
        return {row["name"]: row for row in json.loads(done.stdout)}

    cold = tools_list()
    assert cold["st__count"]["origin"] == "mcp:st" and len(pids(pidfile)) == 1
    warm = tools_list()
    assert warm["st__count"]["origin"] == "mcp:st (cached)"
    assert warm["st__count"]["status"] == "ok" and len(pids(pidfile)) == 1
    fresh = tools_list("--refresh")
    assert fresh["st__count"]["origin"] == "mcp:st" and len(pids(pidfile)) == 2


def test_list_changed_refreshes_the_live_list_and_tells_listeners():
    server = state("--tools", "1")  # settings of their own: a connection of its own
    heard: list[tuple[str, list[str]]] = []
    changed = threading.Event()

    def listener(name: str, tools: list) -> None:
        heard.append((name, [t.name for t in tools]))
        changed.set()

    remove = connections().add_listener(listener)
    try:
        box = box_of(st=server)
        assert "st__grown" not in rows(box)
        assert box.call("st__grow").text == "grew"
        assert changed.wait(WAIT), "no listener heard of the change"
        assert heard[-1][0] == "st" and "grown" in heard[-1][1]
        box.refresh()
        assert "st__grown" in rows(box)  # the connection's list, without a new process
        assert box.call("st__grown").text == "grown"
    finally:
        remove()


def test_the_fixture_pid_helpers_see_this_process():
    assert alive(os.getpid())
