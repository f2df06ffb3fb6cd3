"""``silica serve`` under faults and hostile requests: a daemon killed or stopped mid-turn,
tokens, other origins and hosts, and addresses it must not serve on."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import httpx2
import pytest
import socketio
from serve_daemon import (
    SioListener,
    SseReader,
    daemon_env,
    free_port,
    gate_tool,
    start_daemon,
)
from wire import anthropic_server, text, tool_call

from silica.agent.conversation import NO_RESULT
from silica.agent.loop import INTERRUPTED
from silica.agent.sessions import export_session

TOKEN = "a-long-test-token-0123456789"




def new_session(http) -> str:
    return http.post("/sessions", json={}).json()["session_id"]


async def until_tool_runs(daemon, sid: str, message: str):
    """Send ``message`` and return once its tool call has started, with the listener."""
    sse = SseReader(daemon, sid)
    await sse.__aenter__()
    async with daemon.async_client() as client:
        sent = await client.post(f"/sessions/{sid}/messages", json={"message": message})
    assert sent.status_code == 202, sent.text
    await sse.until("tool_call")
    return sse


# -- the daemon dies or stops mid-turn ----------------------------------------------------


def test_a_daemon_killed_mid_turn_leaves_a_session_that_loads_and_goes_on(tmp_path):
    home, gate = tmp_path / "home", tmp_path / "open"
    gate_tool(home / "tools")
    with anthropic_server([tool_call("gate", {"path": str(gate)}), text("never")]) as srv:
        env = {**srv.env, "SILICA_PROVIDER": "anthropic"}
        daemon = start_daemon(home, env=env, cwd=tmp_path)
        try:
            with daemon.client() as http:
                sid = new_session(http)

            async def run():
                sse = await until_tool_runs(daemon, sid, "wait for the gate")
                daemon.kill()  # SIGKILL while the tool runs
                with pytest.raises(Exception):  # noqa: B017 (the stream just breaks)
                    await sse.next(timeout=30)
                await sse.__aexit__(None, None, None)

            asyncio.run(run())
        finally:
            gate.write_text("go")  # the orphaned tool ends too
            daemon.kill()
        srv.script.clear()
        srv.add(text("Back again."))
        with start_daemon(home, env=env, cwd=tmp_path) as again, again.client() as http:
            body = http.get(f"/sessions/{sid}/history").json()
            assert body["running"] is False
            assert [(t["turn"], t["status"]) for t in body["turns"]] == [(1, "interrupted")]
            call = body["messages"][1]["content"][0]
            result = body["messages"][2]["content"][0]
            assert call["type"] == "tool_call" and result["type"] == "tool_result"
            assert result["call_id"] == call["id"] and result["is_error"] is True
            assert result["content"] == [{"type": "text", "text": NO_RESULT}]
            listed = [s for s in http.get("/sessions").json()["sessions"] if s["id"] == sid]
            assert listed[0]["running"] is False
            answer = http.post(f"/sessions/{sid}/messages?wait=true",
                               json={"message": "are you there?"})
            assert answer.status_code == 200 and answer.json()["text"] == "Back again."
        sent = srv.requests[-1]["messages"]
        [answered] = [b for b in sent[2]["content"] if b["type"] == "tool_result"]
        assert answered["tool_use_id"] == call["id"]


def test_sigterm_mid_turn_interrupts_it_cleanly(tmp_path):
    home, gate = tmp_path / "home", tmp_path / "open"
    gate_tool(home / "tools")
    try:
        with anthropic_server([tool_call("gate", {"path": str(gate)})]) as srv:
            daemon = start_daemon(home, env={**srv.env, "SILICA_PROVIDER": "anthropic"},
                                  cwd=tmp_path)
            with daemon.client() as http:
                sid = new_session(http)

            async def run():
                sse = await until_tool_runs(daemon, sid, "wait")
                async with SioListener(daemon, sid) as sio:
                    stopping = asyncio.get_running_loop().run_in_executor(None, daemon.stop)
                    ended = await sse.until("turn_end")
                    await sio.until("turn_end")
                    await sse.__aexit__(None, None, None)
                    return ended, await stopping

            ended, code = asyncio.run(run())
    finally:
        gate.write_text("go")
    assert code == 0, daemon.stderr()
    assert [n for n, _ in ended] == ["tool_result", "error", "turn_end"]
    assert ended[0][1]["is_error"] is True and ended[0][1]["text"] == INTERRUPTED
    assert ended[1][1]["code"] == "interrupted"
    assert ended[2][1]["stop_reason"] == "interrupted"
    assert "Traceback" not in daemon.stderr()
    saved = export_session(sid, home).decode()
    assert INTERRUPTED.strip("[]") in saved


# -- tokens -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def locked(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-token")
    with anthropic_server([]) as srv, \
            start_daemon(root / "home", env={**srv.env, "SILICA_PROVIDER": "anthropic"},
                         token=TOKEN, cwd=root) as daemon:
        with daemon.client() as http:
            sid = new_session(http)
        yield daemon, sid


ROUTES = [("GET", "/"), ("GET", "/static/app.js"), ("GET", "/sessions"),
          ("POST", "/sessions"), ("DELETE", "/sessions/{sid}"),
          ("POST", "/sessions/{sid}/messages"), ("GET", "/sessions/{sid}/history"),
          ("GET", "/sessions/{sid}/images/" + "a" * 64), ("GET", "/sessions/{sid}/events"),
          ("GET", "/nowhere")]


@pytest.mark.parametrize("method, path", ROUTES)
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"},
                                     {"Authorization": f"Basic {TOKEN}"},
                                     {"Cookie": "silica_token=wrong"}])
def test_every_route_needs_the_token(locked, method, path, headers):
    daemon, sid = locked
    with httpx2.Client(base_url=daemon.url, timeout=30) as anyone:
        refused = anyone.request(method, path.format(sid=sid), headers=headers,
                                 json={"message": "hi"})
    assert refused.status_code == 401, refused.text
    assert refused.json()["error"]["code"] == "unauthorized"
    assert refused.headers["www-authenticate"].startswith("Bearer")


def test_the_token_opens_every_route(locked):
    daemon, sid = locked
    with daemon.client() as http:
        assert http.get("/sessions").status_code == 200
        assert http.get(f"/sessions/{sid}/history").status_code == 200


def test_the_start_link_sets_a_cookie_that_opens_the_api(locked):
    daemon, _ = locked
    assert daemon.start_line == f"silica serve: http://127.0.0.1:{daemon.port}/?token={TOKEN}"
    with httpx2.Client(base_url=daemon.url, timeout=30) as browser:
        wrong = browser.get("/?token=nope")
        assert wrong.status_code == 401
        login = browser.get(f"/?token={TOKEN}")
        assert login.status_code == 303 and login.headers["location"] == "/"
        cookie = login.headers["set-cookie"]
        assert "silica_token=" in cookie and "HttpOnly" in cookie
        assert "samesite=strict" in cookie.lower()
        assert browser.get("/sessions").status_code == 200  # the cookie is sent now


def test_socketio_and_sse_need_the_token(locked):
    daemon, sid = locked

    async def run():
        refused = []
        for auth in (None, {"token": "wrong"}, "not a dict"):
            client = socketio.AsyncClient(reconnection=False)
            client.on("connect_error", refused.append, namespace="/events")
            with pytest.raises(socketio.exceptions.ConnectionError):
                await client.connect(daemon.url, namespaces=["/events"], auth=auth,
                                     transports=["websocket"], wait_timeout=30)
        async with SioListener(daemon, sid) as sio:  # auth={"token": TOKEN}
            joined = sio.joined
        async with SseReader(daemon, sid, headers={}) as anonymous:
            status = anonymous.response.status_code
        async with SseReader(daemon, sid) as allowed:
            ok = allowed.response.status_code
        return refused, joined, status, ok

    refused, joined, status, ok = asyncio.run(run())
    assert len(refused) == 3
    assert all(r["data"]["code"] == "unauthorized" and "token" in r["message"]
               for r in refused)
    assert joined["ok"] is True
    assert status == 401 and ok == 200


def test_a_non_loopback_host_without_a_token_is_refused(tmp_path):
    env = daemon_env(tmp_path / "home")
    for args in (["--host", "0.0.0.0"], ["--host", "192.0.2.7"]):
        done = subprocess.run([sys.executable, "-m", "silica", "serve", "--port",
                               str(free_port()), "--no-token", *args], capture_output=True,
                              text=True, env=env, timeout=120)
        assert done.returncode == 2
        assert "needs" not in done.stdout and done.stdout == ""
        assert "leave out --no-token" in done.stderr
        assert "Traceback" not in done.stderr
    spaced = subprocess.run([sys.executable, "-m", "silica", "serve", "--token", "a b"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert spaced.returncode == 2 and "printable characters" in spaced.stderr


def test_a_port_in_use_is_a_clean_error(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "silica", "serve", "--port", str(port)],
                              capture_output=True, text=True,
                              env=daemon_env(tmp_path / "home"), timeout=120)
    assert done.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


# -- other origins and hosts --------------------------------------------------------------


@pytest.fixture(scope="module")
def open_to_one_origin(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-cors")
    home = root / "home"
    home.mkdir()
    (home / "config.toml").write_text(textwrap.dedent("""
        [serve]
        cors_origins = ["http://app.example:3000"]
    """))
    with start_daemon(home, cwd=root) as daemon:
        yield daemon


@pytest.fixture(scope="module")
def closed(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-closed")
    with start_daemon(root / "home", cwd=root) as daemon:
        yield daemon


def test_cors_is_closed_by_default(closed):
    with closed.client() as http:
        evil = {"Origin": "http://evil.example"}
        listed = http.get("/sessions", headers=evil)
        assert listed.status_code == 403
        assert listed.json()["error"]["code"] == "origin_not_allowed"
        assert "access-control-allow-origin" not in listed.headers
        posted = http.post("/sessions", headers=evil, json={})
        assert posted.status_code == 403
        preflight = http.options("/sessions", headers={
            **evil, "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in preflight.headers
        # a form posted by another page (no preflight): refused before it runs anything
        form = http.post("/sessions", headers={**evil, "Content-Type": "text/plain"},
                         content=b"{}")
        assert form.status_code == 403
        assert http.get("/sessions").json()["sessions"] == []
        same = http.get("/sessions", headers={"Origin": closed.url})
        assert same.status_code == 200  # the page itself


def test_socketio_from_another_origin_is_refused(closed):
    # the handshake itself is refused: no Socket.IO session is opened for another page
    with closed.client() as http:
        handshake = http.get("/socket.io/?EIO=4&transport=polling",
                             headers={"Origin": "http://evil.example"})
        assert handshake.status_code == 403
        assert "sid" not in handshake.text

    async def run():
        client = socketio.AsyncClient(reconnection=False)
        # the refusal reaches the client as a failed connect (or, when the daemon closes the
        # connection before the client has read the answer, as the connection closed)
        with pytest.raises((socketio.exceptions.ConnectionError, RuntimeError)):
            await client.connect(closed.url, namespaces=["/events"],
                                 headers={"Origin": "http://evil.example"},
                                 transports=["polling"], wait_timeout=30)
        assert not client.connected

    asyncio.run(run())


def test_a_rebound_host_name_is_refused(closed):
    with closed.client() as http:
        refused = http.get("/sessions", headers={"Host": "attacker.example"})
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "host_not_allowed"
        assert http.get("/sessions", headers={"Host": f"localhost:{closed.port}"}
                        ).status_code == 200


def test_cors_origins_opens_the_api_to_those_origins_only(open_to_one_origin):
    daemon = open_to_one_origin
    app = {"Origin": "http://app.example:3000"}
    with daemon.client() as http:
        preflight = http.options("/sessions", headers={
            **app, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type"})
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "http://app.example:3000"
        listed = http.get("/sessions", headers=app)
        assert listed.status_code == 200
        assert listed.headers["access-control-allow-origin"] == "http://app.example:3000"
        other = http.get("/sessions", headers={"Origin": "http://app.example:4000"})
        assert other.status_code == 403
