"""``silica serve``'s HTTP API against a real daemon: sessions, messages, history, images,
workspaces, and sessions shared with the CLI.

One daemon (and one local Anthropic wire server) serves the whole module; each test scripts
the replies it needs and works in its own sessions.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import script_tool, simple_spec
from PIL import Image
from serve_daemon import (
    SioListener,
    SseReader,
    daemon_env,
    gate_tool,
    names,
    picture_tool,
    start_daemon,
)
from wire import anthropic_server, text, tool_call

from silica.agent.sessions import session_exists

BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{200,}")


def png(size=(120, 80), color=(30, 120, 200)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A home with tools, an allowed workspace folder, the wire server and the daemon."""
    root = tmp_path_factory.mktemp("serve-api")
    home, started = root / "home", root / "work"
    (started / "inside").mkdir(parents=True)
    (root / "outside").mkdir()
    home.mkdir(parents=True)
    (home / "config.toml").write_text("[images]\nmax_per_session = 3\n")
    tools = home / "tools"
    picture_tool(tools, png((640, 360), (200, 60, 60)), label="drawn")
    gate_tool(tools)
    with anthropic_server([]) as srv, \
            start_daemon(home, env={**srv.env, "SILICA_PROVIDER": "anthropic"},
                         cwd=started) as daemon:
        yield {"srv": srv, "daemon": daemon, "home": home, "root": root,
               "started": started}
        assert "Traceback" not in daemon.stderr()


@pytest.fixture
def srv(world):
    world["srv"].script.clear()
    return world["srv"]


@pytest.fixture
def daemon(world):
    return world["daemon"]


@pytest.fixture
def http(daemon):
    with daemon.client() as client:
        yield client


def new_session(http, **body) -> str:
    response = http.post("/sessions", json=body)
    assert response.status_code == 201, response.text
    return response.json()["session_id"]


# -- sessions -----------------------------------------------------------------------------


def test_sessions_are_created_listed_and_deleted(http, world):
    sid = new_session(http)
    listed = http.get("/sessions").json()["sessions"]
    [mine] = [s for s in listed if s["id"] == sid]
    assert mine["messages"] == 0 and mine["images"] == 0 and mine["running"] is False
    assert {"title", "created", "updated"} <= set(mine)
    assert http.get(f"/sessions/{sid}/history").json()["messages"] == []

    assert http.delete(f"/sessions/{sid}").json() == {"deleted": sid}
    assert sid not in [s["id"] for s in http.get("/sessions").json()["sessions"]]
    gone = http.get(f"/sessions/{sid}/history")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "no_session"
    assert http.delete(f"/sessions/{sid}").status_code == 404
    assert not session_exists(sid, world["home"])


def test_a_session_list_is_newest_first(http):
    first, second = new_session(http), new_session(http)
    ids = [s["id"] for s in http.get("/sessions").json()["sessions"]]
    assert ids.index(second) < ids.index(first)


