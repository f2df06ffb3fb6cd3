"""One bad input is one error: never a crash, a traceback, or memory without bound.

- Providers, through the real SDKs (httpx2 for Ollama) against local wire servers: a line
  that never ends, a body without end, JSON nested 100,000 deep (in the stream and in a tool
  call's arguments), and a server that trickles past the deadline.
- ``silica tools list`` with MCP servers that flood their stderr: bounded peak memory, and
  the end of stderr in the error row.
- Ctrl-C during a cold ``silica tools list``: one line, exit 130, no process left behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from conftest import write_tool
from wire import anthropic_server, ollama_server, openai_server, raw, text, tool_call, trickle
from wire.samples import text_request

from silica.config import Settings
from silica.providers.base import ProviderError
from silica.providers.errors import MIB
from silica.providers.registry import get_provider

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

SERVERS = {"anthropic": anthropic_server, "openai": openai_server, "ollama": ollama_server}
MODELS = {"anthropic": "claude-sonnet-5-5", "openai": "gpt-4.1", "ollama": "llava"}
FIXTURES = Path(__file__).parent / "mcp_fixtures"
DEEP = b"[" * 100_000 + b"]" * 100_000  # past Python's recursion limit for json.loads
FILLER = b"x" * (64 * 1024)

# The start of one streamed line or event in each protocol, left open.
OPENING = {
    "ollama": b'{"message": {"role": "assistant", "content": "',
    "openai": b'data: {"choices": [{"index": 0, "delta": {"content": "',
    "anthropic": b'event: content_block_delta\ndata: {"type": "content_block_delta", "delta": "',
}
# One harmless, complete line or event of each protocol.
HARMLESS = {
    "ollama": b'{"message": {"role": "assistant", "content": "x"}, "done": false}\n',
    "openai": b'data: {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", '
              b'"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": null}]}\n\n',
    "anthropic": b'event: ping\ndata: {"type": "ping"}\n\n',
}
# An event (or line) holding JSON nested 100,000 deep.
DEEP_EVENT = {
    "ollama": b'{"message": {"role": "assistant", "content": "x"}, "extra": ' + DEEP + b"}\n",
    "openai": b"data: " + DEEP + b"\n\n",
    "anthropic": b"event: message_start\ndata: " + DEEP + b"\n\n",
}


def complete(kind: str, script, monkeypatch, **attributes):
    """The reply of ``kind``'s provider to one request, against a server replaying
    ``script``; the provider's attributes set first (``max_line=...``)."""
    with SERVERS[kind](script) as srv:
        srv.use(monkeypatch)
        provider = get_provider(kind, Settings(provider=kind))
        provider.max_retries = 0
        for name, value in attributes.items():
            setattr(provider, name, value)
        return asyncio.run(provider.complete(text_request(MODELS[kind])))


def failure(kind: str, script, monkeypatch, **attributes) -> str:
    with pytest.raises(ProviderError) as info:
        complete(kind, script, monkeypatch, **attributes)
    return str(info.value)


# -- providers ---------------------------------------------------------------------------


def test_a_line_that_never_ends_is_cut_off_at_max_line(kind, monkeypatch):
    endless = raw(OPENING[kind], *[FILLER] * 1024)  # 64 MiB, and no end of line
    with SERVERS[kind]([text("warm"), endless]) as srv:
        srv.use(monkeypatch)
        provider = get_provider(kind, Settings(provider=kind))
        provider.max_retries, provider.max_line = 0, 1 * MIB
        assert asyncio.run(provider.complete(text_request(MODELS[kind]))).text == "warm"
        tracemalloc.start()  # after a first reply: the SDK's lazy imports are not counted
        try:
            with pytest.raises(ProviderError) as info:
                asyncio.run(provider.complete(text_request(MODELS[kind])))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert "longer than 1 MiB" in str(info.value) and "max_line" in str(info.value)
    assert peak < 16 * MIB  # of the 64 MiB sent, no more than a few MiB were ever held


def test_a_reply_without_end_is_cut_off_at_max_reply(kind, monkeypatch):
    lines = HARMLESS[kind] * 1000
    message = failure(kind, [raw(*[lines] * 200)], monkeypatch, max_reply=1 * MIB)
    assert "a body longer than 1 MiB" in message and "max_reply" in message


