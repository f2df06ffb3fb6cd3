"""``POST /api/chat`` and ``GET /api/chat/{id}/stream`` against a real ``silica serve``: the
AI SDK UI message stream as a client reads it off the socket (the AI SDK's own parser and
transport read it in tests/test_uistream_npm.py), and every refused body."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import time
import uuid

import pytest
from PIL import Image
from redis_server import RedisServer
from serve_daemon import gate_tool, picture_tool, start_daemon
from wire import anthropic_server, error, text, tool_call


def png(size=(320, 200), color=(40, 160, 90), kind="PNG") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format=kind)
    return buf.getvalue()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-uistream")
    home = root / "home"
    picture_tool(home / "tools", png())
    gate_tool(home / "tools")
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


def chat_id() -> str:
    return "chat-" + uuid.uuid4().hex[:12]


def user(*parts) -> dict:
    return {"id": uuid.uuid4().hex[:8], "role": "user", "parts": list(parts)}


def said(words: str) -> dict:
    return {"type": "text", "text": words}


def body(cid: str, *messages) -> dict:
    return {"id": cid, "messages": list(messages), "trigger": "submit-message",
            "messageId": None}


def read_chunks(raw: str) -> list:
    """The stream's chunks (``[DONE]`` as ``{"type": "[DONE]"}``), comments left out."""
    out = []
    for block in raw.split("\n\n"):
        if block.startswith("data: "):
            data = block[6:]
            out.append({"type": data} if data == "[DONE]" else json.loads(data))
    return out


def post_chat(daemon, payload, **kwargs):
    with daemon.client() as http:
        return http.post("/api/chat", json=payload, **kwargs)


def reply(chunks) -> str:
    return "".join(c["delta"] for c in chunks if c["type"] == "text-delta")


def kinds(chunks) -> list[str]:
    return [c["type"] for c in chunks]


def sessions(daemon) -> list[str]:
    with daemon.client() as http:
        return [s["id"] for s in http.get("/sessions").json()["sessions"]]


# -- a turn as a UI message stream ---------------------------------------------------------


def test_a_text_reply_is_a_ui_message_stream_of_a_new_session(daemon, srv):
    srv.add(text("The build is green.", chunks=["The build ", "is green."]))
    cid = chat_id()
    answer = post_chat(daemon, body(cid, user(said("how is the build?"))))
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "text/event-stream"
    assert answer.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert answer.headers["x-accel-buffering"] == "no"
    chunks = read_chunks(answer.text)
    assert kinds(chunks) == ["start", "start-step", "text-start", "text-delta", "text-delta",
                             "text-end", "finish-step", "finish", "[DONE]"]
    start, finish = chunks[0], chunks[-2]
    assert start["messageMetadata"]["session_id"] == cid
    assert start["messageId"] == start["messageMetadata"]["turn_id"]
    assert [c["delta"] for c in chunks if c["type"] == "text-delta"] == ["The build ",
                                                                          "is green."]
    assert finish["finishReason"] == "stop"
    assert finish["messageMetadata"]["usage"]["output_tokens"] == 7
    # the chat's id is the session's, made on its first message, with the whole turn
    with daemon.client() as http:
        history = http.get(f"/sessions/{cid}/history").json()
    assert [m["role"] for m in history["messages"]] == ["user", "assistant"]
    assert history["messages"][0]["content"] == [{"type": "text", "text": "how is the build?"}]
    # only the last message is read: silica keeps the history itself
    srv.add(text("Still green."))
    again = post_chat(daemon, body(cid, user(said("ignored, silica has it")),
                                   {"id": "a", "role": "assistant", "parts": []},
                                   user(said("and now?"))))
    assert reply(read_chunks(again.text)) == "Still green."
    assert srv.requests[-1]["messages"][-1]["content"][0]["text"] == "and now?"
    assert len(srv.requests[-1]["messages"]) == 3


def test_a_tool_image_is_in_the_output_and_a_file_chunk(daemon, srv):
    srv.add(text("Let me draw.", chunks=["Let me ", "draw."]) + tool_call("picture"),
            text("Green."))
    cid = chat_id()
    chunks = read_chunks(post_chat(daemon, body(cid, user(said("draw")))).text)
    assert kinds(chunks) == [
        "start", "start-step", "text-start", "text-delta", "text-delta", "text-end",
        "tool-input-available", "tool-output-available", "file", "finish-step",
        "start-step", "text-start", "text-delta", "text-end", "finish-step", "finish",
        "[DONE]"]
    called = next(c for c in chunks if c["type"] == "tool-input-available")
    assert (called["toolName"], called["input"], called["dynamic"]) == ("picture", {}, True)
    output = next(c for c in chunks if c["type"] == "tool-output-available")
    assert output["toolCallId"] == called["toolCallId"] and output["dynamic"] is True
    [shown] = output["output"]["images"]
    assert output["output"]["isError"] is False
    assert shown["mediaType"] == "image/png" and (shown["width"], shown["height"]) == (320, 200)
    assert shown["url"].startswith(f"{daemon.url}/sessions/{cid}/images/")
    assert next(c for c in chunks if c["type"] == "file") == {
        "type": "file", "url": shown["url"], "mediaType": "image/png"}
    with daemon.client() as http:
        got = http.get(shown["url"])
    assert got.status_code == 200
    assert Image.open(io.BytesIO(got.content)).size == (320, 200)


