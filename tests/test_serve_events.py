"""``silica serve``'s events on both transports: inline-image clients, clients that go away
mid-turn, provider errors, and the shell tool with nobody to ask."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import textwrap

import pytest
from PIL import Image
from serve_daemon import (
    SioListener,
    SseReader,
    gate_tool,
    new_session,
    picture_tool,
    start_daemon,
)
from wire import anthropic_server, error, text, tool_call


def png(size=(320, 200), color=(40, 160, 90)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def tools_for(home):
    picture_tool(home / "tools", png())
    gate_tool(home / "tools")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-events")
    home = root / "home"
    tools_for(home)
    with anthropic_server([]) as srv, \
            start_daemon(home, env={**srv.env, "SILICA_PROVIDER": "anthropic"},
                         cwd=root) as daemon:
        yield {"srv": srv, "daemon": daemon, "home": home}
        assert "Traceback" not in daemon.stderr()


@pytest.fixture
def srv(world):
    world["srv"].script.clear()
    return world["srv"]


@pytest.fixture
def daemon(world):
    return world["daemon"]


async def post(daemon, sid: str, message: str, **query) -> dict:
    async with daemon.async_client() as client:
        sent = await client.post(f"/sessions/{sid}/messages", params=query,
                                 json={"message": message})
    assert sent.status_code in (200, 202), sent.text
    return sent.json()


def history(daemon, sid: str) -> dict:
    with daemon.client() as http:
        return http.get(f"/sessions/{sid}/history").json()


def by_name(events) -> dict:
    return {name: data for name, data in events}


# -- inline images ------------------------------------------------------------------------


def test_inline_clients_get_image_data_and_the_others_refs_only(daemon, srv):
    srv.add(tool_call("picture"), text("Green."))
    sid = new_session(daemon)

    async def run():
        async with SseReader(daemon, sid) as refs_sse, \
                SseReader(daemon, sid, inline=True) as inline_sse, \
                SioListener(daemon, sid) as refs_sio, \
                SioListener(daemon, sid, inline=True) as inline_sio:
            assert inline_sio.joined["inline_images"] is True
            await post(daemon, sid, "draw")
            return [await refs_sse.until("turn_end"), await inline_sse.until("turn_end"),
                    await refs_sio.until("turn_end"), await inline_sio.until("turn_end")]

    refs_sse, inline_sse, refs_sio, inline_sio = asyncio.run(run())
    with daemon.client() as http:
        url = by_name(refs_sse)["tool_result"]["images"][0]["url"]
        stored = http.get(url).content
    for events in (refs_sse, refs_sio):
        assert "image_data" not in json.dumps(events)
    for events in (inline_sse, inline_sio):
        [image] = by_name(events)["tool_result"]["images"]
        assert image["image_mime"] == "image/png" and image["url"] == url
        assert base64.b64decode(image["image_data"]) == stored
        shown = by_name(events)["image"]
        assert base64.b64decode(shown["image_data"]) == stored
        assert shown["image_mime"] == "image/png"
    # the same turn, the same events, in the same order on every client
    assert [n for n, _ in refs_sse] == [n for n, _ in inline_sio] == [n for n, _ in refs_sio]
    assert Image.open(io.BytesIO(stored)).size == (320, 200)


def test_joining_an_unknown_or_invalid_session_is_refused_in_the_ack(daemon):
    async def run():
        async with SioListener(daemon, None) as sio:
            return (await sio.join("20990101-000000-abcdef"), await sio.join("../x"),
                    await sio.client.call("join", "not an object", namespace="/events"))

    unknown, invalid, malformed = asyncio.run(run())
    assert unknown["error"]["code"] == "no_session"
    assert invalid["error"]["code"] == "invalid_session_id"
    assert malformed["error"]["code"] == "invalid_join"


# -- the end of a reply --------------------------------------------------------------------


def test_turn_end_follows_the_last_delta_with_the_whole_reply_saved(world, daemon, srv):
    """The session is saved off the event loop while the last delta goes out; turn_end
    still comes after that delta on both transports, and once a client has it, the session
    file holds the whole reply."""
    from silica.agent.sessions import load_session

    pieces = ["The build ", "is green ", "on every ", "platform."]
    srv.add(text("".join(pieces), chunks=pieces))
    sid = new_session(daemon)
    saved: dict[str, list] = {}

    async def heard(reader, name: str) -> list:
        events = await reader.until("turn_end")
        saved[name] = load_session(sid, world["home"]).messages  # as the client sees turn_end
        return events

    async def run():
        async with SseReader(daemon, sid) as sse, SioListener(daemon, sid) as sio:
            await post(daemon, sid, "how is the build?")
            return await asyncio.gather(heard(sse, "sse"), heard(sio, "sio"))

    for name, events in zip(("sse", "sio"), asyncio.run(run()), strict=True):
        deltas = [data["text"] for n, data in events if n == "text_delta"]
        assert deltas == pieces, name
        assert [n for n, _ in events][-2:] == ["text_delta", "turn_end"], name
        answer = saved[name][-1]
        assert answer.role == "assistant" and answer.content[0].text == "".join(pieces)


# -- clients that go away -----------------------------------------------------------------


def test_clients_leaving_mid_turn_hurt_neither_the_turn_nor_the_daemon(daemon, srv, tmp_path):
    gate = tmp_path / "open"
    srv.add(text("Working on it. ") + tool_call("gate", {"path": str(gate)}),
            text("All done."))
    sid = new_session(daemon)

    async def run():
        sio = SioListener(daemon, sid)
        await sio.__aenter__()
        async with SseReader(daemon, sid) as sse, daemon.async_client() as client:
            waiting = asyncio.ensure_future(client.post(
                f"/sessions/{sid}/messages?wait=true", json={"message": "go"}))
            await sse.until("tool_call")
            waiting.cancel()  # a ?wait=true client gives up
            with pytest.raises(asyncio.CancelledError):
                await waiting
        # the SSE stream is closed here, mid-turn; the Socket.IO client drops too
        await sio.client.eio.disconnect(abort=True)
        async with SseReader(daemon, sid) as again:
            # a new listener joins mid-turn (subscribed before the tool may end, or the turn
            # could be over before it joins) and still sees the end
            gate.write_text("go")
            return await again.until("turn_end")

    late = asyncio.run(run())
    assert by_name(late)["turn_end"]["text"] == "All done."
    body = history(daemon, sid)
    assert [(t["turn"], t["status"]) for t in body["turns"]] == [(1, "complete")]
    # the gate held the turn open until the late listener had joined
    gated = body["messages"][2]["content"][0]
    assert (gated["is_error"], gated["content"]) == (False, [{"type": "text", "text": "opened\n"}])
    assert body["messages"][-1]["content"] == [{"type": "text", "text": "All done."}]
    srv.add(text("Still here."))
    assert asyncio.run(post(daemon, sid, "next", wait="true"))["text"] == "Still here."


def test_one_daemon_without_redis_resumes_a_client_from_its_last_event(daemon, srv, tmp_path):
    gate = tmp_path / "open"
    srv.add(text("Opening. ") + tool_call("gate", {"path": str(gate)}), text("Opened."))
    sid = new_session(daemon)

    async def run():
        async with SseReader(daemon, sid) as stayed:
            async with SseReader(daemon, sid) as sse, SioListener(daemon, sid) as sio:
                await post(daemon, sid, "open the gate")
                had_sse = await sse.until("message")
                had_sio = await sio.until("message")
            await stayed.until("tool_call")  # both are gone while these happen
            resume = {**daemon.headers, "Last-Event-ID": had_sse[-1][1]["event_id"]}
            async with SseReader(daemon, sid, headers=resume) as sse, \
                    SioListener(daemon, sid, after=had_sio[-1][1]["event_id"]) as sio:
                gate.write_text("go")
                rest_sse, rest_sio = await sse.until("turn_end"), await sio.until("turn_end")
            await stayed.until("turn_end")
            return had_sse + rest_sse, had_sio + rest_sio, stayed.events

    by_sse, by_sio, stayed = asyncio.run(run())
    assert by_sse == by_sio == stayed  # every event once, in order, with its id
    names = [name for name, _ in stayed]
    assert names[0] == "message" and names[-1] == "turn_end"
    assert names.count("tool_call") == names.count("tool_result") == 1
    assert len({data["event_id"] for _, data in stayed}) == len(stayed)


def test_an_id_the_daemon_no_longer_keeps_gets_a_reset(daemon, srv):
    srv.add(text("x" * 2100, chunks=["x"] * 2100))  # more events than a session's window
    sid = new_session(daemon)

    async def run():
        async with SseReader(daemon, sid) as sse:
            await post(daemon, sid, "say x many times")
            events = await sse.until("turn_end")
        first = events[0][1]["event_id"]
        async with SseReader(daemon, sid, headers={**daemon.headers,
                                                    "Last-Event-ID": first}) as again, \
                SioListener(daemon, sid, after=first) as sio:
            return events, await again.next(), await sio.until("reset")

    events, (name, data), by_sio = asyncio.run(run())
    assert name == "reset" and f"GET /sessions/{sid}/history" in data["message"]
    assert data["event_id"] == events[-1][1]["event_id"]
    assert [name for name, _ in by_sio] == ["reset"]


def test_an_event_id_that_is_not_one_is_refused_with_what_to_send(daemon):
    sid = new_session(daemon)
    with daemon.client() as http:
        refused = http.get(f"/sessions/{sid}/events", headers={"Last-Event-ID": "9" * 300})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid_event_id"


def test_a_client_that_goes_away_mid_upload_leaves_the_session_free(daemon, srv):
    import socket

    sid = new_session(daemon)
    with socket.create_connection(("127.0.0.1", daemon.port)) as raw:
        raw.sendall(f"POST /sessions/{sid}/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
                    '{"message": "half'.encode())
    srv.add(text("Whole."))
    assert asyncio.run(post(daemon, sid, "whole", wait="true"))["text"] == "Whole."
    assert [m["role"] for m in history(daemon, sid)["messages"]] == ["user", "assistant"]


# -- the provider fails -------------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 500])
def test_a_provider_error_is_an_error_event_and_the_session_goes_on(daemon, srv, status):
    srv.add(error(status, f"scripted failure {status}", headers={"x-should-retry": "false"}),
            text("Better now."))
    sid = new_session(daemon)

    async def run():
        async with SseReader(daemon, sid) as sse, SioListener(daemon, sid) as sio:
            turn = await post(daemon, sid, "first")
            failed = await sse.until("turn_end"), await sio.until("turn_end")
            ok = await post(daemon, sid, "second", wait="true")
            return turn, failed, ok

    turn, failed, ok = asyncio.run(run())
    for events in failed:
        names = [n for n, _ in events]
        assert names == ["message", "error", "turn_end"]
        problem = by_name(events)["error"]
        assert problem["turn_id"] == turn["turn_id"] and problem["code"] == "provider_error"
        assert f"scripted failure {status}" in problem["message"]
        assert by_name(events)["turn_end"]["stop_reason"] == "error"
    assert ok["text"] == "Better now."
    body = history(daemon, sid)
    assert [t["status"] for t in body["turns"]] == ["interrupted", "complete"]


def test_wait_true_answers_a_provider_error_with_its_reason(daemon, srv):
    srv.add(error(400, "this model does not take images"))
    sid = new_session(daemon)
    with daemon.client() as http:
        failed = http.post(f"/sessions/{sid}/messages?wait=true", json={"message": "x"})
    assert failed.status_code == 502
    problem = failed.json()["error"]
    assert problem["code"] == "provider_error" and problem["turn_id"]
    assert "this model does not take images" in problem["message"]


# -- the shell tool, with nobody to ask ---------------------------------------------------


def shell_turn(home, env, args, command: str) -> tuple[dict, list[str]]:
    """Run one turn whose model calls the shell with ``command``: the tool_result event and
    the tools offered to the model."""
    with anthropic_server([tool_call("shell", {"command": command}), text("ok")]) as srv, \
            start_daemon(home, env={**srv.env, "SILICA_PROVIDER": "anthropic", **env},
                         args=args, cwd=home.parent) as daemon:
        sid = new_session(daemon)

        async def run():
            async with SseReader(daemon, sid) as sse:
                await post(daemon, sid, "run it")
                return await sse.until("turn_end")

        events = asyncio.run(run())
    offered = [t["name"] for t in srv.requests[0]["tools"]]
    return by_name(events).get("tool_result", {}), offered


def test_allow_shell_offers_the_shell_and_runs_any_command(tmp_path):
    result, offered = shell_turn(tmp_path / "home", {}, ["--allow-shell"],
                                 "echo from-the-shell; pwd")
    assert "shell" in offered
    assert result["is_error"] is False and "from-the-shell" in result["text"]
    assert str(tmp_path) in result["text"]  # the workspace: the folder serve started in


def test_without_allow_shell_the_shell_is_not_offered(tmp_path):
    with anthropic_server([text("no tools needed")]) as srv, \
            start_daemon(tmp_path / "home", env={**srv.env, "SILICA_PROVIDER": "anthropic"},
                         cwd=tmp_path) as daemon:
        sid = new_session(daemon)
        asyncio.run(post(daemon, sid, "hi", wait="true"))
    assert "shell" not in [t["name"] for t in srv.requests[0]["tools"]]


@pytest.mark.parametrize("command, runs", [("echo allowed", True), ("ls -la", False)])
def test_shell_enabled_in_config_runs_only_allowed_commands(tmp_path, command, runs):
    """Any other command waits for a person (tests/test_serve_approvals.py); with nobody
    watching it is denied once ``[serve] approval_timeout`` passes."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(textwrap.dedent("""
        [shell]
        enabled = true
        allow = ["echo *"]
        [serve]
        approval_timeout = 1
    """))
    result, offered = shell_turn(home, {}, [], command)
    assert "shell" in offered
    if runs:
        assert result["is_error"] is False and "allowed" in result["text"]
    else:
        assert result["is_error"] is True
        assert "the user did not allow `ls -la`; it was not run" in result["text"]
