"""Turns on ``silica worker`` processes through Redis: two front daemons (``silica serve
--redis URL --no-worker``) and two workers on one ``SILICA_HOME`` and a real ``redis-server``.

The fronts only take messages and stream events; the workers run the turns (their tools
under the sandbox) and every client of either front sees each turn once. One turn at a time
per session holds across fronts; an approval answered at any front reaches the worker that
asked; a worker SIGKILLed mid-turn has its turn claimed by the other after ``[worker]
lease`` seconds, ended as interrupted, its tool call answered, and the session goes on.

The model is the suite's local Anthropic wire server, answering by what the last message
says (the turns of many sessions run at once, in any order): ``gate:PATH`` calls the gate
tool, ``shell:CMD`` the shell, ``peek:PATH`` a tool that tries to read a file; a tool's
result gets ``Done.``; anything else ``Hi: TEXT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import script_tool, simple_spec
from redis_server import RedisServer
from serve_daemon import (
    EVENT_TIMEOUT,
    SioListener,
    SseReader,
    daemon_env,
    free_port,
    gate_tool,
    names,
    new_session,
    post,
    start_daemon,
)
from wire import anthropic_server, text, tool_call
from wire.anthropic_wire import render

LEASE = 2  # seconds: [worker] lease in the test's config
CANARY = "worker-canary-7f3a"
START_TIMEOUT = 120.0


# -- the model ------------------------------------------------------------------------------

_count = itertools.count(1000)


def said(message: dict) -> tuple[str, bool]:
    """The text of a request message, and whether it carries a tool's result."""
    content = message.get("content")
    if isinstance(content, str):
        return content, False
    parts = [b for b in content or () if isinstance(b, dict)]
    words = " ".join(b.get("text", "") for b in parts if b.get("type") == "text")
    # a message after an interrupted turn follows its calls' (error) results: it is text
    return words, not words and any(b.get("type") == "tool_result" for b in parts)


def answer(received):
    body = received.body
    if not isinstance(body, dict) or not body.get("messages"):
        return None
    words, result = said(body["messages"][-1])
    if result:
        reply = text("Done.")
    elif words.startswith("gate:"):
        reply = tool_call("gate", {"path": words[5:]})
    elif words.startswith("shell:"):
        reply = tool_call("shell", {"command": words[6:]})
    elif words.startswith("peek:"):
        reply = tool_call("peek", {"path": words[5:]})
    else:
        reply = text(f"Hi: {words}")
    return render(reply, body, next(_count))


# -- the processes --------------------------------------------------------------------------


class Worker:
    """A ``silica worker`` process; ``stderr()`` is what it said."""

    def __init__(self, home: Path, url: str, env: dict, cwd: Path) -> None:
        self.log = Path(tempfile.mkdtemp(prefix="silica-worker-")) / "stderr"
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "silica", "worker", "--redis", url], cwd=cwd,
                env=daemon_env(home, env), stdout=subprocess.DEVNULL, stderr=err,
                stdin=subprocess.DEVNULL)

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def ready(self) -> Worker:
        deadline = time.monotonic() + START_TIMEOUT
        while "takes turns from" not in self.stderr():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"silica worker did not start:\n{self.stderr()}")
            time.sleep(0.05)
        return self

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def peek_tool(folder: Path) -> None:
    script_tool(folder, "peek.py", simple_spec("peek", path="string"), body="""
        import sys
        path = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--path="))
        try:
            with open(path) as f:
                print("READ " + f.read())
        except OSError as exc:
            print("DENIED " + type(exc).__name__)
        print("peek done")
    """)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-workers")
    home = root / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        f"# {CANARY}: a secret in silica's own settings\n"
        f"[worker]\nlease = {LEASE}\nconcurrency = 4\n"
        '[shell]\nenabled = true\nallow = ["echo *"]\n')
    gate_tool(home / "tools")
    peek_tool(home / "tools")
    server = RedisServer(root / "redis").start()
    workers: list[Worker] = []
    try:
        with anthropic_server() as srv:
            srv.routes.append(answer)
            env = {**srv.env, "SILICA_PROVIDER": "anthropic"}
            workers += [Worker(home, server.url, env, root) for _ in range(2)]
            args = ["--redis", server.url, "--no-worker"]
            with start_daemon(home, env=env, args=args, cwd=root) as a, \
                    start_daemon(home, env=env, args=args, cwd=root) as b:
                for worker in workers:
                    worker.ready()
                yield {"a": a, "b": b, "workers": workers, "root": root, "home": home,
                       "url": server.url, "env": env}
    finally:
        for worker in workers:
            worker.stop()
            if worker.stderr().strip():
                sys.stderr.write(f"--- silica worker ---\n{worker.stderr()}")
        for gate in root.glob("gate-*"):
            gate.unlink()
        server.stop()