def test_a_provider_failure_is_an_error_chunk_and_the_session_goes_on(daemon, srv):
    srv.add(error(400, "scripted failure", headers={"x-should-retry": "false"}),
            text("Better now."))
    cid = chat_id()
    chunks = read_chunks(post_chat(daemon, body(cid, user(said("first")))).text)
    assert kinds(chunks) == ["start", "start-step", "error", "finish-step", "finish",
                             "[DONE]"]
    assert "scripted failure" in chunks[2]["errorText"]
    assert chunks[-2]["finishReason"] == "error"
    again = read_chunks(post_chat(daemon, body(cid, user(said("second")))).text)
    assert reply(again) == "Better now."


def test_an_image_sent_as_a_file_part_reaches_the_model(daemon, srv):
    srv.add(text("A green card."))
    cid = chat_id()
    data = "data:image/png;base64," + base64.b64encode(png((64, 48))).decode()
    answer = post_chat(daemon, body(cid, user(
        said("what is this?"), {"type": "file", "mediaType": "image/png", "url": data,
                                "filename": "card.png"})))
    assert answer.status_code == 200, answer.text
    sent = srv.requests[-1]["messages"][-1]["content"]
    assert [part["type"] for part in sent] == ["text", "image"]
    with daemon.client() as http:
        history = http.get(f"/sessions/{cid}/history").json()
    [image] = [i for i in history["messages"][0]["content"] if i["type"] == "image_ref"]
    assert (image["width"], image["height"], image["alt_text"]) == (64, 48, "card.png")


# -- a resumed stream ----------------------------------------------------------------------


def test_a_stream_resumed_mid_turn_replays_the_turn_then_follows_it(daemon, srv, tmp_path):
    gate = tmp_path / "open"
    srv.add(text("Working on it. ") + tool_call("gate", {"path": str(gate)}),
            text("All done."))
    cid = chat_id()
    with daemon.client() as http:
        assert http.get(f"/api/chat/{cid}/stream").status_code == 404  # no such session

    async def run():
        async with daemon.async_client() as client:
            async with client.stream("POST", "/api/chat",
                                     json=body(cid, user(said("go")))) as first:
                seen = ""
                async for piece in first.aiter_text():  # until the tool call is out
                    seen += piece
                    if "tool-input-available" in seen:
                        break
            # the first stream is gone; the turn goes on, and a client comes back to it
            async with client.stream("GET", f"/api/chat/{cid}/stream") as resumed:
                assert resumed.status_code == 200
                assert resumed.headers["x-vercel-ai-ui-message-stream"] == "v1"
                gate.write_text("go")
                return seen, (await resumed.aread()).decode()

    seen, raw = asyncio.run(run())
    chunks = read_chunks(raw)
    assert kinds(chunks)[:7] == ["start", "start-step", "text-start", "text-delta",
                                 "text-end", "tool-input-available", "tool-output-available"]
    assert chunks[3]["delta"] == "Working on it. "  # the pieces so far, as one
    assert kinds(chunks)[-2:] == ["finish", "[DONE]"]
    assert reply(chunks) == "Working on it. All done."
    assert chunks[0]["messageId"] in seen  # the same message as the first stream's
    with daemon.client() as http:
        idle = http.get(f"/api/chat/{cid}/stream")
        assert (idle.status_code, idle.content) == (204, b"")
        assert http.get("/api/chat/..bad/stream").status_code == 400


# -- bad input -----------------------------------------------------------------------------


def refused(answer, status: int, code: str) -> str:
    assert answer.status_code == status, answer.text
    problem = answer.json()["error"]
    assert problem["code"] == code, problem
    return problem["message"]


