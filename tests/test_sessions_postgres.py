"""Sessions in a real Postgres (``[storage] database``), and what both backends promise:
``ask``/``chat``/``serve`` end to end, one turn at a time across processes (an advisory lock
the server drops when its holder dies), concurrent writers, and one clear line with the
password masked when the database cannot be used."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pg_server import PASSWORD, PostgresServer
from serve_daemon import free_port, picture_tool, start_daemon
from wire import anthropic_server, text, tool_call

from silica.agent.conversation import Conversation, ToolCall, ToolResultBlock
from silica.agent.sessions import (
    export_session,
    forget_stores,
    list_sessions,
    load_session,
    row_of,
    save_session,
    session_exists,
    session_version,
)
from silica.blocks import TextBlock
from silica.storage.sql import column_text


@pytest.fixture(scope="module")
def pg(tmp_path_factory):
    server = PostgresServer(tmp_path_factory.mktemp("pg")).start()
    yield server
    server.remove()


_databases = iter(range(10_000))


@pytest.fixture
def database(pg) -> str:
    """The URL of a fresh database on the module's server."""
    return pg.new_database(f"t{os.getpid()}_{next(_databases)}")


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, monkeypatch, home) -> str | None:
    """Each backend in turn: the URL in ``SILICA_DATABASE``, or None for SQLite."""
    forget_stores()
    if request.param == "sqlite":
        monkeypatch.delenv("SILICA_DATABASE", raising=False)
        return None
    url = request.getfixturevalue("database")
    monkeypatch.setenv("SILICA_DATABASE", url)
    return url


def silica(*args: str, env: dict[str, str], stdin: str = "", cwd: Path | None = None,
           timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          text=True, env=env, input=stdin, cwd=cwd, timeout=timeout)


def rows_in(url: str) -> list[tuple]:
    with psycopg.connect(url) as db:
        return db.execute("SELECT id, turns, title FROM sessions ORDER BY id").fetchall()


# -- ask, chat and serve on Postgres --------------------------------------------------------


def test_ask_and_chat_keep_their_session_in_postgres(home, database, tmp_path):
    picture_tool(home / "tools", _png(), label="shot")
    (home / "config.toml").write_text('[sandbox]\nmode = "off"\n')
    with anthropic_server([tool_call("picture", {"label": "a"}), text("A red box."),
                           text("Still red.")]) as srv:
        env = {**os.environ, **srv.env, "SILICA_DATABASE": database}
        asked = silica("ask", "draw a box", env=env)
        assert asked.returncode == 0, asked.stderr
        [(sid, turns, title)] = rows_in(database)
        assert (turns, title) == (1, "draw a box")
        chat = silica("chat", "--resume", sid, env=env, stdin="and now?\n/exit\n")
        assert chat.returncode == 0, chat.stderr
        assert "Still red." in chat.stdout
    assert rows_in(database) == [(sid, 2, "draw a box")]
    assert not (home / "sessions.db").exists()  # nothing went to SQLite
    listed = silica("sessions", "list", env=env)
    assert listed.returncode == 0 and sid in listed.stdout
    exported = subprocess.run([sys.executable, "-m", "silica", "sessions", "export", sid],
                              capture_output=True, env=env, timeout=120)
    assert exported.returncode == 0 and b'"format": "silica-session"' in exported.stdout
    assert b"tool_result" in exported.stdout and b"image_ref" in exported.stdout


def test_serve_runs_a_turn_on_postgres(home, database):
    with anthropic_server([text("Noted.")]) as srv:
        daemon = start_daemon(home, env={**srv.env, "SILICA_DATABASE": database})
        try:
            with daemon.client() as http:
                sid = http.post("/sessions", json={}).json()["session_id"]
                done = http.post(f"/sessions/{sid}/messages", params={"wait": "true"},
                                 json={"message": "note this"})
                assert done.status_code == 200, done.text
                listed = http.get("/sessions").json()["sessions"]
                assert [s["id"] for s in listed] == [sid] and listed[0]["messages"] == 2
        finally:
            daemon.stop()
    assert PASSWORD not in daemon.stderr() and "Traceback" not in daemon.stderr()
    assert [r[0] for r in rows_in(database)] == [sid]


