"""A session runs one turn at a time, across processes (``silica.agent.turnlock``)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from wire import anthropic_server, text

from silica.agent.conversation import Conversation
from silica.agent.loop import Agent
from silica.agent.sessions import export_session, load_session, save_session
from silica.agent.turnlock import SessionBusy, TurnLock, busy, lock_path
from silica.blocks import TextBlock
from silica.config import Settings

HOLDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from silica.agent.turnlock import TurnLock
    lock = TurnLock(sys.argv[1], Path(sys.argv[2]))
    lock.acquire()
    print("held", flush=True)
    sys.stdin.readline()          # hold until told (or killed)
    lock.release()
    print("released", flush=True)
""")


class Holder:
    """Another process holding a session's turn lock."""

    def __init__(self, session_id: str, home: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, session_id, str(home)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "held"

    def release(self) -> None:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "released"
        self.proc.wait(30)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)


def saved_session(home: Path) -> str:
    conversation = Conversation(id="20260101-000000-abc123", provider="anthropic")
    conversation.add("user", [TextBlock(text="hello")], new_turn=True)
    conversation.add("assistant", [TextBlock(text="hi")])
    save_session(conversation, home)
    return conversation.id


def test_a_lock_held_by_another_process_is_refused_then_free(home):
    holder = Holder("s1", home)
    try:
        assert busy("s1", home)
        with pytest.raises(SessionBusy, match="running a turn elsewhere.*start a new session"):
            TurnLock("s1", home).acquire()
        assert not busy("s2", home)  # other sessions are free
    finally:
        holder.release()
    assert not busy("s1", home)
    with TurnLock("s1", home) as lock:
        assert lock.held and busy("s1", home)
    assert not busy("s1", home)


def test_a_killed_holder_leaves_the_session_free(home):
    holder = Holder("s1", home)
    holder.kill()
    with TurnLock("s1", home):
        pass


def test_two_locks_conflict_in_one_process_and_one_lock_is_reentrant(home):
    first, second = TurnLock("s1", home), TurnLock("s1", home)
    with first:
        with first:  # the holder may take it again (the daemon, then Agent.send)
            assert first.held
        assert first.held  # still held until the outer release
        with pytest.raises(SessionBusy):
            second.acquire()
    second.acquire()
    second.release()


def test_probing_creates_no_lock_file(home):
    assert not busy("never-used", home)
    assert not lock_path("never-used", home).exists()


def test_a_deleted_session_lock_is_never_held_twice(home):
    holder = TurnLock("s1", home)
    holder.acquire()
    holder.remove_lock_file()
    fresh = TurnLock("s1", home)
    fresh.acquire()  # a new file: the deleted session's lock is gone with it
    holder.release()
    with pytest.raises(SessionBusy):
        TurnLock("s1", home).acquire()
    fresh.release()


def test_agent_send_refuses_while_another_process_runs_a_turn(monkeypatch, home):
    sid = saved_session(home)
    before = export_session(sid, home)
    with anthropic_server([]) as srv:
        srv.use(monkeypatch)
        agent = Agent.resume(sid, Settings(), home=home)
        holder = Holder(sid, home)
        try:
            with pytest.raises(SessionBusy):
                asyncio.run(agent.send("hello again"))
            with pytest.raises(SessionBusy):  # resuming a busy session is refused too
                Agent.resume(sid, Settings(), home=home)
        finally:
            holder.release()
        assert srv.requests == []
        assert export_session(sid, home) == before
        srv.add(text("now it runs"))
        assert asyncio.run(agent.send("hello again")) == "now it runs"
    assert len(load_session(sid, home).messages) == 4


def test_an_agent_reads_back_a_turn_saved_elsewhere(monkeypatch, home):
    sid = saved_session(home)
    with anthropic_server([text("from A"), text("from B"), text("from A again")]) as srv:
        srv.use(monkeypatch)
        a = Agent.resume(sid, Settings(), home=home)
        b = Agent.resume(sid, Settings(), home=home)
        asyncio.run(a.send("one"))
        asyncio.run(b.send("two"))
        asyncio.run(a.send("three"))
    said = [b.text for m in load_session(sid, home).messages for b in m.content]
    assert said == ["hello", "hi", "one", "from A", "two", "from B", "three", "from A again"]


def test_chat_refuses_a_busy_session_cleanly(home, monkeypatch):
    sid = saved_session(home)
    env = {**os.environ, "ANTHROPIC_API_KEY": "unused",
           "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}  # never reached
    holder = Holder(sid, home)
    try:
        done = subprocess.run([sys.executable, "-m", "silica", "chat", "--resume", sid],
                              input="hello\n", text=True, capture_output=True, env=env,
                              timeout=120)
    finally:
        holder.release()
    assert done.returncode != 0
    assert f"session {sid} is running a turn elsewhere" in done.stderr
    assert "Traceback" not in done.stderr
    assert len(load_session(sid, home).messages) == 2
