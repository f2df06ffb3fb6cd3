"""Sessions that never break, floods that stay out of the history, and the papercuts around
them, as a user meets them: the real ``silica`` command, real files, a local wire server."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import script_tool, simple_spec
from wire import anthropic_server, text, tool_call

from silica.agent.conversation import Conversation
from silica.agent.sessions import list_sessions, save_session, session_folder, sessions_dir
from silica.blocks import TextBlock, ToolCall, ToolResult

REPO = Path(__file__).resolve().parent.parent


def silica(*args: str, env: dict[str, str] | None = None, stdin: str = ""):
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          text=True, env=env or os.environ.copy(), input=stdin, timeout=300)


def saved_ids() -> list[str]:
    return [s.id for s in list_sessions()]


def no_traceback(done: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in done.stderr, done.stderr


def answered(session_id: str, text_: str = "hi") -> Conversation:
    conversation = Conversation(id=session_id, provider="anthropic", model="m")
    conversation.add("user", [TextBlock(text=text_)], new_turn=True)
    conversation.add("assistant", [TextBlock(text="hello")])
    return conversation


# -- 1. a save that fails says so ----------------------------------------------------------


def test_ask_whose_session_cannot_be_saved_says_so_and_advises_no_resume(home):
    (home / "sessions.db").mkdir(parents=True)  # a folder where the database should be
    with anthropic_server([text("never sent")]) as srv:
        done = silica("ask", "hello", env={**os.environ, **srv.env})
    no_traceback(done)
    assert done.returncode == 1 and srv.requests == []
    assert "cannot open the sessions database" in done.stderr and "sessions.db" in done.stderr
    assert "continue:" not in done.stderr and "--resume" not in done.stderr


# -- 3. the terminal view is bounded -------------------------------------------------------


def test_a_flood_of_failing_output_shows_its_start_and_where_the_rest_is(capsys, home):
    from silica.cli.show import show_result

    lines = [f"error {i}: something failed at step {i}" for i in range(120_000)]
    flood = "\n".join(lines)  # about 4.5 MB
    show_result(ToolResult(blocks=[TextBlock(text=flood)], is_error=True), [], images="off")
    shown = capsys.readouterr().err
    assert len(shown) < 4_000 and shown.startswith("error 0: something failed at step 0\n")
    assert "error 39:" in shown and "error 40:" not in shown
    [(left, where)] = re.findall(r"\[… ([\d,]+) more characters not shown; all of it is in "
                                 r"(\S+)\]", shown)
    assert Path(where).read_text() == flood
    assert int(left.replace(",", "")) == len(flood) - len("\n".join(lines[:40]))


def test_tools_run_of_a_flooding_tool_prints_a_bounded_view(user_tools):
    body = ("import sys\nfor i in range(100_000):\n    print(f'noise {i}')\n"
            "sys.stdout.buffer.write(b'\\xfe' * 500_000)\nsys.exit(3)\n")
    script_tool(user_tools, "noisy.py", simple_spec("noisy"), body=body)
    done = silica("tools", "run", "noisy")
    no_traceback(done)
    assert done.returncode == 1
    assert done.stderr.startswith("noise 0\n") and len(done.stderr) < 6_000
    assert "exited with code 3" in done.stderr  # the last block, the tool's problems, shown
    [where] = re.findall(r"all of it is in (\S+)\]", done.stderr)
    whole = Path(where).read_text()
    assert whole.startswith("noise 0\n") and "noise 99999\n" in whole
    assert "[… 500,000 undecodable bytes …]" in whole


# -- 4. a turn that never reached the model leaves nothing to resume -----------------------


def test_ask_with_a_bad_image_leaves_no_session(tmp_path, home):
    bad = tmp_path / "notes.png"
    bad.write_text("not an image")
    with anthropic_server([text("never")]) as srv:
        done = silica("ask", "look", "--image", str(bad), env={**os.environ, **srv.env})
    no_traceback(done)
    assert done.returncode == 1 and "not in any image format" in done.stderr
    assert "continue:" not in done.stderr and "nothing saved" in done.stderr
    assert srv.requests == [] and saved_ids() == []


def test_ask_without_an_api_key_leaves_no_session(home):
    with anthropic_server([text("never")]) as srv:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
        done = silica("ask", "hello", env={**env, "ANTHROPIC_BASE_URL": srv.base_url})
    no_traceback(done)
    assert done.returncode == 1 and "ANTHROPIC_API_KEY" in done.stderr
    assert "continue:" not in done.stderr and "--resume" not in done.stderr
    assert saved_ids() == [] and not list(home.glob("images/*"))


# -- 5. silica sessions delete -------------------------------------------------------------


def test_sessions_delete_by_id_removes_file_outputs_and_images_and_says_so(home):
    save_session(answered("doomed"))
    save_session(answered("spared"))
    session_folder("doomed").mkdir(parents=True)
    (session_folder("doomed") / "flood-0123456789abcdef.txt").write_text("everything")
    images = home / "images" / "doomed"
    images.mkdir(parents=True)
    (images / ("a" * 64 + ".png")).write_bytes(b"png")
    done = silica("sessions", "delete", "doomed", "--json")
    assert done.returncode == 0, done.stderr
    [entry] = json.loads(done.stdout)
    assert entry["id"] == "doomed"
    assert entry["removed"] == [str(session_folder("doomed")), str(images)]
    assert saved_ids() == ["spared"] and not images.exists()


def test_sessions_delete_of_an_unknown_id_is_a_clear_error(home):
    save_session(answered("here"))
    done = silica("sessions", "delete", "here", "nope")
    no_traceback(done)
    assert done.returncode == 1
    assert "no session nope" in done.stderr and "silica sessions list" in done.stderr
    assert saved_ids() == ["here"]
    refused = silica("sessions", "delete")
    assert refused.returncode == 2 and "say what to delete" in refused.stderr


def test_sessions_delete_empty_and_older_than(home):
    old = answered("old")
    old.updated = datetime.now(UTC) - timedelta(days=90)
    save_session(old)
    save_session(answered("recent"))
    unanswered = Conversation(id="unanswered")
    unanswered.add("user", [TextBlock(text="anyone?")], new_turn=True)
    save_session(unanswered)
    empty = silica("sessions", "delete", "--empty", "--json")
    assert empty.returncode == 0, empty.stderr
    assert [d["id"] for d in json.loads(empty.stdout)] == ["unanswered"]
    aged = silica("sessions", "delete", "--older-than", "30")
    assert aged.returncode == 0 and "deleted session old" in aged.stdout
    assert saved_ids() == ["recent"]
    negative = silica("sessions", "delete", "--older-than", "-1")
    assert negative.returncode == 2 and "0 or more" in negative.stderr


# -- 6. a file nested past what can be read ------------------------------------------------


def test_sessions_list_shows_a_deeply_nested_file_as_one_bad_row(home):
    save_session(answered("good", "a fine question"))
    sessions_dir().mkdir(parents=True, exist_ok=True)
    (sessions_dir() / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    done = silica("sessions", "list", "--json")
    no_traceback(done)
    assert done.returncode == 0
    rows = {r["id"]: r for r in json.loads(done.stdout)}
    assert set(rows) == {"good", "deep"} and "nested too deeply" in rows["deep"]["problem"]
    table = silica("sessions", "list")
    assert table.returncode == 0 and "a fine question" in table.stdout
    assert "unreadable" in table.stdout


# -- 7. an images folder that is a file ----------------------------------------------------


@pytest.mark.parametrize("command", [["ask", "hi"], ["chat"]])
def test_an_images_path_that_is_a_file_is_a_clear_error(home, command):
    home.mkdir(parents=True, exist_ok=True)
    (home / "images").write_text("oops")
    with anthropic_server([text("never")]) as srv:
        done = silica(*command, env={**os.environ, **srv.env}, stdin="hi\n/exit\n")
    no_traceback(done)
    assert done.returncode == 1
    assert f"{home / 'images'} is a file, not a folder" in done.stderr
    assert "Move that file away" in done.stderr and srv.requests == []


# -- 8. --max-turns under one --------------------------------------------------------------


@pytest.mark.parametrize("command", [["ask", "hi"], ["chat"]])
@pytest.mark.parametrize("turns", ["0", "-2"])
def test_max_turns_under_one_is_refused(home, command, turns):
    with anthropic_server([text("never")]) as srv:
        done = silica(*command, "--max-turns", turns, env={**os.environ, **srv.env},
                      stdin="hi\n")
    no_traceback(done)
    assert done.returncode == 2
    assert "--max-turns must be 1 or more" in done.stderr and turns in done.stderr
    assert srv.requests == [] and saved_ids() == []


# -- 9. words on either side of a tool call, redirected ------------------------------------


def test_text_around_a_tool_call_is_kept_apart_on_redirected_stdout(user_tools):
    script_tool(user_tools, "ping.py", simple_spec("ping"), body="print('pong')")
    with anthropic_server([text("Let me check.") + tool_call("ping", {}),
                           text("It answered pong.")]) as srv:
        done = silica("ask", "is it up?", env={**os.environ, **srv.env})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Let me check.\nIt answered pong.\n"


# -- 10. chat commands ---------------------------------------------------------------------


def test_chat_help_lists_the_commands_and_asks_the_model_nothing(home):
    with anthropic_server([text("never")]) as srv:
        done = silica("chat", env={**os.environ, **srv.env}, stdin="/help\n/hlep\n/exit\n")
    assert done.returncode == 0, done.stderr
    for command in ("/help", "/exit", "/quit", "Ctrl-C"):
        assert command in done.stderr
    assert "unknown command /hlep" in done.stderr
    assert srv.requests == [] and saved_ids() == []
    assert "nothing saved" in done.stderr


# -- 11. the providers layer does not reach up into the agent ------------------------------


def test_providers_import_nothing_from_the_agent():
    for path in sorted((REPO / "silica" / "providers").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.startswith("silica.agent") for n in names), path.name


def test_tool_call_is_one_class_wherever_it_is_imported_from():
    from silica.agent import conversation
    from silica.providers import base

    assert conversation.ToolCall is ToolCall
    assert base.Reply(tool_calls=[ToolCall(id="x", name="y")]).tool_calls[0].name == "y"