def test_exported_sessions_move_from_sqlite_into_postgres(tmp_path, database):
    """What deploy.md says to do: export from SQLite, drop the files in the new home."""
    old, new = tmp_path / "old", tmp_path / "new"
    conversation = Conversation(id="moving", provider="anthropic", model="m")
    conversation.add("user", [TextBlock(text="take me along")], new_turn=True)
    save_session(conversation, old)
    env = {**os.environ, "SILICA_HOME": str(new), "SILICA_DATABASE": database}
    (new / "sessions").mkdir(parents=True)
    exported = subprocess.run([sys.executable, "-m", "silica", "sessions", "export", "moving",
                               "--output", str(new / "sessions" / "moving.json")],
                              env={**env, "SILICA_HOME": str(old), "SILICA_DATABASE": ""},
                              capture_output=True, text=True, timeout=120)
    assert exported.returncode == 0, exported.stderr
    listed = silica("sessions", "list", env=env)
    assert listed.returncode == 0 and "take me along" in listed.stdout
    assert "moved 1 session file into the sessions database postgresql://***@" in listed.stderr
    assert rows_in(database) == [("moving", 1, "take me along")]


def test_the_database_set_in_config_toml_is_the_one_used(tmp_path, database):
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "SILICA_HOME": str(home)}
    env.pop("SILICA_DATABASE", None)
    (home / "config.toml").write_text(f'[storage]\ndatabase = "{database}"\n')
    conversation = Conversation(id="configured")
    conversation.add("user", [TextBlock(text="from the file")], new_turn=True)
    script = ("import sys; from silica.agent.conversation import Conversation\n"
              "from silica.agent.sessions import save_session\n"
              "save_session(Conversation.model_validate_json(sys.stdin.read()))\n")
    saved = subprocess.run([sys.executable, "-c", script], input=conversation.model_dump_json(),
                           env=env, capture_output=True, text=True, timeout=120)
    assert saved.returncode == 0, saved.stderr
    assert rows_in(database) == [("configured", 1, "from the file")]
    assert not (home / "sessions.db").exists()
    (home / "config.toml").write_text('[storage]\ndatabase = "mysql://db/x"\n')
    done = silica("sessions", "list", env=env)
    assert done.returncode == 1 and "must be a PostgreSQL URL" in done.stderr


# -- one turn at a time, across processes ----------------------------------------------------

HOLD = """
import sys
from silica.agent.turnlock import TurnLock
lock = TurnLock(sys.argv[1])
lock.acquire()
print("held", flush=True)
sys.stdin.read()
"""

TRY = """
import sys
from silica.agent.turnlock import SessionBusy, TurnLock, busy
try:
    TurnLock(sys.argv[1]).acquire()
except SessionBusy as exc:
    print("busy:", exc)
else:
    print("taken", busy(sys.argv[1]))
"""


def test_a_turn_lock_on_postgres_is_one_holder_and_freed_when_it_dies(tmp_path, database):
    # two homes sharing one database: two machines, whose files no lock could share
    machine = {name: {**os.environ, "SILICA_DATABASE": database,
                      "SILICA_HOME": str(tmp_path / name)} for name in ("a", "b")}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, "s1"], env=machine["a"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        other = subprocess.run([sys.executable, "-c", TRY, "s1"], env=machine["b"], text=True,
                               capture_output=True, timeout=120)
        assert other.stdout.startswith("busy: session s1 is running a turn elsewhere"), \
            other.stderr
        assert subprocess.run([sys.executable, "-c", TRY, "s2"], env=machine["b"], text=True,
                              capture_output=True, timeout=120).stdout == "taken False\n"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # the server drops the lock once it sees the connection closed: wait for that event
    deadline = time.monotonic() + 60
    with psycopg.connect(database, autocommit=True) as db:
        while db.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                         ).fetchone() != (0,) and time.monotonic() < deadline:
            time.sleep(0.05)
    after = subprocess.run([sys.executable, "-c", TRY, "s1"], env=machine["b"], text=True,
                           capture_output=True, timeout=120)
    assert after.stdout == "taken False\n", after.stderr


# -- concurrent writers ----------------------------------------------------------------------

WRITER = """
import sys
from silica.agent.conversation import Conversation
from silica.agent.sessions import list_sessions, load_session, save_session
from silica.blocks import TextBlock
from silica.storage.sql import column_text
tag, rounds = sys.argv[1], int(sys.argv[2])
for n in range(1, rounds + 1):
    for sid in ("shared", f"own-{tag}"):
        c = Conversation(id=sid, provider="p", model="m")
        for k in range(n):
            c.add("user", [TextBlock(text=f"{tag} {n} {k} " + "x" * 3000)], new_turn=True)
        save_session(c)
    seen = load_session("shared")  # whole: every message from one save
    heads = {tuple(m.content[0].text.split()[:2]) for m in seen.messages}
    assert len(heads) == 1 and int(next(iter(heads))[1]) == len(seen.messages), heads
    list_sessions()
print("ok", flush=True)
"""


