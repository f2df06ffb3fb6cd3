"""The agent end to end: real tools, the real SDKs, a local server speaking each wire protocol.

Each test scripts the model (a tool call, then an answer) and asserts on what the SDK sent.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import script_tool, simple_spec
from PIL import Image
from wire import anthropic_server, error, ollama_server, openai_server, text, tool_call

from silica.agent.loop import INTERRUPTED, Agent, TurnLimitReached
from silica.agent.sessions import export_session, load_session
from silica.config import AgingSettings, Settings
from silica.providers.base import ProviderError

BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{200,}")


def png_bytes(size=(64, 48), color=(20, 140, 220)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def decode(b64: str) -> Image.Image:
    img = Image.open(io.BytesIO(base64.b64decode(b64)))
    img.load()
    return img


@pytest.fixture
def picture_tool(user_tools):
    """A tool that returns a PNG as base64 JSON (and says which call it was)."""
    data = base64.b64encode(png_bytes((1920, 1080), (200, 60, 60))).decode()
    body = textwrap.dedent(f"""
        import json, sys
        label = sys.argv[-1].split("=", 1)[-1] if len(sys.argv) > 1 else "none"
        print(json.dumps({{"label": label, "media_type": "image/png", "base64": {data!r}}}))
    """)
    spec = simple_spec("picture", label="string")
    script_tool(user_tools, "picture.py", spec, body=body)


def run(agent: Agent, prompt: str, images=()) -> str:
    return asyncio.run(agent.send(prompt, images))


def settings(provider: str, **changes) -> Settings:
    return Settings(provider=provider, **changes)


def assert_session_has_no_base64(agent: Agent, home: Path) -> None:
    saved = export_session(agent.conversation.id, home).decode()
    assert not BASE64_RUN.search(saved)
    load_session(agent.conversation.id, home)  # and it loads back


# -- each provider gets the image where it wants it -------------------------------------


def test_anthropic_image_goes_inside_the_tool_result(monkeypatch, picture_tool, home):
    with anthropic_server([tool_call("picture", {"label": "one"}),
                           text("A red rectangle.")]) as srv:
        srv.use(monkeypatch)
        streamed: list[str] = []
        agent = Agent.start(settings("anthropic"))
        agent.events.on_text = streamed.append
        answer = run(agent, "draw me something")
    assert answer == "A red rectangle." and "".join(streamed) == answer
    first, second = srv.requests
    assert {t["name"] for t in first["tools"]} >= {"picture", "read_file"}
    user = second["messages"][-1]
    [result] = [b for b in user["content"] if b["type"] == "tool_result"]
    assert result["tool_use_id"] == second["messages"][-2]["content"][-1]["id"]
    kinds = [b["type"] for b in result["content"]]
    assert kinds == ["text", "image"]
    assert '"label": "one"' in result["content"][0]["text"]
    image = result["content"][1]["source"]
    img = decode(image["data"])
    assert image["media_type"] == "image/png" and max(img.size) <= 1568
    assert len(image["data"]) <= 5 * 1024 * 1024
    assert_session_has_no_base64(agent, home)


def test_openai_tool_message_is_text_and_the_image_follows_as_user(monkeypatch, picture_tool):
    with openai_server([tool_call("picture", {"label": "two"}), text("Red.")]) as srv:
        srv.use(monkeypatch)
        answer = run(Agent.start(settings("openai", model="gpt-4.1")), "draw")
    assert answer == "Red."
    messages = srv.requests[1]["messages"]
    tool_msg = next(m for m in messages if m["role"] == "tool")
    assert isinstance(tool_msg["content"], str) and "image" in tool_msg["content"]
    follow = messages[messages.index(tool_msg) + 1]
    assert follow["role"] == "user"
    [url] = [p["image_url"]["url"] for p in follow["content"] if p["type"] == "image_url"]
    assert url.startswith("data:image/png;base64,")
    assert max(decode(url.split(",", 1)[1]).size) <= 2048


def test_ollama_images_are_bare_base64_on_the_tool_message(monkeypatch, picture_tool):
    with ollama_server([tool_call("picture", {"label": "three"}), text("Red again.")]) as srv:
        srv.use(monkeypatch)
        answer = run(Agent.start(settings("ollama", model="llama3.2-vision")), "draw")
    assert answer == "Red again."
    tool_msg = next(m for m in srv.requests[1]["messages"] if m["role"] == "tool")
    [b64] = tool_msg["images"]
    assert not b64.startswith("data:")
    assert decode(b64).format == "PNG"


def test_a_model_without_vision_gets_text_in_place_of_images(monkeypatch, picture_tool):
    with openai_server([tool_call("picture", {"label": "x"}), text("ok")]) as srv:
        srv.use(monkeypatch)
        run(Agent.start(settings("openai", model="gpt-3.5-turbo")), "draw")
    sent = json.dumps(srv.requests[1])
    assert "image_url" not in sent and not BASE64_RUN.search(sent)
    assert "[Image: picture, 1365x768, image/png]" in sent  # fitted for OpenAI, then text


# -- the loop ----------------------------------------------------------------------------


def test_user_images_are_attached_to_the_message(monkeypatch, tmp_path, user_tools):
    photo = tmp_path / "photo.png"
    photo.write_bytes(png_bytes((300, 200)))
    with anthropic_server([text("A blue photo.")]) as srv:
        srv.use(monkeypatch)
        run(Agent.start(settings("anthropic")), "what is this?", [photo])
    content = srv.requests[0]["messages"][0]["content"]
    assert [b["type"] for b in content] == ["text", "image"]
    assert decode(content[1]["source"]["data"]).size == (300, 200)


def test_a_bad_user_image_is_refused_before_anything_is_sent(monkeypatch, tmp_path):
    bad = tmp_path / "notes.png"
    bad.write_text("not an image at all")
    with anthropic_server([text("never")]) as srv:
        srv.use(monkeypatch)
        agent = Agent.start(settings("anthropic"))
        with pytest.raises(Exception, match="not in any image format"):
            run(agent, "look", [bad])
    assert srv.requests == []


def test_parallel_tool_calls_are_all_answered_in_one_message(monkeypatch, user_tools, project):
    room = project / "room"  # the workspace: the folder a confined tool may write
    body = textwrap.dedent(f"""
        import os, pathlib, time
        room = pathlib.Path({str(room)!r}); room.mkdir(exist_ok=True)
        (room / os.urandom(8).hex()).touch()  # each call has its own PID namespace
        for _ in range(200):
            if len(list(room.iterdir())) >= 2:
                print("together"); break
            time.sleep(0.05)
        else:
            print("alone")
    """)
    script_tool(user_tools, "meet.py", simple_spec("meet"), body=body)
    with anthropic_server([tool_call("meet", {}, id="a") + tool_call("meet", {}, id="b"),
                           text("both done")]) as srv:
        srv.use(monkeypatch)
        run(Agent.start(settings("anthropic")), "meet twice")
    results = [b for b in srv.requests[1]["messages"][-1]["content"]
               if b["type"] == "tool_result"]
    assert [r["tool_use_id"] for r in results] == ["a", "b"]
    assert [r["content"][0]["text"].strip() for r in results] == ["together", "together"]


def test_tool_errors_are_passed_on_as_is_error(monkeypatch, user_tools):
    script_tool(user_tools, "fail.py", simple_spec("fail"),
                body="import sys\nprint('no such city', file=sys.stderr)\nsys.exit(4)\n")
    with anthropic_server([tool_call("fail", {}), tool_call("ghost", {}), text("sorry")]) as srv:
        srv.use(monkeypatch)
        run(Agent.start(settings("anthropic")), "try")
    [failed] = [b for b in srv.requests[1]["messages"][-1]["content"]
                if b["type"] == "tool_result"]
    assert failed["is_error"] is True
    assert "exited with code 4" in failed["content"][-1]["text"]
    [unknown] = [b for b in srv.requests[2]["messages"][-1]["content"]
                 if b["type"] == "tool_result"]
    assert unknown["is_error"] is True and "no tool named 'ghost'" in json.dumps(unknown)


def test_images_age_across_turns(monkeypatch, picture_tool):
    turns = 5
    script = []
    for i in range(turns):
        script += [tool_call("picture", {"label": f"t{i}"}), text(f"answer {i}")]
    with anthropic_server(script) as srv:
        srv.use(monkeypatch)
        agent = Agent.start(settings("anthropic", aging=AgingSettings(
            full_turns=1, lowres_turns=2, lowres_px=512, step_turns=1)))
        for i in range(turns):
            run(agent, f"turn {i}")
    last = srv.requests[-1]
    images, earlier = [], 0
    for message in last["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            for inner in block.get("content", []) if block["type"] == "tool_result" else [block]:
                if isinstance(inner, dict) and inner.get("type") == "image":
                    images.append(decode(inner["source"]["data"]).size)
                elif isinstance(inner, dict) and "[Earlier image" in inner.get("text", ""):
                    earlier += 1
    assert earlier == 2  # turns 0 and 1: older than full + low-res turns
    assert sorted(max(s) for s in images) == [512, 512, 1429]  # two low-res, one full
    assert len(json.dumps(last)) < len(json.dumps(srv.requests[1])) * 4


def test_turn_limit_stops_a_model_that_never_answers(monkeypatch, user_tools, home):
    script_tool(user_tools, "ping.py", simple_spec("ping"), body="print('pong')")
    with anthropic_server([tool_call("ping", {})] * 3) as srv:
        srv.use(monkeypatch)
        agent = Agent.start(settings("anthropic", max_turns=3))
        with pytest.raises(TurnLimitReached, match="3 requests"):
            run(agent, "loop forever")
    saved = load_session(agent.conversation.id, home)
    assert saved.messages[-1].content[0].type == "tool_result"  # every call answered


def test_provider_error_keeps_the_session_and_resume_goes_on(monkeypatch, home, user_tools):
    with anthropic_server([error(400, "messages.0: Could not process image"),
                           text("hello again")]) as srv:
        srv.use(monkeypatch)
        agent = Agent.start(settings("anthropic"))
        with pytest.raises(ProviderError, match="Could not process image"):
            run(agent, "first try")
        session = agent.conversation.id
        again = Agent.resume(session, settings("anthropic"))
        assert run(again, "second try") == "hello again"
    roles = [m["role"] for m in srv.requests[1]["messages"]]
    assert roles == ["user"]  # the unanswered message and the new one, joined
    texts = [b["text"] for b in srv.requests[1]["messages"][0]["content"]]
    assert texts == ["first try", "second try"]
    assert [m.role for m in load_session(session, home).messages] == [
        "user", "user", "assistant"]


def test_interrupting_a_turn_answers_every_tool_call(monkeypatch, user_tools, project, home):
    started = project / "started"  # the workspace: where a confined tool may write
    body = f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\ntime.sleep(120)\n"
    script_tool(user_tools, "slow.py", simple_spec("slow"), body=body)
    with anthropic_server([tool_call("slow", {}, id="s1") + tool_call("slow", {}, id="s2")]) \
            as srv:
        srv.use(monkeypatch)
        agent = Agent.start(settings("anthropic"))

        async def interrupt():
            task = asyncio.ensure_future(agent.send("be slow"))
            deadline = time.monotonic() + 120
            while not started.exists():
                assert not task.done() and time.monotonic() < deadline, "the tool never ran"
                await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(interrupt())
    last = load_session(agent.conversation.id, home).messages[-1]
    assert [b.call_id for b in last.content] == ["s1", "s2"]
    assert all(b.is_error and INTERRUPTED in b.content[0].text for b in last.content)


# -- the command line --------------------------------------------------------------------


def silica(*args, env, stdin=""):
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          text=True, env=env, input=stdin, timeout=300)


def test_ask_and_chat_from_the_command_line(monkeypatch, picture_tool, home):
    with anthropic_server([tool_call("picture", {"label": "cli"}), text("It is red."),
                           text("Still red.")]) as srv:
        env = {**os.environ, **srv.env}
        done = silica("ask", "what colour?", env=env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "It is red."
        assert "→ picture" in done.stderr and "image/png, 1429x804 px" in done.stderr
        sessions = json.loads(silica("sessions", "list", "--json", env=env).stdout)
        assert len(sessions) == 1 and sessions[0]["title"] == "what colour?"
        sid = sessions[0]["id"]
        chat = silica("chat", "--resume", sid, env=env, stdin="and now?\n/exit\n")
        assert chat.returncode == 0, chat.stderr
        assert "Still red." in chat.stdout
    assert len(srv.requests) == 3
    assert srv.requests[2]["messages"][-1]["content"][-1]["text"] == "and now?"


def test_ask_reports_a_provider_failure_on_stderr(monkeypatch, user_tools):
    with anthropic_server([error(401, "invalid x-api-key")]) as srv:
        done = silica("ask", "hi", env={**os.environ, **srv.env})
    assert done.returncode == 1
    assert "ANTHROPIC_API_KEY" in done.stderr


# -- every call answered, however the disk or the tool fails ------------------------------


def assert_every_call_answered(request: dict) -> None:
    """What Anthropic checks before it answers 400: each tool_use is answered by a
    tool_result at the start of the next (user) message, and no tool_result is unasked."""
    messages = request["messages"]
    asked: set[str] = set()
    for message in messages:
        blocks = message["content"] if isinstance(message["content"], list) else []
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        if message["role"] == "user":
            assert set(results) == asked, (results, asked)
            assert [b["type"] for b in blocks[:len(results)]] == ["tool_result"] * len(results)
            asked = set()
        else:
            assert not asked, f"unanswered: {asked}"
            asked = {b["id"] for b in blocks if b["type"] == "tool_use"}
    assert not asked


def test_a_full_disk_keeps_the_tool_result_with_a_notice(monkeypatch, picture_tool, home):
    import errno

    import silica.images.store as store_module

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_module, "write_atomic", full)
    notes = []
    with anthropic_server([tool_call("picture", {"label": "full"}), text("No picture."),
                           text("Still here.")]) as srv:
        srv.use(monkeypatch)
        agent = Agent.start(settings("anthropic"))
        agent.events.on_tool_note = lambda call, note: notes.append(note)
        assert run(agent, "draw") == "No picture."
        assert run(agent, "and now?") == "Still here."
    [result] = [b for b in srv.requests[1]["messages"][-1]["content"]
                if b["type"] == "tool_result"]
    texts = [b["text"] for b in result["content"]]
    assert '"label": "full"' in texts[0]
    assert texts[1].startswith("[image not kept:") and "No space left on device" in texts[1]
    for request in srv.requests:
        assert_every_call_answered(request)
    assert notes and "No space left on device" in notes[0]
    saved = load_session(agent.conversation.id, home)
    assert saved.messages[2].content[0].call_id == saved.messages[1].content[-1].id


def test_an_image_folder_that_is_a_file_keeps_the_tool_result(monkeypatch, picture_tool, home):
    with anthropic_server([tool_call("picture", {"label": "x"}), text("ok")]) as srv:
        srv.use(monkeypatch)
        agent = Agent.start(settings("anthropic"))
        (home / "images").mkdir(parents=True, exist_ok=True)
        (home / "images" / agent.conversation.id).write_text("in the way")
        assert run(agent, "draw") == "ok"
    assert_every_call_answered(srv.requests[1])
    assert "[image not kept:" in json.dumps(srv.requests[1]["messages"][-1])


def test_a_tool_call_that_crashes_inside_silica_is_answered(monkeypatch, user_tools):
    with anthropic_server([tool_call("anything", {}), text("fine")]) as srv:
        srv.use(monkeypatch)
        agent = Agent.start(settings("anthropic"))

        async def broken(name, arguments):
            raise RuntimeError("a bug")

        monkeypatch.setattr(agent.toolbox, "acall", broken)
        assert run(agent, "go") == "fine"
    [result] = srv.requests[1]["messages"][-1]["content"]
    assert result["is_error"] is True and "RuntimeError: a bug" in result["content"][0]["text"]


def test_a_session_cut_while_its_tools_ran_resumes_without_a_400(monkeypatch, home):
    from silica.agent.conversation import Conversation, ToolCall
    from silica.agent.sessions import save_session
    from silica.blocks import TextBlock

    cut = Conversation(id="cut", provider="anthropic")
    cut.add("user", [TextBlock(text="look")], new_turn=True)
    cut.add("assistant", [ToolCall(id="t1", name="look"), ToolCall(id="t2", name="look")])
    save_session(cut, home)
    with anthropic_server([text("sorry, again?")]) as srv:
        srv.use(monkeypatch)
        again = Agent.resume("cut", settings("anthropic"))
        assert run(again, "what happened?") == "sorry, again?"
    assert_every_call_answered(srv.requests[0])
    assert [m.role for m in load_session("cut", home).messages] == [
        "user", "assistant", "user", "user", "assistant"]


def test_a_failed_save_raises_and_the_agent_knows(monkeypatch, user_tools, home):
    from silica.agent.sessions import SessionError

    (home / "sessions.db").mkdir(parents=True)  # a folder where the database should be
    with anthropic_server([text("never")]) as srv:
        srv.use(monkeypatch)
        agent = Agent.start(settings("anthropic"))
        with pytest.raises(SessionError, match="cannot open the sessions database"):
            run(agent, "hello")
    assert agent.saved is False and srv.requests == []


# -- floods of output ---------------------------------------------------------------------


def test_a_flood_of_output_reaches_the_model_cut_and_is_saved_whole(monkeypatch, user_tools,
                                                                     home):
    body = "for i in range(60_000):\n    print(f'line {i:06d} of the flood')\n"
    script_tool(user_tools, "flood.py", simple_spec("flood"), body=body)
    with anthropic_server([tool_call("flood", {}), text("long")]) as srv:
        srv.use(monkeypatch)
        agent = Agent.start(settings("anthropic", max_result_chars=10_000))
        run(agent, "flood me")
    [result] = srv.requests[1]["messages"][-1]["content"]
    sent = "".join(b["text"] for b in result["content"])
    assert len(sent) < 10_400
    assert sent.startswith("line 000000 of the flood")
    assert sent.rstrip().endswith("line 059999 of the flood")
    [marker] = re.findall(r"\[… ([\d,]+) of ([\d,]+) characters cut; the whole output is in "
                          r"(\S+) …\]", sent)
    whole = Path(marker[2])
    assert whole.parent == home / "sessions" / agent.conversation.id
    assert whole.read_text().splitlines() == [f"line {i:06d} of the flood" for i in range(60_000)]
    assert int(marker[1].replace(",", "")) == len(whole.read_text())
    assert len(export_session(agent.conversation.id, home)) < 30_000


def test_undecodable_bytes_are_one_marker(monkeypatch, user_tools):
    body = ("import sys\nsys.stdout.buffer.write(b'start\\n' + b'\\xff' * 50_000 + "
            "b'\\nend\\n')\n")
    script_tool(user_tools, "binary.py", simple_spec("binary"), body=body)
    with anthropic_server([tool_call("binary", {}), text("bytes")]) as srv:
        srv.use(monkeypatch)
        run(Agent.start(settings("anthropic")), "go")
    [result] = srv.requests[1]["messages"][-1]["content"]
    sent = result["content"][0]["text"]
    assert sent == "start\n[… 50,000 undecodable bytes …]\nend\n"


def test_max_turns_under_one_sends_nothing(monkeypatch, user_tools, home):
    from silica.errors import SilicaError

    with anthropic_server([text("never")]) as srv:
        srv.use(monkeypatch)
        agent = Agent.start(settings("anthropic").model_copy(update={"max_turns": 0}))
        with pytest.raises(SilicaError, match="max_turns must be 1 or more"):
            run(agent, "hi")
    assert srv.requests == [] and not (home / "sessions").exists()