def data_of(events, name: str) -> list:
    return [data for n, data in events if n == name]


def gate(root: Path, name: str) -> Path:
    return root / f"gate-{name}"


# -- turns on the workers ---------------------------------------------------------------------


def test_turns_sent_to_either_front_run_on_both_workers_and_each_client_sees_each_once(
        cluster):
    a, b, root = cluster["a"], cluster["b"], cluster["root"]
    fronts = [a, b]
    sessions = [new_session(fronts[i % 2]) for i in range(6)]
    opened = gate(root, "many")

    async def run():
        async with contextlib.AsyncExitStack() as stack:
            # each session watched at both fronts; its message sent to one of them
            readers = [(await stack.enter_async_context(SseReader(a, sid)),
                        await stack.enter_async_context(SseReader(b, sid)))
                       for sid in sessions]
            sio = await stack.enter_async_context(SioListener(b, sessions[0]))
            sent = await asyncio.gather(*(post(fronts[i % 2], sid, f"gate:{opened}")
                                          for i, sid in enumerate(sessions)))
            assert [s.status_code for s in sent] == [202] * 6, [s.text for s in sent]
            # six turns hold their tool call at once: more than one worker's concurrency
            await asyncio.gather(*(r.until("tool_call") for pair in readers for r in pair))
            opened.write_text("open")
            await asyncio.gather(*(r.until("turn_end") for pair in readers for r in pair))
            first = [list(r.events) for pair in readers for r in pair]
            await sio.until("turn_end")
            first.append([(n, d) for n, d in sio.events])
            # the next message of each, sent to the other front, waited for there
            waited = await asyncio.gather(*(post(fronts[(i + 1) % 2], sid, f"again {i}",
                                                 wait="true")
                                            for i, sid in enumerate(sessions)))
            await asyncio.gather(*(r.until("turn_end") for pair in readers for r in pair))
            second = [r.events[len(f):] for f, r in zip(
                first, (r for pair in readers for r in pair), strict=False)]
            return sent, first, waited, second

    sent, first, waited, second = asyncio.run(run())
    # the Socket.IO client of front B saw session 0's turn as its SSE clients did
    sio_events = first.pop()
    assert [(n, d["event_id"]) for n, d in sio_events] == [
        (n, d["event_id"]) for n, d in first[0]]
    for events, i in zip(first, (i for i in range(6) for _ in (0, 1)), strict=True):
        seen = names(events)
        # every event of the turn once, in order, at both fronts
        assert [n for n in seen if n != "text_delta"] == [
            "message", "tool_call", "tool_result", "turn_end"], seen
        assert data_of(events, "message")[0]["turn_id"] == sent[i].json()["turn_id"]
        assert data_of(events, "tool_result")[0]["text"].strip() == "opened"
        assert data_of(events, "turn_end")[0]["text"] == "Done."
    for at_a, at_b in zip(first[::2], first[1:][::2], strict=True):
        ids = [data["event_id"] for _, data in at_a]
        assert ids == [data["event_id"] for _, data in at_b]  # one order, one id each
        assert len(set(ids)) == len(ids)
    for i, reply in enumerate(waited):
        assert reply.status_code == 200, reply.text
        assert reply.json()["text"] == f"Hi: again {i}"
        assert reply.json()["stop_reason"] == "end_turn"
    for events in second:
        assert names(events)[0] == "message" and names(events).count("turn_end") == 1
    # both workers ran turns
    for worker in cluster["workers"][:2]:
        assert sum(sid in worker.stderr() for sid in sessions) >= 1, worker.stderr()
    # the sessions hold both turns, read through either front
    with b.client() as http:
        history = http.get(f"/sessions/{sessions[0]}/history").json()
    assert [m["role"] for m in history["messages"]][:1] == ["user"]
    assert history["running"] is False