@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
def test_an_event_of_endless_short_lines_is_cut_off(protocol, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    # the SDKs join an event's lines one by one: a million short lines would take hours
    message = failure(protocol, [raw(b"data: x\n" * 100_000)], monkeypatch)
    assert "more than 1000 lines" in message


def test_json_nested_too_deeply_is_an_error_not_a_crash(kind, monkeypatch):
    message = failure(kind, [raw(DEEP_EVENT[kind])], monkeypatch)
    assert "cannot read" in message and "nested too deeply" in message


def test_tool_arguments_nested_too_deeply_become_empty_arguments(kind, monkeypatch):
    arguments = '{"url": ' + DEEP.decode() + "}"
    script = [text("Looking.") + tool_call("screenshot", raw_arguments=arguments)]
    if kind == "anthropic":  # the SDK parses tool input itself, and refuses it: one error
        message = failure(kind, script, monkeypatch)
        assert "cannot read" in message and len(message) < 1000
        return
    [call] = complete(kind, script, monkeypatch).tool_calls
    assert call.name == "screenshot" and call.arguments == {}


def test_tool_arguments_nested_past_the_depth_limit_become_empty_arguments(kind, monkeypatch):
    nested: dict = {}
    inner = nested
    for _ in range(150):  # parses, but later code (saving a session) would recurse too deep
        inner["k"] = {}
        inner = inner["k"]
    script = [tool_call("screenshot", {"url": "u"}) + tool_call("screenshot", nested)]
    fine, deep = complete(kind, script, monkeypatch).tool_calls
    assert fine.arguments == {"url": "u"} and deep.arguments == {}


def test_a_trickling_server_is_cut_off_at_the_deadline(kind, monkeypatch):
    slow = trickle(text("", chunks=["tick "] * 2000), 0.05)  # 100 s, a piece at a time
    message = failure(kind, [slow], monkeypatch, deadline=0.5)
    assert "did not finish its reply" in message and "within 0.5 s" in message
    assert "deadline" in message


# -- MCP servers that flood stderr -------------------------------------------------------

MEASURE = """\
import json, resource, subprocess, sys
code = subprocess.run(sys.argv[2:], timeout=600).returncode
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB, the largest process
with open(sys.argv[1], "w") as f:
    json.dump({"code": code, "peak_kib": peak}, f)
"""


def test_a_server_flooding_stderr_costs_bounded_memory(home, tmp_path):
    home.mkdir(parents=True, exist_ok=True)
    noisy = FIXTURES / "noisy_server.py"
    (home / "config.toml").write_text(
        f"[mcp.servers.dies]\ncommand = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(noisy))}, \"300\", \"die\"]\n"
        f"[mcp.servers.lives]\ncommand = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(noisy))}, \"300\", \"serve\"]\n")
    report = tmp_path / "rusage.json"
    done = subprocess.run([sys.executable, "-c", MEASURE, str(report), sys.executable,
                           "-m", "silica", "tools", "list", "--json"],
                          capture_output=True, text=True, timeout=900)
    measured = json.loads(report.read_text())
    assert measured["code"] == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert rows["lives__echo"]["status"] == "ok"
    assert rows["dies__*"]["status"] == "error"
    assert rows["dies__*"]["reason"].endswith("noisy server: last words")
    # 600 MB of stderr went by; silica (and every process it ran) stayed small
    assert measured["peak_kib"] < 200 * 1024, measured


# -- Ctrl-C ------------------------------------------------------------------------------


def test_ctrl_c_while_specs_are_fetched_is_one_line_and_leaves_nothing_running(
        user_tools, tmp_path, sandbox_off):  # its --toolspec's pid is watched from outside
    marker = tmp_path / "toolspec.pid"
    write_tool(user_tools, "slow.py", f"""\
        import os, sys, time
        if "--toolspec" in sys.argv:  # says it started, then never gives its spec
            with open({str(marker)!r}, "w") as f:
                f.write(str(os.getpid()))
            time.sleep(300)
        """, deps="")
    proc = subprocess.Popen([sys.executable, "-m", "silica", "tools", "list"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() or not marker.read_text():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the tool's --toolspec never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    assert "Traceback" not in err and err.strip() == "interrupted", err
    assert not _alive(int(marker.read_text())), "the --toolspec process outlived silica"


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        return os.path.exists(f"/proc/{pid}")
