"""``silica mcp serve --http`` at the protocol level, and the conformance runner around it.

The server is the real daemon with the conformance fixtures (``tests/conformance/
serve_fixtures.py``), driven by raw HTTP; the runner is ``tests/conformance/run.sh`` with a
stand-in harness (the real one runs in CI, not here).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from mcp.server.streamable_http import EventMessage
from mcp.types import JSONRPCNotification
from mcp_http import mcp_http_process

from silica.mcp.transport import MemoryEventStore

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "tests" / "conformance" / "run.sh"
SERVE = ROOT / "tests" / "conformance" / "serve_fixtures.py"
TIMEOUT = 60


@contextlib.contextmanager
def fixture_server(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """The fixture daemon on a free port, without a token: its URL and pid."""
    argv = [sys.executable, str(SERVE), "--http", "--no-token", "--port", "0"]
    with mcp_http_process(argv, tmp_path / "serve.err", timeout=TIMEOUT) as (url, proc):
        yield url, proc.pid


def sse_events(response: httpx.Response) -> Iterator[dict]:
    """The events of an SSE response as dicts of their fields (``data`` joined)."""
    event: dict = {}
    for line in response.iter_lines():
        if not line:
            if event:
                yield event
            event = {}
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        event[name] = event[name] + "\n" + value if name == "data" and name in event else value
    if event:
        yield event


def answer_in(events: list[dict], request_id: int) -> dict | None:
    for event in events:
        if event.get("data"):
            message = json.loads(event["data"])
            if message.get("id") == request_id and "result" in message:
                return message["result"]
    return None


VERSION = "2025-11-25"
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def initialized(client: httpx.Client, url: str) -> dict[str, str]:
    """An initialized session at ``VERSION``: the headers every later request carries."""
    reply = client.post(url, headers=ACCEPT, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": VERSION, "capabilities": {},
                   "clientInfo": {"name": "resuming-host", "version": "1"}}})
    assert reply.status_code == 200, reply.text
    headers = {"mcp-session-id": reply.headers["mcp-session-id"],
               "mcp-protocol-version": VERSION}
    done = client.post(url, headers={**ACCEPT, **headers},
                       json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert done.status_code == 202, done.text
    return headers


def test_a_call_whose_stream_closes_mid_call_is_answered_when_the_client_resumes(tmp_path):
    with fixture_server(tmp_path) as (url, _), httpx.Client(timeout=TIMEOUT) as client:
        session = initialized(client, url)
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "test_reconnection", "arguments": {}}}
        with client.stream("POST", url, headers={**ACCEPT, **session}, json=call) as reply:
            assert reply.headers["content-type"].startswith("text/event-stream")
            first = list(sse_events(reply))
        # The stream opens with a priming event (an id to resume from, no data, a retry) and
        # closes before the answer.
        assert first and first[0].get("id") and first[0].get("data", "") == ""
        assert int(first[0]["retry"]) > 0
        assert answer_in(first, 2) is None
        resume = {**session, "Accept": "text/event-stream", "Last-Event-ID": first[-1]["id"]}
        with client.stream("GET", url, headers=resume) as reply:
            assert reply.status_code == 200
            later: list[dict] = []
            for event in sse_events(reply):
                later.append(event)
                if answer_in(later, 2) is not None:
                    break
        result = answer_in(later, 2)
        assert result is not None and not result.get("isError")
        assert result["content"][0]["text"] == "Reconnection test completed"


def test_a_session_cannot_resume_another_sessions_stream(tmp_path):
    """The SDK names a stream by its request id, which two clients share."""
    with fixture_server(tmp_path) as (url, _), httpx.Client(timeout=TIMEOUT) as client:
        first, second = initialized(client, url), initialized(client, url)
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "test_header_param", "arguments": {"region": "first's"}}}
        with client.stream("POST", url, json=call, headers={
                **ACCEPT, **first, "Mcp-Method": "tools/call", "Mcp-Name": "test_header_param",
                "Mcp-Param-Region": "first's"}) as reply:
            events = list(sse_events(reply))
        answer = answer_in(events, 2)
        assert answer is not None and "first's" in answer["content"][0]["text"]
        replayed: list[dict] = []
        resume = {**second, "Accept": "text/event-stream", "Last-Event-ID": events[0]["id"]}
        with contextlib.suppress(httpx.ReadTimeout), client.stream(
                "GET", url, headers=resume, timeout=httpx.Timeout(TIMEOUT, read=3)) as reply:
            for event in sse_events(reply):
                replayed.append(event)
        assert "first's" not in json.dumps(replayed)


def peak_mb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"VmHWM:\s+(\d+) kB", status)
    assert found, status
    return int(found.group(1)) // 1024


def test_big_answers_do_not_pile_up_in_a_session(tmp_path):
    """80 answers of 1 MB each on one session: the server keeps at most its budget of them
    for resuming (it kept every one, 84 MB more, before the budget). One call's own work
    on 1 MB raises the peak by tens of MB once; what is kept is what grows after that."""
    with fixture_server(tmp_path) as (url, pid), httpx.Client(timeout=TIMEOUT) as client:
        session = initialized(client, url)
        region = "x" * 1_000_000

        def answers(first: int, count: int) -> None:
            for n in range(first, first + count):
                reply = client.post(url, headers={**ACCEPT, **session}, json={
                    "jsonrpc": "2.0", "id": 10 + n, "method": "tools/call",
                    "params": {"name": "test_header_param", "arguments": {"region": region}}})
                assert "region: x" in reply.text

        answers(0, 20)  # past the 16 MiB budget already
        settled = peak_mb(pid)
        answers(20, 60)  # 60 MB more, were they all kept
        assert peak_mb(pid) - settled < 30


# -- the runner ------------------------------------------------------------------------------


def run_sh(*args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(["bash", str(RUN), *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHON": sys.executable, **(env or {})},
                            **kwargs)


@pytest.mark.parametrize("args", [("bogus", "2025-11-25"), ("server", "2024-01-01"),
                                  ("server",), ("client", "2026-07-28", "extra")])
def test_the_runner_with_a_wrong_side_or_revision_prints_its_usage(args):
    proc = run_sh(*args)
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 2
    assert err.strip() == ("usage: tests/conformance/run.sh {server|client} "
                           "{2025-11-25|2026-07-28}")
    assert out == ""


# A stand-in for the harness: checks the server answers, says so, then fails or hangs.
HARNESS = '''
import sys, time, httpx2 as httpx
url = sys.argv[sys.argv.index("--url") + 1]
reply = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                   headers={"Accept": "application/json, text/event-stream"})
print("the server answered HTTP", flush=True)
if sys.argv[1] == "hang":
    print("hanging", flush=True)
    time.sleep(600)
print("Total: 3 passed, 1 failed")
print("Unexpected failures detected")
sys.exit(1)
'''


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def process_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def started(out: str) -> tuple[int, int]:
    """The port and pid of the server the runner said it started."""
    found = re.search(r"at http://127\.0\.0\.1:(\d+)/mcp \(pid (\d+)\)", out)
    assert found, out
    return int(found.group(1)), int(found.group(2))


def test_the_server_is_gone_after_a_run_the_harness_fails(tmp_path):
    harness = tmp_path / "harness.py"
    harness.write_text(HARNESS)
    proc = run_sh("server", "2025-11-25",
                  env={"CONFORMANCE_HARNESS": f"{sys.executable} {harness} fail"})
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    assert "the server answered HTTP" in out
    assert out.rstrip().splitlines()[-1] == "Total: 3 passed, 1 failed"
    port, pid = started(out)
    assert process_gone(pid) and not port_open(port)


def test_the_server_is_gone_when_the_run_is_stopped(tmp_path):
    harness = tmp_path / "harness.py"
    harness.write_text(HARNESS)
    proc = run_sh("server", "2026-07-28",
                  env={"CONFORMANCE_HARNESS": f"{sys.executable} {harness} hang"})
    assert proc.stdout is not None
    seen = ""
    deadline = time.monotonic() + 120
    while "hanging" not in seen:
        assert time.monotonic() < deadline and proc.poll() is None, seen
        seen += proc.stdout.readline()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    seen += out
    assert proc.returncode != 0
    port, pid = started(seen)
    assert process_gone(pid) and not port_open(port)
    assert not re.search(rf"\b{re.escape(str(tmp_path / 'harness.py'))}\b",
                         subprocess.run(["ps", "-eo", "args"], capture_output=True,
                                        text=True).stdout)  # the harness is gone too


# -- the event store -------------------------------------------------------------------------

streams = st.sampled_from(["1", "2", "_GET_stream", "a/b"])


@settings(max_examples=200, deadline=None)
@given(stored=st.lists(st.tuples(streams, st.booleans()), max_size=40),
       pick=st.integers(min_value=0, max_value=60), per_stream=st.integers(1, 8))
def test_a_replay_gives_exactly_the_events_of_its_stream_after_the_id(stored, pick,
                                                                       per_stream):
    store = MemoryEventStore(per_stream=per_stream)
    sent: list[EventMessage] = []

    async def send(event: EventMessage) -> None:
        sent.append(event)

    async def act():
        ids = []
        for n, (stream, priming) in enumerate(stored):
            message = None if priming else JSONRPCNotification(
                jsonrpc="2.0", method="n", params={"n": n})
            ids.append((stream, await store.store_event(stream, message), message))
        stream, last, _ = ids[pick % len(ids)]
        return stream, last, await store.replay_events_after(last, send), ids

    assume(stored)
    stream, last, replayed, ids = asyncio.run(act())
    mine = [(eid, m) for s, eid, m in ids if s == stream]
    after = mine[[eid for eid, _ in mine].index(last) + 1:]
    if len(after) > per_stream:  # some of what followed was dropped: no replay with a hole
        assert replayed is None and sent == []
    else:
        assert replayed == stream
        assert [(e.event_id, e.message) for e in sent] == \
            [(eid, m) for eid, m in after if m is not None]


@given(st.text(max_size=30))
def test_an_event_id_it_did_not_make_replays_nothing(last):
    store = MemoryEventStore()
    sent: list[EventMessage] = []

    async def send(event: EventMessage) -> None:
        sent.append(event)

    async def act():
        await store.store_event("1", None)
        return await store.replay_events_after(last, send)

    replayed = asyncio.run(act())
    if last not in ("1/0", "1/1") and not re.fullmatch(r"1/0*[01]", last):
        assert replayed is None
    assert sent == []


def test_the_store_keeps_its_bounds():
    store = MemoryEventStore(per_stream=3, streams=2)

    async def act():
        for stream in ("a", "b", "c"):
            for _ in range(5):
                await store.store_event(stream, None)

    asyncio.run(act())
    kept = store._kept()
    assert set(kept.streams) == {"b", "c"}
    assert all(len(stream.events) == 3 for stream in kept.streams.values())


def test_the_store_keeps_to_its_byte_budget():
    """Big answers (a tool's images) push the oldest streams out, never past the budget."""
    store = MemoryEventStore(budget=100_000)
    big = JSONRPCNotification(jsonrpc="2.0", method="n", params={"data": "x" * 30_000})

    async def act():
        ids = [await store.store_event(str(n), big) for n in range(10)]
        return ids, await store.replay_events_after(ids[0].replace("/1", "/0"), send)

    async def send(event: EventMessage) -> None:
        raise AssertionError("a forgotten stream was replayed")

    ids, replayed = asyncio.run(act())
    kept = store._kept()
    assert kept.size <= 100_000 and set(kept.streams) == {"7", "8", "9"}
    assert replayed is None
