"""Several ``silica serve`` processes sharing events through a real Redis (``--redis URL``):
clients of one daemon see the turns another runs, once each and in order; a Redis that is
not there stops the start with a clear error; a Redis that goes away mid-run is logged, the
daemons keep serving, and they reconnect once it is back."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from PIL import Image
from redis_server import RedisServer
from serve_daemon import (
    SioListener,
    SseReader,
    daemon_env,
    free_port,
    gate_tool,
    names,
    new_session,
    picture_tool,
    post,
    start_daemon,
)
from wire import anthropic_server, text, tool_call

WAIT = 60.0  # seconds a daemon may take to notice Redis come and go


def png(size=(240, 160), color=(200, 60, 40)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def tools_for(home: Path) -> None:
    picture_tool(home / "tools", png())
    gate_tool(home / "tools")


def two_daemons(root: Path, srv, url: str):
    """Daemons A and B on the same ``SILICA_HOME`` and the same Redis."""
    home = root / "home"
    env = {**srv.env, "SILICA_PROVIDER": "anthropic"}
    a = start_daemon(home, env=env, args=["--redis", url], cwd=root)
    try:
        b = start_daemon(home, env=env, args=["--redis", url], cwd=root)
    except BaseException:
        a.stop()
        raise
    return a, b


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-redis")
    tools_for(root / "home")
    server = RedisServer(root / "redis").start()
    try:
        with anthropic_server([]) as srv:
            a, b = two_daemons(root, srv, server.url)
            with a, b:
                yield {"a": a, "b": b, "srv": srv, "url": server.url, "redis": server}
    finally:
        server.stop()


def by_name(events) -> dict:
    return {name: data for name, data in events}


# -- events across daemons ----------------------------------------------------------------


def test_clients_of_a_see_every_event_of_a_turn_run_by_b_once_and_in_order(pair):
    a, b, srv = pair["a"], pair["b"], pair["srv"]
    srv.add(text("Drawing it. ") + tool_call("picture"), text("A red card."),
            text("Still red."))
    sid = new_session(a)

    async def run():
        async with SseReader(a, sid) as sse_a, SioListener(a, sid) as sio_a, \
                SseReader(a, sid, inline=True) as inline_a, SseReader(b, sid) as sse_b, \
                SioListener(b, sid) as sio_b:
            readers = (sse_a, sio_a, inline_a, sse_b, sio_b)
            sent = await post(b, sid, "draw a card")
            assert sent.status_code == 202, sent.text
            first = [await r.until("turn_end") for r in readers]
            # a second turn: nothing of the first may arrive again before its events
            sent = await post(b, sid, "and now?")
            assert sent.status_code == 202, sent.text
            second = [await r.until("turn_end") for r in readers]
            return first, second

    first, second = asyncio.run(run())
    sse_a, sio_a, inline_a, sse_b, sio_b = first
    # every client of either daemon saw the same events, in the same order
    assert sse_a == sio_a == sse_b == sio_b
    seen = names(sse_a)
    assert seen[0] == "message" and seen[-1] == "turn_end"
    for once in ("message", "tool_call", "tool_result", "image", "turn_end"):
        assert seen.count(once) == 1, seen
    assert seen.index("tool_call") < seen.index("tool_result") < seen.index("image")
    deltas = "".join(d["text"] for n, d in sse_a if n == "text_delta")
    assert deltas == "Drawing it. A red card."
    assert by_name(sse_a)["turn_end"]["text"] == "A red card."
    assert "image_data" not in str(sse_a)
    # the inline client of A got the image itself, made by B for it
    assert names(inline_a) == seen
    [image] = by_name(inline_a)["tool_result"]["images"]
    with a.client() as http:
        stored = http.get(image["url"]).content
    assert base64.b64decode(image["image_data"]) == stored
    assert base64.b64decode(by_name(inline_a)["image"]["image_data"]) == stored
    assert Image.open(io.BytesIO(stored)).size == (240, 160)
    for events in second:
        assert names(events) == ["message"] + ["text_delta"] * (len(events) - 2) + ["turn_end"]
        assert by_name(events)["turn_end"]["text"] == "Still red."
    # the session both daemons share holds both turns, read through A
    with a.client() as http:
        body = http.get(f"/sessions/{sid}/history").json()
    assert [(t["turn"], t["status"]) for t in body["turns"]] == [(1, "complete"),
                                                                (2, "complete")]


def test_an_inline_socketio_client_of_a_gets_the_images_of_a_turn_run_by_b(pair):
    a, b, srv = pair["a"], pair["b"], pair["srv"]
    srv.add(tool_call("picture"), text("Here it is."))
    sid = new_session(b)

    async def run():
        async with SioListener(a, sid, inline=True) as inline_a:
            assert inline_a.joined["inline_images"] is True
            sent = await post(b, sid, "draw")
            assert sent.status_code == 202, sent.text
            return await inline_a.until("turn_end")

    events = asyncio.run(run())
    [image] = by_name(events)["tool_result"]["images"]
    with b.client() as http:
        stored = http.get(image["url"]).content
    assert image["image_mime"] == "image/png"
    assert base64.b64decode(image["image_data"]) == stored
    assert base64.b64decode(by_name(events)["image"]["image_data"]) == stored


def test_a_session_runs_one_turn_at_a_time_across_daemons(pair, tmp_path):
    a, b, srv = pair["a"], pair["b"], pair["srv"]
    gate = tmp_path / "open"
    srv.add(tool_call("gate", {"path": str(gate)}), text("Opened."))
    sid = new_session(b)

    async def run():
        async with SseReader(b, sid) as sse_b:
            started = await post(a, sid, "wait for the gate")
            assert started.status_code == 202, started.text
            await sse_b.until("tool_call")
            refused = await post(b, sid, "me too")
            gate.write_text("go")
            return refused, await sse_b.until("turn_end")

    refused, events = asyncio.run(run())
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "turn_running"
    assert by_name(events)["turn_end"]["text"] == "Opened."


# -- resuming from the last event, on any daemon -------------------------------------------


def last_id(events) -> str:
    return events[-1][1]["event_id"]


def test_an_sse_client_moving_from_a_to_b_mid_turn_sees_every_event_once_in_order(pair,
                                                                                  tmp_path):
    a, b, srv = pair["a"], pair["b"], pair["srv"]
    gate = tmp_path / "open"
    srv.add(text("Opening. ") + tool_call("gate", {"path": str(gate)}), text("Opened."))
    sid = new_session(a)

    async def run():
        async with SseReader(a, sid) as stayed:
            async with SseReader(a, sid) as mover:
                sent = await post(a, sid, "open the gate")
                assert sent.status_code == 202, sent.text
                had = await mover.until("message")
            # the mover is gone: what follows happens without it
            await stayed.until("tool_call")
            resume = {**b.headers, "Last-Event-ID": last_id(had)}
            async with SseReader(b, sid, headers=resume) as moved:
                gate.write_text("go")
                rest = await moved.until("turn_end")
            await stayed.until("turn_end")
            return had + rest, stayed.events

    moved, stayed = asyncio.run(run())
    assert moved == stayed  # the same events, with the same ids, in the same order
    seen = names(stayed)
    assert seen[0] == "message" and seen[-1] == "turn_end"
    assert seen.count("tool_call") == 1 and seen.count("tool_result") == 1
    assert by_name(stayed)["turn_end"]["text"] == "Opened."


def test_a_socketio_client_moving_from_a_to_b_mid_turn_sees_every_event_once_in_order(
        pair, tmp_path):
    a, b, srv = pair["a"], pair["b"], pair["srv"]
    gate = tmp_path / "open"
    srv.add(text("Opening. ") + tool_call("gate", {"path": str(gate)}), text("Opened."))
    sid = new_session(b)

    async def run():
        async with SioListener(b, sid) as stayed:
            async with SioListener(a, sid) as mover:
                sent = await post(a, sid, "open the gate")
                assert sent.status_code == 202, sent.text
                had = await mover.until("message")
            await stayed.until("tool_call")
            async with SioListener(b, sid, after=last_id(had)) as moved:
                assert moved.joined["ok"] is True, moved.joined
                gate.write_text("go")
                rest = await moved.until("turn_end")
            await stayed.until("turn_end")
            return had + rest, stayed.events

    moved, stayed = asyncio.run(run())
    assert moved == stayed
    assert names(stayed).count("tool_result") == 1
    assert by_name(stayed)["turn_end"]["text"] == "Opened."


def test_the_ai_sdk_resume_route_of_a_daemon_started_mid_turn_streams_the_turn(pair,
                                                                                tmp_path):
    a, srv = pair["a"], pair["srv"]
    gate = tmp_path / "open"
    srv.add(text("Opening. ") + tool_call("gate", {"path": str(gate)}), text("Opened."))
    sid = new_session(a)

    async def run():
        async with SseReader(a, sid) as watch:
            sent = await post(a, sid, "open the gate")
            assert sent.status_code == 202, sent.text
            await watch.until("tool_call")
            # a daemon that joins the pool now has heard nothing of this turn
            late = await asyncio.to_thread(
                start_daemon, a.home, env={**srv.env, "SILICA_PROVIDER": "anthropic"},
                args=["--redis", pair["url"]], cwd=a.home.parent)
            with late:
                async with late.async_client() as http, \
                        http.stream("GET", f"/api/chat/{sid}/stream") as resumed:
                    assert resumed.status_code == 200
                    gate.write_text("go")
                    lines = [line async for line in resumed.aiter_lines()]
            await watch.until("turn_end")
            return lines, watch.events

    lines, events = asyncio.run(run())
    chunks = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    kinds = [chunk["type"] for chunk in chunks]
    turn_id = by_name(events)["message"]["turn_id"]
    assert kinds[0] == "start" and chunks[0]["messageId"] == turn_id
    assert kinds[-1] == "finish" and "data: [DONE]" in lines
    assert "".join(c["delta"] for c in chunks if c["type"] == "text-delta") == \
        "Opening. Opened."
    assert kinds.count("tool-input-available") == 1
    assert kinds.count("tool-output-available") == 1


def test_an_id_older_than_the_stream_keeps_gets_a_reset(pair):
    a, b, srv = pair["a"], pair["b"], pair["srv"]
    srv.add(text("One."), text("Two."))
    sid = new_session(a)

    async def run():
        async with SseReader(a, sid) as sse:
            for word in ("first", "second"):
                sent = await post(a, sid, word, wait="true")
                assert sent.status_code == 200, sent.text
                await sse.until("turn_end")
            return sse.events

    events = asyncio.run(run())
    first = events[0][1]["event_id"]
    with redis.Redis.from_url(pair["url"]) as client:  # the cap, as a long session meets it
        client.xtrim(f"silica:events:{sid}", maxlen=1, approximate=False)

    async def resume():
        async with SseReader(b, sid, headers={**b.headers, "Last-Event-ID": first}) as sse, \
                SioListener(a, sid, after=first) as sio:
            return await sse.next(), await sio.until("reset")

    (name, data), sio_events = asyncio.run(resume())
    assert name == "reset"
    assert f"GET /sessions/{sid}/history" in data["message"]
    assert data["event_id"] == events[-1][1]["event_id"]  # resume from here afterwards
    assert names(sio_events) == ["reset"]


def test_a_client_that_missed_more_than_a_stream_gives_at_once_gets_a_reset(pair):
    a, b, srv = pair["a"], pair["b"], pair["srv"]
    srv.add(text("y" * 2600, chunks=["y"] * 2600))  # kept by the stream, too many to replay
    sid = new_session(a)

    async def run():
        async with SseReader(a, sid) as sse:
            sent = await post(a, sid, "say y many times", wait="true")
            assert sent.status_code == 200, sent.text
            events = await sse.until("turn_end")
        first = events[0][1]["event_id"]
        async with SseReader(b, sid, headers={**b.headers, "Last-Event-ID": first}) as again:
            return events, await again.next()

    events, (name, data) = asyncio.run(run())
    assert len(events) > 2600
    assert name == "reset" and data["event_id"] == events[-1][1]["event_id"]


def test_a_turn_held_while_redis_restarts_reaches_every_client_once_in_order(pair, tmp_path):
    a, b, srv = pair["a"], pair["b"], pair["srv"]
    server = pair["redis"]
    gate = tmp_path / "open"
    srv.add(text("Opening. ") + tool_call("gate", {"path": str(gate)}), text("Opened."))
    sid = new_session(a)
    lost = [d.stderr().count("lost Redis") for d in (a, b)]
    back = [d.stderr().count("is back:") for d in (a, b)]

    async def run():
        async with SseReader(a, sid) as sse_a, SioListener(a, sid) as sio_a, \
                SseReader(b, sid) as sse_b, SioListener(b, sid) as sio_b:
            clients = (sse_a, sio_a, sse_b, sio_b)
            sent = await post(a, sid, "open the gate")
            assert sent.status_code == 202, sent.text
            for client in clients:
                await client.until("tool_call")
            await asyncio.to_thread(server.stop)
            for daemon, before in zip((a, b), lost, strict=True):
                await asyncio.to_thread(wait_for_count, daemon, "lost Redis", before + 1)
            gate.write_text("go")  # the turn goes on and ends while Redis is away
            await asyncio.to_thread(wait_for_saved, a, sid)
            await asyncio.to_thread(server.start)  # the same port, empty
            for client in clients:
                await client.until("turn_end")
            return [client.events for client in clients]

    heard = asyncio.run(run())
    assert heard[0] == heard[1] == heard[2] == heard[3]
    seen = names(heard[0])
    for once in ("message", "tool_call", "tool_result", "turn_end"):
        assert seen.count(once) == 1, seen
    assert seen[-1] == "turn_end" and by_name(heard[0])["turn_end"]["text"] == "Opened."
    ids = [data["event_id"] for _, data in heard[0]]
    assert len(set(ids)) == len(ids)
    for daemon, before in zip((a, b), back, strict=True):
        wait_for_count(daemon, "is back:", before + 1)


def test_a_restarted_redis_whose_ids_are_behind_the_old_ones_is_read_from_the_start(pair):
    a, b, srv = pair["a"], pair["b"], pair["srv"]
    server = pair["redis"]
    sid = new_session(a)
    lost = [d.stderr().count("lost Redis") for d in (a, b)]
    back = [d.stderr().count("is back:") for d in (a, b)]
    note = {"turn_id": "t0", "call_id": "c0", "name": "clock", "text": "from a clock behind"}

    async def run():
        async with SseReader(a, sid) as sse_a, SseReader(b, sid) as sse_b:
            srv.add(text("Before."), text("After."))
            sent = await post(a, sid, "one", wait="true")
            assert sent.status_code == 200, sent.text
            for client in (sse_a, sse_b):
                await client.until("turn_end")
            await asyncio.to_thread(server.stop)
            for daemon, before in zip((a, b), lost, strict=True):
                await asyncio.to_thread(wait_for_count, daemon, "lost Redis", before + 1)
            await asyncio.to_thread(server.start)
            # the new stream's first entry has an id far before the ones read already, as a
            # Redis whose clock is behind would give
            with redis.Redis.from_url(pair["url"]) as client:
                client.xadd(f"silica:events:{sid}", {"e": "tool_note", "d": json.dumps(note)},
                            id="1-1")
            for daemon, before in zip((a, b), back, strict=True):
                await asyncio.to_thread(wait_for_count, daemon, "is back:", before + 1)
            sent = await post(b, sid, "two", wait="true")
            assert sent.status_code == 200, sent.text
            return [await client.until("turn_end") for client in (sse_a, sse_b)]

    for heard in asyncio.run(run()):
        assert names(heard)[0] == "tool_note" and heard[0][1]["text"] == note["text"]
        assert heard[0][1]["event_id"] == "1-1"
        assert names(heard)[1] == "message" and heard[-1][1]["text"] == "After."


def wait_for_count(daemon, words: str, count: int) -> None:
    deadline = time.monotonic() + WAIT
    while daemon.stderr().count(words) < count:
        assert daemon.proc.poll() is None, f"the daemon died:\n{daemon.stderr()}"
        assert time.monotonic() < deadline, f"no {words!r} in the log:\n{daemon.stderr()}"
        time.sleep(0.1)


def wait_for_saved(daemon, sid: str) -> None:
    """Until the session's history says its turn is complete (the turn ended)."""
    deadline = time.monotonic() + WAIT
    while True:
        with daemon.client() as http:
            body = http.get(f"/sessions/{sid}/history").json()
        if body["turns"] and body["turns"][-1]["status"] == "complete" and \
                not body.get("running"):
            return
        assert time.monotonic() < deadline, body
        time.sleep(0.1)