def test_concurrent_writers_lose_nothing_but_to_the_last_writer(backend, home):
    env = {**os.environ}
    writers, rounds = 4, 25
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, f"w{i}", str(rounds)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(writers)]
    outs = [p.communicate(timeout=300) for p in procs]
    for proc, (out, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0 and out == "ok\n", err
        assert "locked" not in err and "Traceback" not in err
    final = load_session("shared")
    # the last save of all is some writer's last: whole, all rounds
    assert len(final.messages) == rounds
    assert len({m.content[0].text.split()[0] for m in final.messages}) == 1
    for i in range(writers):  # each writer's own session: its every save kept, the last last
        assert len(load_session(f"own-w{i}").messages) == rounds
    ids = {"shared", *(f"own-w{i}" for i in range(writers))}
    assert {s.id for s in list_sessions()} == ids
    if backend:  # in the database the processes share, not in files
        assert {r[0] for r in rows_in(backend)} == ids
    else:
        assert (home / "sessions.db").is_file() and not list(home.glob("sessions/*.json"))


# -- the summary columns of any conversation round-trip ---------------------------------------

_texts = st.text(max_size=80)  # NULs and lone surrogates too


@st.composite
def conversations(draw) -> Conversation:
    conversation = Conversation(id=draw(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,20}",
                                                      fullmatch=True)),
                                provider=draw(_texts), model=draw(_texts))
    for n in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            conversation.add("user", [TextBlock(text=draw(_texts))], new_turn=True)
        else:
            calls = [ToolCall(id=f"c{n}", name="look", arguments={"q": draw(_texts)})]
            conversation.add("assistant", [TextBlock(text=draw(_texts)), *calls])
            conversation.add("user", [ToolResultBlock(call_id=f"c{n}", name="look",
                                                      content=[TextBlock(text=draw(_texts))])])
    return conversation


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conversation=conversations())
def test_any_conversation_round_trips_with_its_summary(backend, conversation):
    version = save_session(conversation)
    assert session_exists(conversation.id) and session_version(conversation.id) == version
    assert load_session(conversation.id) == conversation
    [info] = [s for s in list_sessions() if s.id == conversation.id]
    row = row_of(conversation)
    assert (info.created, info.updated, info.turns, info.messages, info.replies) == (
        row.created, row.updated, row.turns, row.messages, row.replies)
    shown = (column_text(row.title), column_text(row.provider), column_text(row.model))
    assert (info.title, info.provider, info.model) == shown
    assert Conversation.model_validate_json(export_session(conversation.id).decode()
                                            .split('"conversation": ', 1)[1][:-1]) == conversation


# -- an unusable database: one line, the password never shown ------------------------------


def _bad_urls(pg) -> dict[str, tuple[str, str]]:
    base = pg.url.rsplit("@", 1)[1]  # 127.0.0.1:PORT/silica
    host = base.split("/")[0]
    return {
        "unreachable": (f"postgresql://silica:{PASSWORD}@127.0.0.1:{free_port()}/silica",
                        "check that Postgres runs there"),
        "wrong password": (f"postgresql://silica:Wrong-Pass-91@{base}",
                           "check the user and password"),
        "no database": (f"postgresql://silica:{PASSWORD}@{host}/nosuchdb",
                        "create the database"),
    }


@pytest.mark.parametrize("case", ["unreachable", "wrong password", "no database"])
def test_an_unusable_database_is_one_line_with_the_password_masked(pg, home, case):
    url, advice = _bad_urls(pg)[case]
    env = {**os.environ, "SILICA_DATABASE": url}
    commands = [["sessions", "list"], ["ask", "hi"], ["chat"],
                ["serve", "--port", str(free_port())]]
    if case != "unreachable":
        commands = commands[:2]
    for command in commands:
        done = silica(*command, env=env, stdin="hi\n", timeout=120)
        assert done.returncode == 1, (command, done.stdout, done.stderr)
        [line] = done.stderr.strip().splitlines()
        assert line.startswith("error: cannot open the sessions database postgresql://***@127.0.0.1:")
        assert advice in line, line
        for secret in (PASSWORD, "Wrong-Pass-91"):
            assert secret not in done.stderr and secret not in done.stdout


def _png() -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()
