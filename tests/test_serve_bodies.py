"""Every body ``silica serve`` parses answers 4xx for malformed input, never a 500 or a
traceback: JSON nested too deeply, bad UTF-8, the wrong types, Socket.IO payloads of any
shape. The daemon end to end, and hypothesis against the app in process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_daemon import SioListener, start_daemon
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from silica.config import Settings
from silica.serve.app import create_app
from silica.serve.options import ServeOptions

TOKEN = "a-long-test-token-0123456789"
DEEP = 100_000
NESTED = b"[" * DEEP + b"]" * DEEP


def bodies_that_break_parsers() -> list[tuple[str, bytes]]:
    """JSON bodies a parser must refuse with a 4xx, with their content type."""
    return [
        ("application/json", b'{"message": ' + NESTED + b"}"),
        ("application/json", b'{"message": "x", "images": ' + NESTED + b"}"),
        ("application/json", NESTED),
        ("application/json", b'{"message": "\xff\xfe"}'),
        ("application/json", b"[1, 2]"),
        ("application/json", b'{"message": 1' + b"0" * 5000 + b"}"),
        ("application/json", b'{"message": ["x"]}'),
        ("application/json", b'{"message": "x", "images": [{"data": 5}]}'),
        ("application/json", b'{"message": "x", "images": {"data": "AAAA"}}'),
        ("application/json", b'{"message": "\\ud800"}'),
    ]


def multipart(message: bytes) -> tuple[str, bytes]:
    return ("multipart/form-data; boundary=XyZ",
            b'--XyZ\r\nContent-Disposition: form-data; name="message"\r\n\r\n' + message
            + b"\r\n--XyZ--\r\n")


def test_malformed_bodies_get_a_4xx_from_the_daemon_and_no_traceback(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    with start_daemon(home, token=TOKEN, cwd=tmp_path) as daemon, daemon.client() as http:
        sid = http.post("/sessions", json={}).json()["session_id"]
        sent = [(f"/sessions/{sid}/messages", kind, body)
                for kind, body in bodies_that_break_parsers()]
        sent += [(f"/sessions/{sid}/messages", *multipart(b"\xff\xfe"))]
        sent += [("/sessions", "application/json", body) for body in
                 (NESTED, b'{"agent": ' + NESTED + b"}", b"\xff", b"[]", b'{"model": 5}')]
        for path, kind, body in sent:
            answer = http.post(path, content=body, headers={"Content-Type": kind})
            assert 400 <= answer.status_code < 500, (path, body[:60], answer.text)
            error = answer.json()["error"]
            assert error["code"] and error["message"]
        deep = http.post(f"/sessions/{sid}/messages", content=sent[0][2],
                         headers={"Content-Type": "application/json"}).json()
        assert deep["error"]["code"] == "invalid_json"
        assert "nested too deeply" in deep["error"]["message"]
        assert http.get(f"/sessions/{sid}/history").json()["messages"] == []
    assert "Traceback" not in daemon.stderr()


def test_malformed_socketio_packets_do_not_reach_a_traceback(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    packets = ['42/events,["join",' + "[" * DEEP + "]" * DEEP + "]",
               '42/events,[' + "{\"a\":" * DEEP + "1" + "}" * DEEP + "]",
               "42/events,5", "42/events,{}", "42/events,[]", "42/events,[5]",
               '42/events,["join",1,2]', '421/events,["leave",null,null]',
               "4x", "49/events,[1]", '43/events,{"a":1}', "4", "41/events,[",
               '452-/events,["join",{"_placeholder":true,"num":"x"}]']
    with start_daemon(home, token=TOKEN, cwd=tmp_path) as daemon:
        for packet in packets:  # each on its own connection: a bad one may end it
            url = f"ws://127.0.0.1:{daemon.port}/socket.io/?EIO=4&transport=websocket"
            with connect(url, open_timeout=60) as ws:
                assert ws.recv(timeout=60).startswith("0")
                ws.send("40/events," + json.dumps({"token": TOKEN}))
                assert ws.recv(timeout=60).startswith("40/events,")
                ws.send(packet)
                # a pong, so the connection is read past the bad packet; the server
                # may already have closed a connection that sent a bad one
                with contextlib.suppress(ConnectionClosed):
                    ws.send("3")
        polling = {"EIO": "4", "transport": "polling"}
        with httpx2.Client(base_url=daemon.url, timeout=60) as anonymous:
            for payload in (b"6", b"x", b"\xff\xfe", b"4" + NESTED, b"4" + b'["join"'):
                opened = anonymous.get("/socket.io/", params=polling)
                eio = json.loads(opened.text[1:])["sid"]
                answer = anonymous.post("/socket.io/", params={**polling, "sid": eio},
                                        content=payload)
                assert answer.status_code < 500, (payload[:20], answer.text)
        with daemon.client() as http:
            sid = http.post("/sessions", json={}).json()["session_id"]

        async def join() -> object:
            async with SioListener(daemon, sid) as listener:
                return listener.joined

        assert asyncio.run(join()) == {"ok": True, "session_id": sid, "inline_images": False}
    assert "Traceback" not in daemon.stderr()


# -- every body, any bytes: hypothesis against the app in process --------------------------


class InProcess:
    """The daemon's app on an event loop of its own thread (turns started by a valid
    message run there as they would in the daemon), reached through an ASGI client."""

    def __init__(self, home) -> None:
        settings_ = Settings(provider="anthropic")
        self.app = create_app(ServeOptions.make(settings_, home=home, cwd=home))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.run(self.app.bus.start())
        self.client = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=self.app),
                                         base_url="http://127.0.0.1")

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def post(self, path: str, body: bytes, kind: str) -> httpx2.Response:
        return self.run(self.client.post(path, content=body, headers={"Content-Type": kind}))

    def close(self) -> None:
        self.run(self.app.stopping())
        self.run(_cancel_the_rest())  # Engine.IO's pings, turns that still run
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


async def _cancel_the_rest() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    served = InProcess(home)
    yield served
    served.close()


def _json_texts() -> st.SearchStrategy[bytes]:
    values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["message", "images", "workspace", "data", "url",
                                           "mime", "name", "agent", "model", "provider"])
                          | st.text(max_size=8), inner, max_size=4),
        max_leaves=12)
    encoded = values.map(lambda v: json.dumps(v).encode())
    mangled = st.tuples(encoded, st.integers(0, 200), st.binary(max_size=8)).map(
        lambda t: t[0][:t[1]] + t[2] + t[0][t[1]:])
    deep = st.integers(900, 3000).map(lambda n: b'{"message": ' + b"[" * n + b"]" * n + b"}")
    return encoded | mangled | deep | st.binary(max_size=200)


KINDS = st.sampled_from(["application/json", "application/json; charset=utf-8",
                         "multipart/form-data; boundary=XyZ", "text/plain", ""])


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=_json_texts(), kind=KINDS, route=st.sampled_from(["sessions", "messages"]))
def test_no_body_gets_a_5xx(app, body, kind, route, caplog):
    if route == "sessions":
        answer = app.post("/sessions", body, kind)
    else:  # a new session each time: a valid message starts a turn there
        sid = app.post("/sessions", b"{}", "application/json").json()["session_id"]
        if kind.startswith("multipart"):
            kind, body = multipart(body)
        answer = app.post(f"/sessions/{sid}/messages", body, kind)
    assert answer.status_code < 500, (body[:80], answer.text)
    if answer.status_code >= 400:
        assert set(answer.json()["error"]) >= {"code", "message"}
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


def _packets() -> st.SearchStrategy[str]:
    """Socket.IO packets as a client could send them: well-formed events with arbitrary
    arguments, packets cut or mangled, and text of any kind."""
    values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                          lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                          max_leaves=8)
    names = st.sampled_from(["join", "leave", "connect", "disconnect", "x"]) | st.text(max_size=5)
    events = st.tuples(st.sampled_from(["2", "3", "5", "6"]), st.integers(0, 30) | st.none(),
                       names, st.lists(values, max_size=3)).map(
        lambda t: f"{t[0]}/events,{'' if t[1] is None else t[1]}"
                  + json.dumps([t[2], *t[3]]))
    deep = st.integers(900, 3000).map(lambda n: '2/events,["join",' + "[" * n + "]" * n + "]")
    mangled = st.tuples(events, st.integers(0, 40), st.text(max_size=4)).map(
        lambda t: t[0][:t[1]] + t[2] + t[0][t[1]:])
    return events | deep | mangled | st.text(max_size=60)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(packet=_packets())
def test_no_socketio_packet_gets_a_5xx_or_a_traceback(app, packet, caplog):
    polling = {"EIO": "4", "transport": "polling"}
    opened = app.run(app.client.get("/socket.io/", params=polling))
    eio = json.loads(opened.text[1:])["sid"]
    query = {**polling, "sid": eio}
    connected = app.run(app.client.post("/socket.io/", params=query, content=b"40/events,"))
    assert connected.status_code == 200
    answer = app.run(app.client.post("/socket.io/", params=query,
                                     content=("4" + packet).encode()))
    assert answer.status_code < 500, (packet[:80], answer.text)
    app.run(asyncio.sleep(0.01))  # the event's handler runs as a task of its own
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    app.run(app.app.sio.eio.disconnect(eio))
