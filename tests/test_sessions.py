"""Sessions: conversations saved as JSON with image refs, loaded back equal, listed; session
files left from before the database are listed with their problem."""

from __future__ import annotations

import io
import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from silica.agent.conversation import Conversation, ToolCall, ToolResultBlock
from silica.agent.sessions import (
    SessionError,
    export_session,
    list_sessions,
    load_session,
    new_session_id,
    save_session,
    session_version,
    sessions_dir,
    title,
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


def leftover(name: str) -> Path:
    """A session file in the sessions folder, as earlier versions kept them."""
    sessions_dir().mkdir(parents=True, exist_ok=True)
    return sessions_dir() / name


def test_save_then_load_gives_the_same_conversation(home):
    conversation = conversation_with_images()
    version = save_session(conversation)
    assert session_version(conversation.id) == version
    assert (home / "sessions.db").is_file()
    assert load_session(conversation.id) == conversation


def test_the_database_is_private_like_the_files_were(home):
    save_session(conversation_with_images())
    for name in ("sessions.db", "sessions.db-wal"):
        assert (home / name).stat().st_mode & 0o777 == 0o600, name


def test_saved_json_holds_refs_not_image_data(home):
    conversation = conversation_with_images()
    save_session(conversation)
    text = export_session(conversation.id).decode("utf-8")
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
    assert list_sessions() == [] and not sessions_dir().exists()


def test_saving_again_replaces_the_session(home):
    conversation = conversation_with_images()
    first = save_session(conversation)
    conversation.add("assistant", [TextBlock(text="anything else?")])
    second = save_session(conversation)
    assert first != second == session_version(conversation.id)
    assert [s.id for s in list_sessions()] == [conversation.id]
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
    path = leftover("x.json")
    path.write_bytes(content)
    with pytest.raises(SessionError) as err:
        load_session("x")
    assert str(path) in str(err.value) and problem in str(err.value)
    assert path.read_bytes() == content


def test_a_file_holding_another_session_is_refused(home):
    save_session(conversation_with_images("first"))
    leftover("second.json").write_bytes(export_session("first"))
    with pytest.raises(SessionError, match="holds session 'first', not 'second'"):
        load_session("second")


def test_list_shows_sessions_newest_first_and_corrupt_files_with_their_problem(home):
    older = conversation_with_images("older", text="  first   question\nabout the screen  ")
    older.updated = datetime(2026, 1, 1, tzinfo=UTC)
    newer = conversation_with_images("newer", text="x" * 100)
    newer.updated = datetime(2026, 3, 1, tzinfo=UTC)
    save_session(older)
    save_session(newer)
    broken = leftover("broken.json")
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
    assert entry["id"] == "one" and entry["path"].endswith("sessions.db")
    assert entry["updated"].startswith("20") and entry["problem"] == ""
    json.dumps(entry)


def test_list_with_no_sessions_is_empty(home):
    assert list_sessions() == []


def test_an_explicit_home_is_used(tmp_path):
    conversation = conversation_with_images()
    other = tmp_path / "elsewhere"
    save_session(conversation, home=other)
    assert (other / "sessions.db").is_file()
    assert load_session(conversation.id, home=other) == conversation
    assert [s.id for s in list_sessions(home=other)] == [conversation.id]


# -- every tool call answered, whatever the file holds ------------------------------------


def unanswered_conversation(session_id: str = "cut") -> Conversation:
    """What a session file holds when silica was stopped while its tools ran."""
    conversation = Conversation(id=session_id, provider="anthropic", model="m")
    conversation.add("user", [TextBlock(text="look twice")], new_turn=True)
    conversation.add("assistant", [TextBlock(text="Looking."),
                                   ToolCall(id="a", name="look"), ToolCall(id="b", name="look")])
    conversation.add("user", [ToolResultBlock(call_id="a", name="look",
                                              content=[TextBlock(text="seen")])])
    conversation.add("assistant", [ToolCall(id="c", name="look")])
    return conversation


def test_a_tool_call_saved_without_its_result_is_answered_on_load(home):
    from silica.agent.conversation import NO_RESULT

    version = save_session(unanswered_conversation())
    before = export_session("cut")
    loaded = load_session("cut")
    assert export_session("cut") == before  # repaired in memory; saved with the next turn
    assert session_version("cut") == version
    roles = [m.role for m in loaded.messages]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    first = loaded.messages[2].content
    assert [(b.call_id, b.is_error) for b in first] == [("b", True), ("a", False)]
    assert first[0].content[0].text == NO_RESULT
    [last] = loaded.messages[4].content
    assert (last.call_id, last.is_error, last.content[0].text) == ("c", True, NO_RESULT)
    assert loaded.messages[4].turn == loaded.messages[3].turn


def test_answering_every_call_is_idempotent_and_turns_orphans_into_text():
    from silica.agent.conversation import answer_every_call

    conversation = unanswered_conversation()
    conversation.add("assistant", [TextBlock(text="done")])
    conversation.add("user", [ToolResultBlock(call_id="ghost", name="look",
                                              content=[TextBlock(text="late")])])
    assert answer_every_call(conversation) == 3  # b, c, and the orphan
    orphan = conversation.messages[-1].content[0]
    assert isinstance(orphan, TextBlock) and "late" in orphan.text
    again = conversation.model_copy(deep=True)
    assert answer_every_call(conversation) == 0 and conversation == again


def test_a_file_nested_too_deep_is_one_bad_row_not_a_crash(home):
    save_session(conversation_with_images("fine"))
    deep = leftover("deep.json")
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    nested = sessions_dir() / "nested.json"
    nested.write_text('{"format": "silica-session", "version": 1, "conversation": '
                      + '{"a": ' * 100_000 + "1" + "}" * 100_001, encoding="utf-8")
    rows = {s.id: s for s in list_sessions()}
    assert set(rows) == {"fine", "deep", "nested"}
    assert "nested too deeply" in rows["deep"].problem
    assert "nested too deeply" in rows["nested"].problem and rows["fine"].problem == ""
    with pytest.raises(SessionError, match="nested too deeply"):
        load_session("deep")


def test_text_with_a_lone_surrogate_saves_and_loads_back(home):
    conversation = conversation_with_images("odd")
    conversation.add("assistant", [TextBlock(text="half a pair: \udc80!")])
    save_session(conversation)
    assert load_session("odd").messages[-1].content[0].text == "half a pair: \udc80!"


# -- deleting -----------------------------------------------------------------------------


def test_delete_removes_the_file_its_outputs_and_its_images(home):
    from silica.agent.sessions import delete_session, session_folder

    conversation = conversation_with_images("gone")
    save_session(conversation)
    save_session(conversation_with_images("kept"))
    session_folder("gone").mkdir(parents=True)
    (session_folder("gone") / "look-0123.txt").write_text("all of it")
    deleted = delete_session("gone")
    assert deleted.id == "gone"
    assert deleted.removed == [sessions_dir() / "gone", home / "images" / "gone"]
    assert not any(p.exists() for p in deleted.removed)
    assert [s.id for s in list_sessions()] == ["kept"]
    assert (home / "images" / "kept").is_dir()


def test_deleting_an_unknown_session_removes_nothing(home):
    from silica.agent.sessions import delete_sessions

    save_session(conversation_with_images("here"))
    with pytest.raises(SessionError, match="no session nope.*nothing was deleted"):
        delete_sessions(["here", "nope"])
    assert [s.id for s in list_sessions()] == ["here"]


def test_find_sessions_by_emptiness_and_age(home):
    from silica.agent.sessions import find_sessions

    old = conversation_with_images("old")
    old.updated = datetime.now(UTC) - timedelta(days=40)
    save_session(old)
    save_session(conversation_with_images("new"))
    lonely = Conversation(id="lonely")
    lonely.add("user", [TextBlock(text="hello?")], new_turn=True)
    save_session(lonely)
    leftover("broken.json").write_text("{", encoding="utf-8")
    assert [s.id for s in find_sessions(empty=True)] == ["lonely"]
    assert [s.id for s in find_sessions(older_than=30)] == ["old"]
    assert find_sessions(empty=True, older_than=30) == []


@given(st.text(alphabet=st.sampled_from("ab \n\t.é"), max_size=200))
def test_a_title_is_one_line_of_the_first_message_cut_at_a_word(typed):
    conversation = Conversation(id="titled")
    conversation.add("user", [TextBlock(text=typed)], new_turn=True)
    words = " ".join(typed.split())
    name = title(conversation)
    assert "\n" not in name and "\t" not in name and len(name) <= 60
    if len(words) <= 60:
        assert name == words
    else:
        kept = name.removesuffix("…")
        assert name.endswith("…") and words.startswith(kept) and kept == kept.strip()
        assert words[len(kept)] == " " or len(kept) >= 29  # a whole word, unless too long


def test_a_long_title_ends_on_a_whole_word():
    conversation = Conversation(id="titled")
    conversation.add("user", [TextBlock(text="Plot the monthly sales\nof 2026   for the "
                                             "board meeting next Tuesday, please")],
                     new_turn=True)
    assert title(conversation) == "Plot the monthly sales of 2026 for the board meeting next…"


def test_a_session_of_images_only_is_named_after_its_first_image(home):
    conversation = Conversation(id="pictures")
    store = ImageStore(default_root(), conversation.id)
    shot = ImageBlock(media_type="image/png", data=screenshot_png(), width=800, height=600)
    conversation.add("user", store.put_message([shot], alt="shot\nof the\tscreen.png"),
                     new_turn=True)
    assert title(conversation) == "Image: shot of the screen.png"
    assert title(Conversation(id="empty")) == ""
