"""silica serve's AI SDK UI message stream read by the real ``ai`` npm package: its
``DefaultChatTransport`` (``sendMessages``, ``reconnectToStream``), its parser
(``readUIMessageStream``, which holds a stream to the client's ordering rules and throws on a
chunk out of order) and its chat logic (``AbstractChat``, what ``useChat`` is built on), from
a Node script (tests/npm/ui_stream_client.mjs) against a real daemon. The package is pinned
in tests/npm (``npm ci``). Every wait is bounded; no time is asserted.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import subprocess
import uuid
from pathlib import Path

import pytest
from npm_packages import install_npm
from PIL import Image
from serve_daemon import gate_tool, picture_tool, start_daemon
from wire import anthropic_server, error, text, tool_call

NODE_TIMEOUT = 180.0


def png(size=(320, 200)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (40, 160, 90)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="session")
def npm(tmp_path_factory) -> Path:
    return install_npm(tmp_path_factory)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("uistream-npm")
    home = root / "home"
    picture_tool(home / "tools", png())
    gate_tool(home / "tools")
    with anthropic_server([]) as srv, \
            start_daemon(home, env={**srv.env, "SILICA_PROVIDER": "anthropic"},
                         cwd=root) as daemon:
        yield {"srv": srv, "daemon": daemon}
        assert "Traceback" not in daemon.stderr()


@pytest.fixture
def srv(world):
    world["srv"].script.clear()
    return world["srv"]


@pytest.fixture
def daemon(world):
    return world["daemon"]


def client(npm: Path, daemon, mode: str, chat: str, *args: str) -> dict:
    """Run the Node client; what it printed (it fails the test if node fails)."""
    proc = subprocess.run(["node", str(npm / "ui_stream_client.mjs"), mode, daemon.url,
                           daemon.token, chat, *args], capture_output=True, text=True,
                          timeout=NODE_TIMEOUT, cwd=npm)
    assert proc.returncode == 0, f"node failed:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


def chat_id() -> str:
    return "chat-" + uuid.uuid4().hex[:12]


def texts(message: dict) -> str:
    return "".join(p["text"] for p in message["parts"] if p["type"] == "text")


def test_the_ai_sdk_reads_a_text_reply_with_its_usage(npm, daemon, srv):
    srv.add(text("The build is green.", chunks=["The build ", "is green."]))
    out = client(npm, daemon, "send", chat_id(), "how is the build?")
    assert out["errors"] == []
    message = out["message"]
    assert message["role"] == "assistant"
    assert [p["type"] for p in message["parts"]] == ["step-start", "text"]
    assert message["parts"][1] == {"type": "text", "text": "The build is green.",
                                   "state": "done"}
    assert message["metadata"]["usage"]["output_tokens"] == 7
    assert message["id"] == message["metadata"]["turn_id"]
    assert out["chunks"][0] == "start" and out["chunks"][-1] == "finish"


def test_the_ai_sdk_reads_a_tool_image_and_a_file_sent_by_the_person(npm, daemon, srv):
    srv.add(tool_call("picture"), text("Green."))
    sent = "data:image/png;base64," + base64.b64encode(png((64, 48))).decode()
    out = client(npm, daemon, "send", chat_id(), "draw", sent, "image/png")
    assert out["errors"] == []
    parts = out["message"]["parts"]
    [tool] = [p for p in parts if p["type"] == "dynamic-tool"]
    assert (tool["toolName"], tool["state"]) == ("picture", "output-available")
    [image] = tool["output"]["images"]
    assert image["mediaType"] == "image/png" and (image["width"], image["height"]) == (320, 200)
    [file] = [p for p in parts if p["type"] == "file"]
    assert file == {"type": "file", "url": image["url"], "mediaType": "image/png"}
    assert texts(out["message"]) == "Green."
    with daemon.client() as http:
        assert http.get(image["url"]).status_code == 200
    # the file part the person sent reached the model as an image
    first = srv.requests[-2]["messages"][-1]["content"]
    assert [p["type"] for p in first] == ["text", "image"]


def test_the_ai_sdk_reads_a_provider_failure_as_an_error(npm, daemon, srv):
    srv.add(error(400, "scripted failure", headers={"x-should-retry": "false"}))
    out = client(npm, daemon, "send", chat_id(), "hi")
    assert any("scripted failure" in e for e in out["errors"]), out
    assert "error" in out["chunks"]


def test_the_ai_sdk_resumes_a_running_turn_and_reads_it_whole(npm, daemon, srv, tmp_path):
    gate = tmp_path / "open"
    srv.add(text("Working on it. ") + tool_call("gate", {"path": str(gate)}),
            text("All done."))
    cid = chat_id()

    async def first_client_goes_away() -> None:
        async with daemon.async_client() as http, http.stream("POST", "/api/chat", json={
                "id": cid, "trigger": "submit-message",
                "messages": [{"id": "u1", "role": "user",
                              "parts": [{"type": "text", "text": "go"}]}]}) as first:
            seen = ""
            async for piece in first.aiter_text():
                seen += piece
                if "tool-input-available" in seen:
                    return

    asyncio.run(first_client_goes_away())
    # the turn goes on (the gate holds it); a client comes back to it with the AI SDK
    node = subprocess.Popen(["node", str(npm / "ui_stream_client.mjs"), "resume", daemon.url,
                             daemon.token, cid], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=npm)
    try:
        assert node.stderr is not None
        assert node.stderr.readline().strip() == "resumed"  # it has the stream
        gate.write_text("go")
        stdout, stderr = node.communicate(timeout=NODE_TIMEOUT)
    finally:
        node.kill()
    assert node.returncode == 0, stderr
    out = json.loads(stdout)
    assert out["resumed"] is True and out["errors"] == []
    message = out["message"]
    assert texts(message) == "Working on it. All done."
    [tool] = [p for p in message["parts"] if p["type"] == "dynamic-tool"]
    assert tool["state"] == "output-available" and tool["output"]["text"] == "opened\n"
    assert client(npm, daemon, "resume", cid) == {"resumed": False}  # idle now: 204


@pytest.fixture(scope="module")
def asking(tmp_path_factory):
    """A daemon whose shell runs ``echo *`` and asks a person for anything else."""
    root = tmp_path_factory.mktemp("uistream-npm-shell")
    home = root / "home"
    home.mkdir()
    (home / "config.toml").write_text('[shell]\nenabled = true\nallow = ["echo *"]\n')
    with anthropic_server([]) as srv, \
            start_daemon(home, env={**srv.env, "SILICA_PROVIDER": "anthropic"},
                         cwd=root) as daemon:
        yield {"srv": srv, "daemon": daemon, "root": root}
        assert "Traceback" not in daemon.stderr()


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_the_ai_sdk_chat_answers_an_approval_and_sends_it_by_itself(npm, asking, decision):
    srv, daemon, root = asking["srv"], asking["daemon"], asking["root"]
    made = root / f"made-{decision}.txt"
    srv.script.clear()
    srv.add(tool_call("shell", {"command": f"touch {made}"}), text("Done."))
    out = client(npm, daemon, "chat", chat_id(), "make the file", decision)
    assert out["status"] == "ready" and out["errors"] == []
    # the person's message, then one assistant message: the approval's answer went on it
    assert [m["role"] for m in out["messages"]] == ["user", "assistant"]
    parts = out["messages"][1]["parts"]
    [tool] = [p for p in parts if p["type"] == "dynamic-tool"]
    assert tool["toolName"] == "shell" and tool["approval"]["approved"] is (decision == "approve")
    assert tool["state"] == ("output-available" if decision == "approve" else "output-denied")
    assert texts(out["messages"][1]) == "Done."
    assert made.exists() is (decision == "approve")
    # two requests: the message, then the answer the chat sent by itself
    sent = [r["body"] for r in out["requests"]]
    assert len(sent) == 2 and sent[1]["messages"][-1]["role"] == "assistant"