def test_a_body_of_ten_thousand_parts_is_refused_and_nothing_is_stored(daemon, srv):
    cid = chat_id()
    message = refused(post_chat(daemon, body(cid, user(*[said("x")] * 10_000))), 413,
                      "too_many_parts")
    assert "send only the last message" in message or "one message may have" in message
    assert cid not in sessions(daemon)
    spread = body(cid, *[user(said("x")) for _ in range(3_000)])
    refused(post_chat(daemon, spread), 413, "too_many_parts")
    assert cid not in sessions(daemon)
    # a body bigger than a message with its history may be (refused from its length,
    # before it is read): the same advice
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=60)
    conn.putrequest("POST", "/api/chat")
    for name, value in {**daemon.headers, "Content-Type": "application/json",
                        "Content-Length": str(10**10)}.items():
        conn.putheader(name, value)
    conn.endheaders(b'{"id": "' + cid.encode() + b'", "messages": [')
    answer = conn.getresponse()
    problem = json.loads(answer.read())["error"]
    conn.close()
    assert (answer.status, problem["code"]) == (413, "body_too_large")
    assert "send only the last message" in problem["message"]
    assert cid not in sessions(daemon)


@pytest.mark.parametrize("declared, data_url_type, bytes_kind", [
    ("image/png", "image/png", "JPEG"),   # the bytes are a JPEG
    ("image/png", "image/jpeg", "PNG"),   # the part and its data: URL disagree
])
def test_a_file_part_lying_about_its_type_is_refused_and_the_session_is_usable(
        daemon, srv, declared, data_url_type, bytes_kind):
    srv.add(text("Hello."))
    cid = chat_id()
    read_chunks(post_chat(daemon, body(cid, user(said("hi")))).text)
    lie = f"data:{data_url_type};base64," + base64.b64encode(png(kind=bytes_kind)).decode()
    message = refused(post_chat(daemon, body(cid, user(
        said("look"), {"type": "file", "mediaType": declared, "url": lie}))), 422,
        "invalid_image")
    assert "image 1" in message
    new = chat_id()
    refused(post_chat(daemon, body(new, user(
        said("look"), {"type": "file", "mediaType": declared, "url": lie}))), 422,
        "invalid_image")
    assert new not in sessions(daemon)  # the session it would have made is not kept
    with daemon.client() as http:
        history = http.get(f"/sessions/{cid}/history").json()
    assert len(history["messages"]) == 2  # nothing of the refused message
    srv.add(text("Still here."))
    again = read_chunks(post_chat(daemon, body(cid, user(said("again")))).text)
    assert reply(again) == "Still here."


@pytest.mark.parametrize("payload, status, code", [
    (b"{not json", 400, "invalid_json"),
    (b"[1, 2]", 400, "invalid_json"),
    (json.dumps({"id": "../x", "messages": []}).encode(), 400, "invalid_session_id"),
    (json.dumps({"id": "c1", "messages": "hi"}).encode(), 400, "invalid_field"),
    (json.dumps({"id": "c1", "messages": [{"role": "user", "parts": [{"type": "text"}]}]})
     .encode(), 400, "invalid_field"),
    (json.dumps({"id": "c1", "messages": [{"role": "user", "parts": [
        {"type": "reasoning", "text": "x"}]}]}).encode(), 400, "invalid_field"),
    (json.dumps({"id": "c1", "messages": [{"role": "user", "parts": [said("x")]}],
                 "trigger": "regenerate-message"}).encode(), 400, "unsupported_trigger"),
    (json.dumps({"id": "c1", "messages": [{"role": "user", "parts": [said("x")]}],
                 "colour": "red"}).encode(), 400, "unknown_field"),
    (json.dumps({"id": "c1", "messages": [{"role": "assistant", "parts": [said("x")]}]})
     .encode(), 400, "no_approval"),
])
def test_malformed_or_misshapen_bodies_are_refused(daemon, payload, status, code):
    answer = post_chat(daemon, None, content=payload,
                       headers={"content-type": "application/json"})
    refused(answer, status, code)
    assert "c1" not in sessions(daemon)


def test_the_ui_stream_needs_the_token_as_every_route_does(daemon):
    import httpx2

    with httpx2.Client(base_url=daemon.url) as http:
        assert http.post("/api/chat", json=body("c2", user(said("x")))).status_code == 401
        assert http.get("/api/chat/c2/stream").status_code == 401
    assert "c2" not in sessions(daemon)
    with daemon.client() as http:  # a bearer header is all a program needs
        refused(http.get("/api/chat/c2/stream"), 404, "no_session")


# -- approvals -----------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["alone", "redis"])
def asking(tmp_path_factory, request):
    """A daemon whose shell runs ``echo *`` and asks a person for anything else: alone, or
    with its events going through Redis streams (read back before they reach its clients)."""
    root = tmp_path_factory.mktemp("serve-uistream-shell")
    home = root / "home"
    home.mkdir()
    (home / "config.toml").write_text('[shell]\nenabled = true\nallow = ["echo *"]\n')
    with contextlib.ExitStack() as stack:
        args: list[str] = []
        if request.param == "redis":
            server = RedisServer(root / "redis").start()
            stack.callback(server.stop)
            args = ["--redis", server.url]
        srv = stack.enter_context(anthropic_server([]))
        daemon = stack.enter_context(start_daemon(
            home, env={**srv.env, "SILICA_PROVIDER": "anthropic"}, args=args, cwd=root))
        yield {"srv": srv, "daemon": daemon, "root": root}
        assert "Traceback" not in daemon.stderr()


