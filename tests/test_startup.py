"""Start-up: what ``silica --version`` and ``silica ask`` import, one SDK client per provider
per process, and an end that neither waits on stray threads nor leaves servers behind.

Imports are read from ``python -X importtime`` (every module a process imports is listed
once); nothing here asserts a time.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from wire import anthropic_server, ollama_server, openai_server, text, tool_call, trickle
from wire.gemini_wire import gemini_server

from silica.agent.loop import Agent
from silica.config import Settings
from silica.providers.anthropic import AnthropicProvider
from silica.providers.base import Request, RequestMessage

SDKS = ("anthropic", "openai", "google.genai")
SERVERS = {"anthropic": anthropic_server, "openai": openai_server, "gemini": gemini_server,
           "ollama": ollama_server}
OWN_SDK = {"anthropic": "anthropic", "openai": "openai", "gemini": "google.genai",
           "ollama": None}
STATE_SERVER = Path(__file__).parent / "mcp_fixtures" / "state_server.py"
WAIT = 120  # seconds a command may take before the test fails (a loaded machine is slow)


def imported(stderr: str) -> set[str]:
    """The modules ``python -X importtime`` says were imported."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
            if line.startswith("import time:") and line.count("|") == 2}


def sdks(modules: set[str]) -> set[str]:
    return {sdk for sdk in SDKS if sdk in modules}


def silica(*args: str, env: dict | None = None, importtime: bool = False,
           cwd: Path | None = None) -> subprocess.CompletedProcess:
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run([sys.executable, *flags, "-m", "silica", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=WAIT)


@pytest.fixture
def clean_env(monkeypatch):
    """No provider key, address or choice from the machine."""
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL",
                "OPENAI_API_KEY", "OPENAI_BASE_URL", "GEMINI_API_KEY", "GOOGLE_API_KEY",
                "GEMINI_BASE_URL", "OLLAMA_HOST", "SILICA_PROVIDER", "SILICA_MODEL"):
        monkeypatch.delenv(var, raising=False)


# -- what is imported ---------------------------------------------------------------------


def test_version_imports_no_sdk():
    done = silica("--version", importtime=True)
    assert done.returncode == 0 and done.stdout.strip()
    assert not sdks(imported(done.stderr)), sdks(imported(done.stderr))
    assert "silica.cli.agent" not in imported(done.stderr)


@pytest.mark.parametrize("provider", ["anthropic", "openai", "gemini", "ollama"])
def test_ask_imports_the_sdk_of_its_provider_and_no_other(provider, clean_env, user_tools):
    with SERVERS[provider]([text("Hello.")]) as srv:
        env = {**os.environ, **srv.env}
        done = silica("ask", "--provider", provider, "hi", env=env, importtime=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "Hello."
    own = OWN_SDK[provider]
    assert sdks(imported(done.stderr)) == ({own} if own else set())
    assert len(srv.requests) == 1


def test_the_library_imports_the_sdk_for_the_first_request_only(clean_env, project):
    code = textwrap.dedent("""\
        import asyncio, sys
        from silica.agent.loop import Agent
        from silica.config import Settings
        agent = Agent.start(Settings(provider="anthropic"))
        before = sorted(m for m in sys.modules if m.split(".")[0] in ("anthropic", "openai"))
        answer = asyncio.run(agent.send("hi"))
        after = sorted({m.split(".")[0] for m in sys.modules} & {"anthropic", "openai"})
        print(repr((before, answer, after)))
        """)
    with anthropic_server([text("Hello.")]) as srv:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**os.environ, **srv.env}, cwd=project, timeout=WAIT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == repr(([], "Hello.", ["anthropic"]))


# -- one client per provider --------------------------------------------------------------


def request(words: str) -> Request:
    return Request(model="claude-sonnet-5-5", max_tokens=64,
                   messages=[RequestMessage(role="user", content=[{"type": "text",
                                                                   "text": words}])])


def test_one_sdk_client_per_provider_serves_every_turn_and_loop(clean_env, monkeypatch,
                                                                 user_tools):
    with anthropic_server([text("One."), text("Two.")]) as srv:
        srv.use(monkeypatch)
        agent = Agent.start(Settings(provider="anthropic"))
        client = agent.provider.client()
        assert AnthropicProvider(Settings()).client() is client  # another provider object
        for words in ("first", "second"):  # each turn in an event loop of its own
            asyncio.run(agent.send(words))
        assert agent.provider.client() is client
    assert [m["content"][-1]["text"] for m in (r["messages"][-1] for r in srv.requests)] == \
        ["first", "second"]
    with anthropic_server([]) as elsewhere:  # another address: another client
        elsewhere.use(monkeypatch)
        assert AnthropicProvider(Settings()).client() is not client


def test_a_request_that_ends_does_not_close_another_of_the_same_loop(clean_env, monkeypatch):
    provider = AnthropicProvider(Settings())
    with anthropic_server([trickle(text("slow one two three four five"), 0.1),
                           text("fast")]) as srv:
        srv.use(monkeypatch)

        async def both():
            return await asyncio.gather(provider.complete(request("a")),
                                        provider.complete(request("b")))

        replies = asyncio.run(both())
    assert sorted(r.text for r in replies) == ["fast", "slow one two three four five"]


# -- the end ------------------------------------------------------------------------------


def test_ask_ends_without_waiting_for_a_stray_thread(clean_env, user_tools, project):
    code = textwrap.dedent("""\
        import sys, threading, time
        threading.Thread(target=time.sleep, args=(3600,), name="stray").start()
        sys.argv = ["silica", "ask", "hi"]
        from silica.cli import main
        main()
        """)
    with anthropic_server([text("Hello.")]) as srv:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**os.environ, **srv.env}, cwd=project, timeout=WAIT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "Hello."
    assert "continue: silica chat --resume" in done.stderr  # the session was saved


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("stray", [False, True], ids=["alone", "beside-a-stray-thread"])
def test_ask_stops_the_mcp_servers_it_started(clean_env, home, project, tmp_path, stray):
    """Whether silica ends normally or, beside someone else's thread that would hold the
    interpreter's exit, at once: its MCP servers are stopped."""
    pidfile = tmp_path / "pids"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(textwrap.dedent(f"""\
        [sandbox]
        mode = "off"  # its pid is watched from outside
        [mcp.servers.st]
        command = {json.dumps(sys.executable)}
        args = [{json.dumps(str(STATE_SERVER))}, "--pidfile", {json.dumps(str(pidfile))}]
        """))
    code = textwrap.dedent(f"""\
        import sys, threading, time
        if {stray}:
            threading.Thread(target=time.sleep, args=(3600,), name="stray").start()
        sys.argv = ["silica", "ask", "count"]
        from silica.cli import main
        main()
        """)
    with anthropic_server([tool_call("st__count"), text("Counted.")]) as srv:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**os.environ, **srv.env}, cwd=project, timeout=WAIT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("Counted.")
    [result] = [b for b in srv.requests[1]["messages"][-1]["content"]
                if b["type"] == "tool_result"]
    assert result["is_error"] is False
    [pid] = [int(p) for p in pidfile.read_text().split()]
    deadline = time.monotonic() + WAIT
    while alive(pid):
        assert time.monotonic() < deadline, "the MCP server outlived silica ask"
        time.sleep(0.05)