def test_one_turn_at_a_time_per_session_across_fronts(cluster):
    a, b, root = cluster["a"], cluster["b"], cluster["root"]
    sid = new_session(a)
    opened = gate(root, "one")

    async def run():
        async with SseReader(b, sid) as sse:
            sent = await post(a, sid, f"gate:{opened}")
            assert sent.status_code == 202, sent.text
            await sse.until("tool_call")
            second = await post(b, sid, "me too")
            second_at_a = await post(a, sid, "me too")
            async with b.async_client() as client:
                deleted = await client.delete(f"/sessions/{sid}")
                listed = (await client.get("/sessions")).json()["sessions"]
            opened.write_text("open")
            await sse.until("turn_end")
            after = await post(b, sid, "now", wait="true")
            return second, second_at_a, deleted, listed, after

    second, second_at_a, deleted, listed, after = asyncio.run(run())
    for refused in (second, second_at_a):
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "turn_running"
    assert deleted.status_code == 409 and deleted.json()["error"]["code"] == "turn_running"
    assert [s["running"] for s in listed if s["id"] == sid] == [True]
    assert after.status_code == 200 and after.json()["text"] == "Hi: now"


def test_an_approval_answered_at_the_other_front_reaches_the_worker(cluster):
    a, b, root = cluster["a"], cluster["b"], cluster["root"]
    made = root / "made-by-shell"
    sid = new_session(a)

    async def run():
        async with SseReader(a, sid) as sse_a, SseReader(b, sid) as sse_b:
            sent = await post(a, sid, f"shell:touch {made}")
            assert sent.status_code == 202, sent.text
            [*_, (_, asked)] = await sse_b.until("approval")
            async with b.async_client() as client:
                url = f"/sessions/{sid}/approvals/{asked['id']}"
                first = await client.post(url, json={"decision": "once"})
                ended = await sse_a.until("turn_end")
                again = await client.post(url, json={"decision": "once"})
                unknown = await client.post(f"/sessions/{sid}/approvals/{'0' * 16}",
                                            json={"decision": "once"})
            return first, ended, again, unknown

    first, ended, again, unknown = asyncio.run(run())
    assert first.status_code == 200, first.text
    assert first.json() == {"id": first.json()["id"], "decision": "once"}
    assert made.exists()  # the worker ran the command the person allowed at front B
    [done] = data_of(ended, "approval_done")
    assert (done["decision"], done["reason"]) == ("once", "answered")
    assert data_of(ended, "tool_result")[0]["is_error"] is False
    assert again.status_code == 409 and again.json()["error"]["code"] == "approval_answered"
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "no_approval"


def test_a_tool_on_a_worker_runs_in_the_sandbox(cluster):
    a, home = cluster["a"], cluster["home"]
    sid = new_session(a)
    with a.client() as http:
        reply = http.post(f"/sessions/{sid}/messages", params={"wait": "true"},
                          json={"message": f"peek:{home / 'config.toml'}"})
        history = http.get(f"/sessions/{sid}/history").json()
    assert reply.status_code == 200, reply.text
    shown = str(history["messages"])
    assert "peek done" in shown  # the tool ran, on a worker
    assert CANARY not in shown and "READ" not in shown