# -- Redis that is not there, or goes away ------------------------------------------------


def test_a_redis_that_cannot_be_reached_stops_the_start_with_what_to_do(tmp_path):
    url = f"redis://:s3cret-pass@127.0.0.1:{free_port()}/0"
    run = subprocess.run(
        [sys.executable, "-m", "silica", "serve", "--port", str(free_port()), "--redis", url],
        cwd=tmp_path, env=daemon_env(tmp_path / "home"), capture_output=True, text=True,
        timeout=120)
    assert run.returncode != 0
    assert run.stdout == ""  # no start line: it never listened
    assert "cannot reach Redis at redis://***@127.0.0.1:" in run.stderr
    assert "start it, or drop --redis" in run.stderr
    assert "s3cret-pass" not in run.stderr and "Traceback" not in run.stderr


def wait_for_log(daemon, words: str) -> None:
    deadline = time.monotonic() + WAIT
    while words not in daemon.stderr():
        assert daemon.proc.poll() is None, f"the daemon died:\n{daemon.stderr()}"
        assert time.monotonic() < deadline, f"no {words!r} in the log:\n{daemon.stderr()}"
        time.sleep(0.1)


def test_redis_going_away_is_logged_the_events_are_kept_and_every_client_gets_them(tmp_path):
    tools_for(tmp_path / "home")
    server = RedisServer(tmp_path / "redis").start()
    try:
        with anthropic_server([]) as srv:
            a, b = two_daemons(tmp_path, srv, server.url)
            with a, b:
                sid = new_session(a)

                async def turn(reply: str, *listeners) -> list:
                    """B runs a turn; what the listeners heard of it."""
                    srv.add(text(reply))
                    sent = await post(b, sid, "say something", wait="true")
                    assert sent.status_code == 200, sent.text
                    assert sent.json()["text"] == reply
                    return [await listener.until("turn_end") for listener in listeners]

                async def run():
                    # A's clients and one of B's stay connected all along
                    async with SseReader(a, sid) as sse_a, SioListener(a, sid) as sio_a, \
                            SseReader(b, sid) as sse_b:
                        await turn("Before.", sse_a, sio_a, sse_b)
                        await asyncio.to_thread(server.stop)
                        for daemon in (a, b):
                            await asyncio.to_thread(wait_for_log, daemon,
                                                    "lost Redis at redis://127.0.0.1:")
                        # both still serve HTTP, and B still runs a turn
                        for daemon in (a, b):
                            async with daemon.async_client() as http:
                                listed = await http.get("/sessions")
                            assert listed.status_code == 200
                            assert sid in [s["id"] for s in listed.json()["sessions"]]
                        await turn("During.")
                        await asyncio.to_thread(server.start)  # the same port, empty
                        for daemon in (a, b):
                            await asyncio.to_thread(wait_for_log, daemon,
                                                    "is back: events are shared")
                        # the turn said while Redis was gone reaches every client, then the next
                        for listener in (sse_a, sio_a, sse_b):
                            await listener.until("turn_end")
                        await turn("After.", sse_a, sio_a, sse_b)
                        return sse_a.events, sio_a.events, sse_b.events

                heard = asyncio.run(run())
                for events in heard:
                    ends = [d["text"] for n, d in events if n == "turn_end"]
                    assert ends == ["Before.", "During.", "After."]
                    assert names(events).count("message") == 3
                    ids = [d["event_id"] for _, d in events]
                    assert len(set(ids)) == len(ids)  # none twice
                assert [d for _, d in heard[0]] == [d for _, d in heard[1]] == \
                    [d for _, d in heard[2]]  # one order, one id per event, everywhere
                assert b.stop() == 0 and a.stop() == 0  # a clean stop, Redis bus and all
            for daemon in (a, b):
                log = daemon.stderr()
                assert log.count("lost Redis") == 1  # once for the outage, not per event
                assert log.count("is back:") == 1
                assert "Traceback" not in log
    finally:
        server.stop()