def test_bad_session_bodies_are_refused_with_a_reason(http):
    unknown = http.post("/sessions", json={"colour": "blue"})
    assert unknown.status_code == 400 and unknown.json()["error"]["code"] == "unknown_field"
    provider = http.post("/sessions", json={"provider": "nonesuch"})
    assert provider.status_code == 400
    assert "nonesuch" in provider.json()["error"]["message"]
    wrong_type = http.post("/sessions", content=b"provider=x",
                           headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert wrong_type.status_code == 415


@pytest.mark.parametrize("path", [
    "/sessions/{bad}/history", "/sessions/{bad}/events", "/sessions/{bad}/messages",
    "/sessions/{bad}", "/sessions/{bad}/images/" + "0" * 64,
])
def test_unknown_and_malformed_session_ids(http, world, path):
    method = "POST" if path.endswith("/messages") else "GET"
    unknown = http.request(method, path.format(bad="20990101-000000-abcdef"),
                           json={"message": "hi"})
    assert unknown.status_code == 404, unknown.text
    assert unknown.json()["error"]["code"] == "no_session"
    for bad in ("%2E%2E", "..%2F..%2Fetc", ".hidden", "a" * 65, "x%00y"):
        refused = http.request(method, path.format(bad=bad), json={"message": "hi"})
        assert 400 <= refused.status_code < 500, (bad, refused.text)
        assert "error" in refused.json()
    assert sorted(p.name for p in world["root"].iterdir()) == ["home", "outside", "work"]


def test_image_ids_are_checked(http):
    sid = new_session(http)
    bad = http.get(f"/sessions/{sid}/images/..%2F..%2Fconfig.toml")
    assert bad.status_code in (400, 404) and "error" in bad.json()
    short = http.get(f"/sessions/{sid}/images/abc")
    assert short.status_code == 400 and short.json()["error"]["code"] == "invalid_image_id"
    missing = http.get(f"/sessions/{sid}/images/" + "a" * 64)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "no_image"


# -- a message with an image, end to end ---------------------------------------------------


def test_a_json_message_with_an_image_streams_and_lands_in_history(http, srv, daemon):
    srv.add(text("A blue rectangle, 120 by 80."))
    sid = new_session(http)
    picture = png()

    async def run():
        async with SseReader(daemon, sid) as sse, SioListener(daemon, sid) as sio:
            assert sio.joined == {"ok": True, "session_id": sid, "inline_images": False}
            async with daemon.async_client() as client:
                sent = await client.post(f"/sessions/{sid}/messages", json={
                    "message": "what is this?",
                    "images": [{"data": base64.b64encode(picture).decode(),
                                "mime": "image/png", "name": "shot.png"}]})
            assert sent.status_code == 202, sent.text
            turn_id = sent.json()["turn_id"]
            return turn_id, await sse.until("turn_end"), await sio.until("turn_end")

    turn_id, by_sse, by_sio = asyncio.run(run())
    for events in (by_sse, by_sio):
        assert names(events)[0] == "message" and names(events)[-1] == "turn_end"
        assert all(data["turn_id"] == turn_id for _, data in events)
        assert "".join(d["text"] for n, d in events if n == "text_delta") == \
            "A blue rectangle, 120 by 80."
        message, end = events[0][1], events[-1][1]
        assert message["text"] == "what is this?" and message["session_id"] == sid
        [image] = message["images"]
        assert image["name"] == "shot.png" and (image["width"], image["height"]) == (120, 80)
        assert image["url"] == f"/sessions/{sid}/images/{image['image_id']}"
        assert end["stop_reason"] == "end_turn" and end["text"] == "A blue rectangle, 120 by 80."
        assert end["usage"]["input_tokens"] > 0 and end["usage"]["output_tokens"] > 0
        assert not BASE64_RUN.search(json.dumps(events))

    # the model got the image
    content = srv.requests[-1]["messages"][0]["content"]
    assert [b["type"] for b in content] == ["text", "image"]

    history = http.get(f"/sessions/{sid}/history")
    assert not BASE64_RUN.search(history.text)
    body = history.json()
    assert body["turns"] == [{"turn": 1, "status": "complete", "usage": end["usage"],
                              "stop_reason": "end_turn"}]  # as turn_end gave them
    assert body["running"] is False
    user, answer = body["messages"]
    assert user["role"] == "user" and user["content"][0] == {"type": "text",
                                                             "text": "what is this?"}
    ref = user["content"][1]
    assert ref["type"] == "image_ref" and ref["alt_text"] == "shot.png"
    assert (ref["mime"], ref["width"], ref["height"]) == ("image/png", 120, 80)
    assert answer["content"] == [{"type": "text", "text": "A blue rectangle, 120 by 80."}]

    image = http.get(ref["url"])
    assert image.status_code == 200 and image.headers["content-type"] == "image/png"
    assert image.headers["etag"] == f'"{ref["image_id"]}"'
    assert "immutable" in image.headers["cache-control"]
    assert Image.open(io.BytesIO(image.content)).size == (120, 80)
    again = http.get(ref["url"], headers={"If-None-Match": image.headers["etag"]})
    assert again.status_code == 304 and again.content == b""

    listed = [s for s in http.get("/sessions").json()["sessions"] if s["id"] == sid][0]
    assert listed["title"] == "what is this?" and listed["images"] == 1
    assert listed["messages"] == 2
    assert http.get(f"/sessions/{sid}").json() == listed


def test_wait_true_answers_with_the_final_text(http, srv):
    srv.add(text("Four."))
    sid = new_session(http)
    done = http.post(f"/sessions/{sid}/messages?wait=true", json={"message": "2+2?"})
    assert done.status_code == 200, done.text
    body = done.json()
    assert body["text"] == "Four." and body["stop_reason"] == "end_turn"
    assert set(body["usage"]) == {"input_tokens", "output_tokens", "cache_read_tokens",
                                  "cache_write_tokens"}
    assert body["turn_id"]


def test_a_multipart_message_is_taken_too(http, srv):
    srv.add(text("Got it."))
    sid = new_session(http)
    done = http.post(f"/sessions/{sid}/messages?wait=1", data={"message": "look"},
                     files=[("images[]", ("a.png", png((50, 40)), "image/png"))])
    assert done.status_code == 200, done.text
    [user, _] = http.get(f"/sessions/{sid}/history").json()["messages"]
    assert [c["type"] for c in user["content"]] == ["text", "image_ref"]
    assert user["content"][1]["width"] == 50


def test_a_refused_upload_changes_nothing(http, srv, world):
    sid = new_session(http)
    asked = len(srv.requests)
    refused = http.post(f"/sessions/{sid}/messages", json={
        "message": "hi", "images": [{"data": base64.b64encode(b"not an image").decode()}]})
    assert 400 <= refused.status_code < 500 and "error" in refused.json()
    assert http.get(f"/sessions/{sid}/history").json()["messages"] == []
    assert not (world["home"] / "images" / sid).exists()
    assert len(srv.requests) == asked


def test_the_session_image_limit_counts_the_images_already_stored(http, srv, world):
    srv.add(text("two"), text("one more"))
    sid = new_session(http)

    def images(*colors):
        return [{"data": base64.b64encode(png(color=c)).decode()} for c in colors]

    first = http.post(f"/sessions/{sid}/messages?wait=true",
                      json={"message": "two", "images": images((1, 2, 3), (4, 5, 6))})
    assert first.status_code == 200, first.text
    refused = http.post(f"/sessions/{sid}/messages?wait=true",
                        json={"message": "two more", "images": images((7, 8, 9), (9, 8, 7))})
    assert refused.status_code == 422
    problem = refused.json()["error"]
    assert problem["code"] == "session_image_limit" and "max_per_session" in problem["message"]
    assert len(list((world["home"] / "images" / sid).iterdir())) == 2
    assert len(http.get(f"/sessions/{sid}/history").json()["messages"]) == 2
    last = http.post(f"/sessions/{sid}/messages?wait=true",
                     json={"message": "one more", "images": images((7, 8, 9))})
    assert last.status_code == 200, last.text
    listed = [s for s in http.get("/sessions").json()["sessions"] if s["id"] == sid]
    assert listed[0]["images"] == 3


def test_a_tool_image_comes_as_events_history_and_a_fetchable_file(http, srv, daemon):
    srv.add(tool_call("picture", {"label": "x"}), text("A red picture."))
    sid = new_session(http)

    async def run():
        async with SseReader(daemon, sid) as sse:
            async with daemon.async_client() as client:
                await client.post(f"/sessions/{sid}/messages", json={"message": "draw"})
            return await sse.until("turn_end")

    events = asyncio.run(run())
    assert names(events)[:2] == ["message", "tool_call"]
    call = dict(events)["tool_call"]
    assert call["name"] == "picture" and call["input"] == {"label": "x"}
    result = dict(events)["tool_result"]
    assert result["call_id"] == call["call_id"] and result["is_error"] is False
    assert '"label": "drawn"' in result["text"]
    [image] = result["images"]
    assert set(image) == {"image_id", "mime", "width", "height", "url"}
    shown = dict(events)["image"]
    assert shown["image_id"] == image["image_id"] and shown["alt"] == "picture"
    assert names(events).index("image") > names(events).index("tool_result")
    assert "image_data" not in json.dumps(events)
    fetched = http.get(image["url"])
    assert Image.open(io.BytesIO(fetched.content)).size == (image["width"], image["height"])

    history = http.get(f"/sessions/{sid}/history").json()
    kinds = [[c["type"] for c in m["content"]] for m in history["messages"]]
    assert kinds == [["text"], ["tool_call"], ["tool_result"], ["text"]]
    tool_result = history["messages"][2]["content"][0]
    assert tool_result["call_id"] == call["call_id"]
    assert [c["type"] for c in tool_result["content"]] == ["text", "image_ref"]
    assert tool_result["content"][1]["url"] == image["url"]


def test_a_second_message_while_a_turn_runs_is_a_409(http, srv, daemon, world, tmp_path):
    gate = tmp_path / "open"
    srv.add(tool_call("gate", {"path": str(gate)}), text("Done."), text("Next."))
    sid = new_session(http)

    async def run():
        async with SioListener(daemon, sid) as sio, daemon.async_client() as client:
            first = await client.post(f"/sessions/{sid}/messages", json={"message": "wait"})
            assert first.status_code == 202
            await sio.until("tool_call")
            second = await client.post(f"/sessions/{sid}/messages", json={"message": "again"})
            deleting = await client.delete(f"/sessions/{sid}")
            listed = (await client.get("/sessions")).json()["sessions"]
            running = await client.get(f"/sessions/{sid}/history")
            gate.write_text("go")
            await sio.until("turn_end")
            third = await client.post(f"/sessions/{sid}/messages?wait=true",
                                      json={"message": "and now?"})
            return second, deleting, listed, running.json(), third

    second, deleting, listed, running, third = asyncio.run(run())
    assert second.status_code == 409 and second.json()["error"]["code"] == "turn_running"
    assert deleting.status_code == 409
    assert [s["running"] for s in listed if s["id"] == sid] == [True]
    assert running["running"] is True and running["turns"][-1]["status"] == "running"
    assert third.status_code == 200 and third.json()["text"] == "Next."
    turns = http.get(f"/sessions/{sid}/history").json()["turns"]
    assert [(t["turn"], t["status"]) for t in turns] == [(1, "complete"), (2, "complete")]


# -- workspaces ---------------------------------------------------------------------------


def test_tools_work_in_the_session_workspace(http, srv, world):
    """The workspace is where built-in tools read (and the shell runs): a relative path
    given to read_file is found there."""
    inside = world["started"] / "inside"
    (inside / "note.txt").write_text("the note inside\n")
    (world["started"] / "note.txt").write_text("the note where serve started\n")
    srv.add(tool_call("read_file", {"path": "note.txt"}), text("ok"),
            tool_call("read_file", {"path": "note.txt"}), text("ok"))
    sid = new_session(http, workspace=str(inside))
    assert http.post(f"/sessions/{sid}/messages?wait=true",
                     json={"message": "read it"}).status_code == 200
    assert "the note inside" in http.get(f"/sessions/{sid}/history").text

    other = new_session(http)  # no workspace: the folder serve started in
    http.post(f"/sessions/{other}/messages?wait=true", json={"message": "read it"})
    assert "the note where serve started" in http.get(f"/sessions/{other}/history").text

    srv.add(tool_call("read_file", {"path": "note.txt"}), text("ok"),
            tool_call("read_file", {"path": "note.txt"}), text("ok"))
    moved = new_session(http)  # a message may name the workspace; it stays the session's
    http.post(f"/sessions/{moved}/messages?wait=true",
              json={"message": "read it", "workspace": "inside"})
    http.post(f"/sessions/{moved}/messages?wait=true", json={"message": "again"})
    assert http.get(f"/sessions/{moved}/history").text.count("the note inside") == 2


def test_a_tool_is_told_the_session_workspace_as_silica_workdir(http, srv, world):
    """SILICA_WORKDIR is the session's workspace, not the folder the daemon started in."""
    script_tool(world["home"] / "tools", "where.py", simple_spec("where"),
                "import os\nprint('workdir=' + os.environ['SILICA_WORKDIR'])\n")
    inside = world["started"] / "inside"
    srv.add(tool_call("where", {}), text("ok"), tool_call("where", {}), text("ok"))
    sid = new_session(http, workspace=str(inside))
    http.post(f"/sessions/{sid}/messages?wait=true", json={"message": "where?"})
    assert f"workdir={inside}" in http.get(f"/sessions/{sid}/history").text
    other = new_session(http)  # no workspace: the folder serve started in
    http.post(f"/sessions/{other}/messages?wait=true", json={"message": "where?"})
    assert f"workdir={world['started']}\\n" in http.get(f"/sessions/{other}/history").text



@pytest.mark.parametrize("where", ["outside", "../outside", "/", "nonexistent"])
def test_a_workspace_outside_the_allowed_folders_is_refused(http, world, where):
    given = str(world["root"] / where) if where == "outside" else where
    refused = http.post("/sessions", json={"workspace": given})
    assert refused.status_code in (400, 403), refused.text
    assert refused.json()["error"]["code"] in ("workspace_not_allowed", "workspace_not_found")
    sid = new_session(http)
    message = http.post(f"/sessions/{sid}/messages", json={"message": "hi",
                                                           "workspace": given})
    assert message.status_code in (400, 403)
    assert http.get(f"/sessions/{sid}/history").json()["messages"] == []


def test_a_link_out_of_the_workspace_is_refused(http, world):
    link = world["started"] / "escape"
    if not link.exists():
        link.symlink_to(world["root"] / "outside")
    refused = http.post("/sessions", json={"workspace": str(link)})
    assert refused.status_code == 403


# -- shared with the CLI ------------------------------------------------------------------


def cli(world, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    env = daemon_env(world["home"], {**world["srv"].env, "SILICA_PROVIDER": "anthropic"})
    return subprocess.run([sys.executable, "-m", "silica", *args], input=stdin, text=True,
                          capture_output=True, env=env, cwd=world["started"], timeout=300)


def test_chat_resumes_a_session_made_by_the_daemon(http, srv, world):
    srv.add(text("Hello from the daemon."), text("Hello from the terminal."))
    sid = new_session(http)
    http.post(f"/sessions/{sid}/messages?wait=true", json={"message": "first"})
    done = cli(world, "chat", "--resume", sid, stdin="second\n/exit\n")
    assert done.returncode == 0, done.stderr
    assert "Hello from the terminal." in done.stdout
    sent = srv.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    history = http.get(f"/sessions/{sid}/history").json()
    assert [m["role"] for m in history["messages"]] == ["user", "assistant"] * 2
    assert (history["turns"][-1]["turn"], history["turns"][-1]["status"]) == (2, "complete")


def test_the_daemon_lists_and_continues_a_session_made_by_the_cli(http, srv, world):
    srv.add(text("From ask."), text("From the daemon."))
    done = cli(world, "ask", "made on the command line")
    assert done.returncode == 0, done.stderr
    [sid] = re.findall(r"silica chat --resume (\S+?)\)", done.stderr)
    listed = [s for s in http.get("/sessions").json()["sessions"] if s["id"] == sid]
    assert listed and listed[0]["title"] == "made on the command line"
    answer = http.post(f"/sessions/{sid}/messages?wait=true", json={"message": "more"})
    assert answer.json()["text"] == "From the daemon."
    assert len(http.get(f"/sessions/{sid}/history").json()["messages"]) == 4


def test_a_turn_saved_by_the_cli_is_not_lost_by_the_daemon(http, srv, world):
    """The daemon keeps its agent between turns; a turn the CLI adds meanwhile is read back
    before the daemon's next turn, never written over."""
    srv.add(text("one"), text("two"), text("three"))
    sid = new_session(http)
    http.post(f"/sessions/{sid}/messages?wait=true", json={"message": "a"})
    assert cli(world, "chat", "--resume", sid, stdin="b\n/exit\n").returncode == 0
    http.post(f"/sessions/{sid}/messages?wait=true", json={"message": "c"})
    said = [c["text"] for m in http.get(f"/sessions/{sid}/history").json()["messages"]
            for c in m["content"]]
    assert said == ["a", "one", "b", "two", "c", "three"]


def test_the_page_and_its_files_are_served(http):
    page = http.get("/")
    if (Path(__file__).parents[1] / "silica" / "serve" / "static" / "index.html").exists():
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert "default-src 'self'" in page.headers["content-security-policy"]
    traversal = http.get("/static/..%2F..%2Fconfig.py")
    assert traversal.status_code == 404
    assert http.get("/static/.hidden").status_code == 404
    assert http.get("/static/nope.js").json()["error"]["code"] == "not_found"
    vendored = http.get("/static/vendor/markdown-it.min.js")  # the page's markdown library
    assert vendored.status_code == 200 and "javascript" in vendored.headers["content-type"]
    assert http.get("/static/vendor/..%2Fapp.js").status_code == 404
    assert http.get("/static/vendor/nope.js").json()["error"]["code"] == "not_found"