def test_a_worker_killed_mid_turn_has_its_turn_ended_as_interrupted_by_the_other(cluster):
    a, b, root = cluster["a"], cluster["b"], cluster["root"]
    sid = new_session(a)
    held = gate(root, "killed")  # never opened while its worker lives

    async def run():
        async with SseReader(a, sid) as sse_a, SseReader(b, sid) as sse_b:
            sent = await post(a, sid, f"gate:{held}")
            assert sent.status_code == 202, sent.text
            await sse_a.until("tool_call")
            [running] = [w for w in cluster["workers"] if sid in w.stderr()]
            running.proc.kill()
            running.proc.wait()
            for reader in (sse_a, sse_b):
                await reader.until("turn_end", timeout=EVENT_TIMEOUT)
            ended = [list(sse_a.events), list(sse_b.events)]
            after = await post(b, sid, "still there?", wait="true")
            return running, ended, after

    killed, ended, after = asyncio.run(run())
    cluster["workers"].remove(killed)
    cluster["workers"].append(Worker(cluster["home"], cluster["url"], cluster["env"],
                                     root).ready())
    held.write_text("open")  # the dead worker's tool process may end now
    for events in ended:
        seen = [n for n in names(events) if n != "text_delta"]
        assert seen == ["message", "tool_call", "error", "turn_end"], seen
        assert data_of(events, "error")[0]["code"] == "interrupted"
        assert data_of(events, "turn_end")[0]["stop_reason"] == "interrupted"
    # the history answers the gate call (with an error), and the next message worked
    with a.client() as http:
        history = http.get(f"/sessions/{sid}/history").json()
    calls = [b for m in history["messages"] for b in m["content"] if b["type"] == "tool_call"]
    results = [b for m in history["messages"] for b in m["content"]
               if b["type"] == "tool_result"]
    assert [c["name"] for c in calls] == ["gate"]
    assert [r["call_id"] for r in results] == [calls[0]["id"]] and results[0]["is_error"]
    assert after.status_code == 200, after.text
    assert after.json()["text"] == "Hi: still there?"


# -- errors -------------------------------------------------------------------------------


def test_a_worker_without_redis_and_a_front_without_redis_say_what_to_do(tmp_path):
    env = daemon_env(tmp_path / "home")
    url = f"redis://127.0.0.1:{free_port()}/0"
    down = subprocess.run([sys.executable, "-m", "silica", "worker", "--redis", url],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert down.returncode == 1
    assert f"cannot reach Redis at {url}" in down.stderr
    assert "Traceback" not in down.stderr and len(down.stderr.strip().splitlines()) == 1
    alone = subprocess.run([sys.executable, "-m", "silica", "serve", "--no-worker"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert alone.returncode == 2
    assert "--no-worker" in alone.stderr and "--redis" in alone.stderr
    assert "Traceback" not in alone.stderr
    none = subprocess.run([sys.executable, "-m", "silica", "worker"], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)
    assert none.returncode == 2 and "--redis" in none.stderr
    database = f"postgresql://silica:worker-Secret-9@127.0.0.1:{free_port()}/silica"
    no_db = subprocess.run([sys.executable, "-m", "silica", "worker", "--redis", url],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path,
                           env={**env, "SILICA_DATABASE": database})
    assert no_db.returncode == 1 and "Traceback" not in no_db.stderr
    assert "cannot open the sessions database postgresql://***@127.0.0.1" in no_db.stderr
    assert "worker-Secret-9" not in no_db.stderr


def test_a_worker_stopped_with_sigterm_ends_its_running_turn_as_interrupted(cluster):
    a, root = cluster["a"], cluster["root"]
    sid = new_session(a)
    held = gate(root, "stopped")  # never opened: the turn runs until its worker stops

    async def run():
        async with SseReader(a, sid) as sse:
            sent = await post(a, sid, f"gate:{held}")
            assert sent.status_code == 202, sent.text
            await sse.until("tool_call")
            [running] = [w for w in cluster["workers"] if sid in w.stderr()]
            code = await asyncio.to_thread(running.stop)  # SIGTERM, then its exit
            await sse.until("turn_end")
            return running, code, list(sse.events)

    stopped, code, events = asyncio.run(run())
    cluster["workers"].remove(stopped)
    cluster["workers"].append(Worker(cluster["home"], cluster["url"], cluster["env"],
                                     root).ready())
    assert code == 0, stopped.stderr()
    assert "stopping: no more turns are taken" in stopped.stderr()
    seen = [n for n in names(events) if n != "text_delta"]
    assert seen == ["message", "tool_call", "tool_result", "error", "turn_end"], seen
    assert data_of(events, "tool_result")[0]["is_error"] is True
    assert data_of(events, "error")[0]["code"] == "interrupted"
    assert "silica worker stopped" in data_of(events, "error")[0]["message"]
    assert data_of(events, "turn_end")[0]["stop_reason"] == "interrupted"
    with a.client() as http:
        after = http.post(f"/sessions/{sid}/messages", params={"wait": "true"},
                          json={"message": "next"})
    assert after.status_code == 200 and after.json()["text"] == "Hi: next"