def answer_message(chunks, approved: bool) -> dict:
    """The assistant message as the AI SDK sends it back once the person answered (its
    tool part ``approval-responded``)."""
    called = next(c for c in chunks if c["type"] == "tool-input-available")
    asked = next(c for c in chunks if c["type"] == "tool-approval-request")
    return {"id": chunks[0]["messageId"], "role": "assistant", "parts": [
        {"type": "step-start"},
        {"type": "dynamic-tool", "toolName": called["toolName"],
         "toolCallId": called["toolCallId"], "state": "approval-responded",
         "input": called["input"],
         "approval": {"id": asked["approvalId"], "approved": approved}}]}


@pytest.mark.parametrize("approved", [True, False])
def test_a_shell_command_waits_for_the_approval_sent_in_the_next_chat_request(asking,
                                                                            approved):
    srv, daemon, root = asking["srv"], asking["daemon"], asking["root"]
    made = root / f"made-{approved}.txt"
    srv.script.clear()
    srv.add(tool_call("shell", {"command": f"touch {made}"}), text("Done."))
    cid = chat_id()
    first = read_chunks(post_chat(daemon, body(cid, user(said("make the file")))).text)
    # the stream stops at the request, as the AI SDK's own server does: the turn waits
    assert kinds(first) == ["start", "start-step", "tool-input-available",
                            "tool-approval-request", "finish-step", "finish", "[DONE]"]
    asked = first[3]
    assert asked["toolCallId"] == first[2]["toolCallId"] and first[-2]["finishReason"] == \
        "tool-calls"
    assert not made.exists()
    with daemon.client() as http:  # a resume while it waits shows the request, and stops
        again = read_chunks(http.get(f"/api/chat/{cid}/stream").text)
    assert kinds(again) == kinds(first)
    answered = answer_message(first, approved)
    rest = read_chunks(post_chat(daemon, body(cid, user(said("make the file")), answered)).text)
    assert rest[0] == {"type": "start", "messageId": first[0]["messageId"]}
    if approved:
        assert kinds(rest) == ["start", "tool-output-available", "finish-step", "start-step",
                               "text-start", "text-delta", "text-end", "finish-step",
                               "finish", "[DONE]"]
        assert rest[1]["toolCallId"] == asked["toolCallId"] and not rest[1]["output"]["isError"]
        assert made.exists()
    else:
        assert kinds(rest)[:2] == ["start", "tool-output-denied"]
        assert rest[1]["toolCallId"] == asked["toolCallId"]
        assert not made.exists()
    assert reply(rest) == "Done."
    # the turn is gone: answering it again is refused, and nothing changes
    gone = post_chat(daemon, body(cid, user(said("x")), answered))
    refused(gone, 409, "approval_answered")
    unknown = {**answered, "parts": [{**answered["parts"][1], "approval": {
        "id": "0123456789abcdef", "approved": True}}]}
    refused(post_chat(daemon, body(cid, unknown)), 404, "no_approval")
    srv.add(text("Still here."))
    assert reply(read_chunks(post_chat(daemon, body(cid, user(said("hi")))).text)) == \
        "Still here."


def test_an_approval_for_a_turn_that_is_gone_is_refused_and_nothing_runs(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[shell]\nenabled = true\nallow = ["echo *"]\n'
                                      "[serve]\napproval_timeout = 0.5\n")
    made = tmp_path / "late.txt"
    with anthropic_server([tool_call("shell", {"command": f"touch {made}"}),
                           text("It was not run.")]) as srv, \
            start_daemon(home, env={**srv.env, "SILICA_PROVIDER": "anthropic"},
                         cwd=tmp_path) as daemon:
        cid = chat_id()
        first = read_chunks(post_chat(daemon, body(cid, user(said("make it")))).text)
        assert kinds(first)[-3] == "finish-step"
        with daemon.client() as http:  # nobody answers: denied, and the turn ends
            for _ in range(600):
                if http.get(f"/api/chat/{cid}/stream").status_code == 204:
                    break
                time.sleep(0.05)
        late = post_chat(daemon, body(cid, user(said("make it")),
                                      answer_message(first, True)))
        message = refused(late, 404, "approval_gone")
        assert "nobody answered in time" in message
        assert not made.exists()
        srv.add(text("Here."))
        assert reply(read_chunks(post_chat(daemon, body(cid, user(said("hi")))).text)) == \
            "Here."
