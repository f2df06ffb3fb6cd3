"""Sessions: conversations saved as JSON with image refs, loaded back equal, listed."""

from __future__ import annotations

import io
import json
import os
import re
from datetime import UTC, datetime, timedelta

import pytest
from PIL import Image

from silica.agent.conversation import Conversation, ToolCall, ToolResultBlock
from silica.agent.sessions import (
    SessionError,
    list_sessions,
    load_session,
    new_session_id,
    save_session,
    sessions_dir,
)
from silica.blocks import ImageBlock, TextBlock
from silica.images.store import ImageStore, default_root


def screenshot_png() -> bytes:
    ramp = Image.linear_gradient("L").resize((800, 600))
    buf = io.BytesIO()
    Image.merge("RGB", (ramp, ramp.rotate(90), ramp)).save(buf, "PNG")
    return buf.getvalue()


def conversation_with_images(session_id: str | None = None, text: str = "what is on screen?"
                             ) -> Conversation:
    conversation = Conversation(id=session_id or new_session_id(), provider="anthropic",
                                model="claude-sonnet-4-5", system="be brief")
    store = ImageStore(default_root(), conversation.id)
    conversation.add("user", [TextBlock(text=text)], new_turn=True)
    conversation.add("assistant", [TextBlock(text="Let me look."),
                                   ToolCall(id="t1", name="screenshot", arguments={"x": 1})])
    png = screenshot_png()
    content = store.put_message([TextBlock(text="captured"),
                                 ImageBlock(media_type="image/png", data=png, width=800,
                                            height=600)], alt="screenshot")
    conversation.add("user", [ToolResultBlock(call_id="t1", name="screenshot",
                                              content=content)])
    conversation.add("assistant", [TextBlock(text="A gradient.")])
    conversation.add("user", [TextBlock(text="thanks")], new_turn=True)
    return conversation


def test_save_then_load_gives_the_same_conversation(home):
    conversation = conversation_with_images()
    path = save_session(conversation)
    assert path == home / "sessions" / f"{conversation.id}.json"
    assert load_session(conversation.id) == conversation


def test_saved_json_holds_refs_not_image_data(home):
    conversation = conversation_with_images()
    text = save_session(conversation).read_text(encoding="utf-8")
    assert not re.search(r"[A-Za-z0-9+/]{200,}", text)
    assert "iVBORw0KGgo" not in text  # the start of any base64 PNG
    assert '"image_ref"' in text
    assert len(text) < 5_000
    saved = json.loads(text)
    assert saved["format"] == "silica-session" and saved["version"] == 1


def test_saving_image_bytes_is_refused(home):
    conversation = conversation_with_images()
    conversation.messages[0].content.append(
        ImageBlock(media_type="image/png", data=screenshot_png(), width=800, height=600))
    with pytest.raises(SessionError, match="image bytes"):
        save_session(conversation)
    assert not sessions_dir().exists()


def test_saving_again_replaces_the_file_atomically(home):
    conversation = conversation_with_images()
    save_session(conversation)
    conversation.add("assistant", [TextBlock(text="anything else?")])
    save_session(conversation)
    assert [p.name for p in sessions_dir().iterdir()] == [f"{conversation.id}.json"]
    assert load_session(conversation.id).messages[-1].content[0].text == "anything else?"


def test_new_ids_are_valid_unique_and_sort_by_time():
    ids = [new_session_id() for _ in range(50)]
    assert len(set(ids)) == 50
    for session_id in ids:
        Conversation(id=session_id)  # fits the Conversation id pattern
        assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", session_id)
    stamp = datetime.now(UTC).strftime("%Y%m%d")
    assert ids[0][:8] in (stamp, (datetime.now(UTC) - timedelta(days=1)).strftime("%Y%m%d"))


def test_a_missing_session_says_how_to_find_one(home):
    with pytest.raises(SessionError, match=r"no session nope; run `silica sessions list`"):
        load_session("nope")


@pytest.mark.parametrize("bad", ["../config", "a/b", "/etc/passwd", "", "x" * 65, "a\x00b"])
def test_hostile_ids_are_refused(home, bad):
    with pytest.raises(SessionError, match="invalid session id"):
        load_session(bad)


@pytest.mark.parametrize("content, problem", [
    (b'{"format": "silica-session", "version": 1, "conv', "not valid JSON"),
    (b"\xff\xfe garbage", "not UTF-8"),
    (b'{"name": "some other program"}', "not a silica session file"),
    (b"[1, 2, 3]", "not a silica session file"),
    (b'{"format": "silica-session", "version": 99, "conversation": {}}', "version 99"),
    (b'{"format": "silica-session", "version": 1, "conversation": {"id": "x", '
     b'"messages": [{"role": "robot", "content": [], "turn": 1}]}}', "invalid conversation"),
])
def test_a_corrupt_file_gives_a_clear_error_and_is_left_alone(home, content, problem):
    folder = sessions_dir()
    folder.mkdir(parents=True)
    path = folder / "x.json"
    path.write_bytes(content)
    with pytest.raises(SessionError) as err:
        load_session("x")
    assert str(path) in str(err.value) and problem in str(err.value)
    assert path.read_bytes() == content


def test_a_file_holding_another_session_is_refused(home):
    conversation = conversation_with_images("first")
    path = save_session(conversation)
    path.rename(path.with_name("second.json"))
    with pytest.raises(SessionError, match="holds session 'first', not 'second'"):
        load_session("second")


def test_list_shows_sessions_newest_first_and_corrupt_files_with_their_problem(home):
    older = conversation_with_images("older", text="  first   question\nabout the screen  ")
    older.updated = datetime(2026, 1, 1, tzinfo=UTC)
    newer = conversation_with_images("newer", text="x" * 100)
    newer.updated = datetime(2026, 3, 1, tzinfo=UTC)
    save_session(older)
    save_session(newer)
    broken = sessions_dir() / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    stamp = datetime(2026, 2, 1, tzinfo=UTC).timestamp()
    os.utime(broken, (stamp, stamp))
    (sessions_dir() / ".tmp-abc.json").write_text("{}", encoding="utf-8")  # ignored

    found = {s.id: s for s in list_sessions()}
    assert list(found) == ["newer", "broken", "older"]  # broken: by its file's time
    assert found["broken"].updated == datetime(2026, 2, 1, tzinfo=UTC)
    assert "not valid JSON" in found["broken"].problem and found["broken"].created is None
    info = found["older"]
    assert (info.turns, info.messages, info.provider, info.model, info.problem) == (
        2, 5, "anthropic", "claude-sonnet-4-5", "")
    assert info.title == "first question about the screen"
    assert info.created == older.created and info.updated == older.updated
    assert len(found["newer"].title) == 60 and found["newer"].title.endswith("…")


def test_list_entries_dump_to_json(home):
    save_session(conversation_with_images("one"))
    [entry] = [s.model_dump(mode="json") for s in list_sessions()]
    assert entry["id"] == "one" and entry["path"].endswith("one.json")
    assert entry["updated"].startswith("20") and entry["problem"] == ""
    json.dumps(entry)


def test_list_with_no_sessions_is_empty(home):
    assert list_sessions() == []


def test_an_explicit_home_is_used(tmp_path):
    conversation = conversation_with_images()
    other = tmp_path / "elsewhere"
    path = save_session(conversation, home=other)
    assert path.parent == other / "sessions"
    assert load_session(conversation.id, home=other) == conversation
    assert [s.id for s in list_sessions(home=other)] == [conversation.id]
