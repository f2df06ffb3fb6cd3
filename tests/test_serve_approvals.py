"""Shell approvals in `silica serve`: a command outside `[shell] allow` waits for a person.

A real daemon (`python -m silica serve`) runs with `[shell] enabled` and `allow = ["echo
*"]`; the model is the suite's local Anthropic wire server, scripted to call `shell`. The
person answers over HTTP, over Socket.IO, or on the page in the real headless Chromium, and
what a command does is seen in its workspace (a file it makes appears, or does not).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from playwright.sync_api import Page, expect
from serve_daemon import (
    SioListener,
    SseReader,
    new_session,
    start_daemon,
)
from wire import WireServer, anthropic_server, text, tool_call

from silica.config import Settings, ShellSettings, ToolSettings
from silica.serve.approvals import DECISIONS, Approvals, Pending, read_answer
from silica.serve.errors import ApiError
from silica.tools.toolbox import Toolbox

expect.set_options(timeout=30_000)

TOKEN = "approvals-page-secret-0123456789"
REFUSED = "did not allow"  # what the model is told of a denied command (silica.tools.shell)
MAX_OPEN = 8  # silica.serve.approvals.MAX_OPEN


def home_with(tmp: Path, *, timeout: float | None = None) -> Path:
    home = tmp / "home"
    home.mkdir()
    serve = f"[serve]\napproval_timeout = {timeout}\n" if timeout is not None else ""
    (home / "config.toml").write_text(f'[shell]\nenabled = true\nallow = ["echo *"]\n{serve}')
    return home


def env_for(model: WireServer, home: Path) -> dict[str, str]:
    return {**model.env, "SILICA_PROVIDER": "anthropic", "SILICA_HOME": str(home),
            "SILICA_TOOLS_DIR": str(home / "tools")}


@pytest.fixture(scope="module")
def model() -> Iterator[WireServer]:
    with anthropic_server() as srv:
        yield srv


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("serve-approvals")


@pytest.fixture(scope="module")
def daemon(model, workspace):
    home = home_with(workspace)
    with start_daemon(home, env=env_for(model, home), cwd=workspace, token=TOKEN) as served:
        yield served


class Listener(SioListener):
    EVENTS = (*SioListener.EVENTS, "approval", "approval_done")


def results_of(events: list) -> list[dict]:
    return [d for n, d in events if n == "tool_result" and d["name"] == "shell"]


def named(events: list, name: str) -> list[dict]:
    return [d for n, d in events if n == name]


# -- the answer reader --------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=3),
    max_leaves=6)
BODIES = st.one_of(
    JSON_VALUES,
    st.dictionaries(st.sampled_from(["decision", "id", "Decision", ""]) | st.text(max_size=8),
                    st.sampled_from([*DECISIONS, "ONCE", "yes", ""]) | JSON_VALUES,
                    max_size=3))


@settings(max_examples=400, deadline=None)
@given(body=BODIES, pattern=st.sampled_from(["touch *", None]))
def test_any_answer_body_is_a_decision_or_a_clear_400_and_leaves_it_open(body, pattern):
    """``read_answer`` (the route's and Socket.IO's reader) then ``Approvals.answer``: any
    JSON value is one decision taken, or a 400 that says what to send and leaves the
    approval open."""
    loop = asyncio.new_event_loop()
    try:
        approvals = Approvals(Path("/nonexistent"), timeout=5)
        pending = Pending("a1", "s1", "t1", 1, "c1", "touch x", pattern, 5,
                          decision=loop.create_future())
        approvals.open["a1"] = pending
        try:
            approvals.answer("s1", "a1", read_answer(body))
        except ApiError as exc:
            assert exc.status == 400 and exc.message and not pending.decision.done()
            assert "decision" in exc.message or "always" in exc.message
            return
        assert isinstance(body, dict) and list(body) == ["decision"]
        assert pending.decision.result() == (body["decision"], "answered")
        assert body["decision"] != "always" or pattern is not None
    finally:
        loop.close()


def test_the_calls_clock_stops_while_the_person_is_asked(tmp_path):
    """The person's time to answer is not the tool's: an approval that takes longer than
    the whole call's timeout still lets the command run."""
    async def slow_yes(command: str) -> bool:
        await asyncio.sleep(6)
        return True

    box = Toolbox(cwd=tmp_path, settings=Settings(shell=ShellSettings(enabled=True),
                                                  tools=ToolSettings(timeout=5)))
    box.approve = slow_yes
    result = asyncio.run(box.acall("shell", {"command": "printf made && touch made.txt"}))
    assert not result.is_error, result.text
    assert "made" in result.text and (tmp_path / "made.txt").exists()


# -- the daemon over HTTP and Socket.IO ---------------------------------------------------


def test_run_once_runs_it_and_wrong_answers_are_refused(daemon, model, workspace):
    sid = new_session(daemon)
    model.script.clear()
    model.add(tool_call("shell", {"command": "touch once.txt && echo made"}), text("Done."))

    async def go():
        async with SseReader(daemon, sid) as sse, Listener(daemon, sid) as sio, \
                daemon.async_client() as http:
            posted = await http.post(f"/sessions/{sid}/messages", json={"message": "make it"})
            assert posted.status_code == 202
            [*before, (_, asked)] = await sse.until("approval")
            [*_, (_, heard)] = await sio.until("approval")
            assert heard == asked
            [call] = named(before, "tool_call")
            assert asked == {"turn_id": posted.json()["turn_id"], "call_id": call["call_id"],
                             "id": asked["id"], "event_id": asked["event_id"],
                             "command": "touch once.txt && echo made",
                             "pattern": "touch * && echo *", "timeout": 300}
            assert not (workspace / "once.txt").exists()  # it waits
            url = f"/sessions/{sid}/approvals/{asked['id']}"
            bad = await http.post(url, json={"decision": "yes"})
            assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_decision"
            extra = await http.post(url, json={"decision": "once", "why": "x"})
            assert extra.status_code == 400 and "why" in extra.json()["error"]["message"]
            empty = await http.post(url)
            assert empty.status_code == 400
            unknown = await http.post(f"/sessions/{sid}/approvals/nosuchid",
                                      json={"decision": "once"})
            assert unknown.status_code == 404
            assert unknown.json()["error"]["code"] == "no_approval"
            listed = (await http.get(f"/sessions/{sid}/history")).json()["approvals"]
            shown = {k: v for k, v in asked.items() if k != "event_id"}  # the event's own
            assert listed == [{"turn": 1, **shown, "decision": None, "reason": ""}]

            good = await http.post(url, json={"decision": "once"})
            assert good.status_code == 200, good.text
            assert good.json() == {"id": asked["id"], "decision": "once"}
            [*_, (_, done)] = await sse.until("approval_done")
            [*_, (_, done_sio)] = await sio.until("approval_done")
            assert done == done_sio == {"turn_id": asked["turn_id"], "id": asked["id"],
                                        "decision": "once", "reason": "answered",
                                        "event_id": done["event_id"]}
            events = await sse.until("turn_end")
            again = await http.post(url, json={"decision": "deny"})
            assert again.status_code == 409
            assert again.json()["error"]["code"] == "approval_answered"
            history = (await http.get(f"/sessions/{sid}/history")).json()
            return asked, events, history

    asked, events, history = asyncio.run(go())
    [result] = results_of(events)
    assert not result["is_error"] and "made" in result["text"]
    assert (workspace / "once.txt").exists()
    [saved] = history["approvals"]
    del asked["event_id"]  # the event's, not the approval's
    assert saved == {"turn": 1, **asked, "decision": "once", "reason": "answered"}


def test_deny_does_not_run_it_and_always_is_not_offered_for_a_redirection(
        daemon, model, workspace):
    sid = new_session(daemon)
    model.script.clear()
    model.add(tool_call("shell", {"command": "touch denied.txt > /dev/null"}), text("Ok."))

    async def go():
        async with SseReader(daemon, sid) as sse, daemon.async_client() as http:
            await http.post(f"/sessions/{sid}/messages", json={"message": "make it"})
            [*_, (_, asked)] = await sse.until("approval")
            assert asked["pattern"] is None  # a redirection: each one is asked about
            url = f"/sessions/{sid}/approvals/{asked['id']}"
            always = await http.post(url, json={"decision": "always"})
            assert always.status_code == 400
            assert always.json()["error"]["code"] == "always_not_offered"
            denied = await http.post(url, json={"decision": "deny"})
            assert denied.status_code == 200
            return await sse.until("turn_end")

    events = asyncio.run(go())
    [done] = named(events, "approval_done")
    assert done["decision"] == "deny" and done["reason"] == "answered"
    [result] = results_of(events)
    assert result["is_error"] and REFUSED in result["text"]
    assert not (workspace / "denied.txt").exists()


def test_always_lets_the_same_program_run_but_another_program_still_asks(
        daemon, model, workspace):
    sid = new_session(daemon)
    model.script.clear()
    model.add(tool_call("shell", {"command": "touch first.txt"}),
              tool_call("shell", {"command": "touch second.txt"}),
              tool_call("shell", {"command": "mkdir third"}), text("All done."))

    async def go():
        async with SseReader(daemon, sid) as sse, daemon.async_client() as http:
            await http.post(f"/sessions/{sid}/messages", json={"message": "go"})
            [*_, (_, first)] = await sse.until("approval")
            assert first["pattern"] == "touch *"
            sent = await http.post(f"/sessions/{sid}/approvals/{first['id']}",
                                   json={"decision": "always"})
            assert sent.status_code == 200
            between = await sse.until("approval")
            third = between[-1][1]
            assert third["command"] == "mkdir third" and third["pattern"] == "mkdir *"
            await http.post(f"/sessions/{sid}/approvals/{third['id']}",
                            json={"decision": "deny"})
            return between, await sse.until("turn_end")

    between, events = asyncio.run(go())
    assert (workspace / "first.txt").exists() and (workspace / "second.txt").exists()
    assert not (workspace / "third").exists()
    # the second touch ran without being shown to anyone
    assert [d["command"] for d in named(between, "approval")] == ["mkdir third"]
    results = results_of(between + events)
    assert [r["is_error"] for r in results] == [False, False, True]


def test_more_open_than_allowed_are_denied_and_one_always_lets_the_open_ones_run(
        daemon, model, workspace):
    """One reply calls the shell MAX_OPEN + 1 times at once: MAX_OPEN requests are shown,
    the one past them is denied unseen, and "always" on one lets the others it covers run
    (``covered``)."""
    sid = new_session(daemon)
    model.script.clear()
    calls = [tool_call("shell", {"command": f"touch many-{i}.txt"}) for i in range(MAX_OPEN + 1)]
    reply = calls[0]
    for call in calls[1:]:
        reply = reply + call
    model.add(reply, text("Many."))

    async def go():
        async with SseReader(daemon, sid) as sse, daemon.async_client() as http:
            await http.post(f"/sessions/{sid}/messages", json={"message": "many"})
            asked = []
            while len(asked) < MAX_OPEN:
                [*_, (_, one)] = await sse.until("approval")
                asked.append(one)
            sent = await http.post(f"/sessions/{sid}/approvals/{asked[0]['id']}",
                                   json={"decision": "always"})
            assert sent.status_code == 200
            return asked, await sse.until("turn_end")

    asked, events = asyncio.run(go())
    assert not named(events, "approval")  # none past the first MAX_OPEN was shown
    done = {d["id"]: (d["decision"], d["reason"]) for d in named(events, "approval_done")}
    assert done == {a["id"]: ("always", "answered") if a is asked[0] else ("once", "covered")
                    for a in asked}
    made = sorted(f.name for f in workspace.glob("many-*.txt"))
    assert len(made) == MAX_OPEN
    results = results_of(events)
    assert sorted(r["is_error"] for r in results) == [False] * MAX_OPEN + [True]


def test_socketio_answers_once_a_client_has_joined(daemon, model, workspace):
    sid = new_session(daemon)
    other = new_session(daemon)
    model.script.clear()
    model.add(tool_call("shell", {"command": "touch by-socket.txt"}), text("Fine."))

    async def go():
        async with SseReader(daemon, sid) as sse, Listener(daemon, other) as stranger, \
                Listener(daemon, sid) as sio, daemon.async_client() as http:
            await http.post(f"/sessions/{sid}/messages", json={"message": "make it"})
            [*_, (_, asked)] = await sio.until("approval")
            refused = await stranger.client.call("approval_answer", {
                "session_id": sid, "id": asked["id"], "decision": "once"},
                namespace="/events", timeout=30)
            assert refused["error"]["code"] == "not_joined"
            bad = await sio.client.call("approval_answer", {
                "session_id": sid, "id": asked["id"], "decision": "sure"},
                namespace="/events", timeout=30)
            assert bad["error"]["code"] == "invalid_decision"
            ack = await sio.client.call("approval_answer", {
                "session_id": sid, "id": asked["id"], "decision": "once"},
                namespace="/events", timeout=30)
            assert ack == {"ok": True, "id": asked["id"], "decision": "once"}
            return await sse.until("turn_end")

    events = asyncio.run(go())
    assert named(events, "approval_done")[0]["decision"] == "once"
    assert (workspace / "by-socket.txt").exists()


def test_nobody_answering_denies_at_the_timeout_and_a_late_answer_is_gone(model, tmp_path):
    home = home_with(tmp_path, timeout=1)
    with start_daemon(home, env=env_for(model, home), cwd=tmp_path) as daemon:
        sid = new_session(daemon)
        model.script.clear()
        model.add(tool_call("shell", {"command": "touch late.txt"}), text("Nobody there."))

        async def go():
            async with SseReader(daemon, sid) as sse, daemon.async_client() as http:
                await http.post(f"/sessions/{sid}/messages", json={"message": "make it"})
                [*_, (_, asked)] = await sse.until("approval")
                events = await sse.until("turn_end")
                late = await http.post(f"/sessions/{sid}/approvals/{asked['id']}",
                                       json={"decision": "once"})
                return asked, events, late

        asked, events, late = asyncio.run(go())
    assert asked["timeout"] == 1
    [done] = named(events, "approval_done")
    assert done == {"turn_id": asked["turn_id"], "id": asked["id"], "decision": "deny",
                    "reason": "timeout", "event_id": done["event_id"]}
    assert results_of(events)[0]["is_error"]
    assert not (tmp_path / "late.txt").exists()
    assert late.status_code == 404 and late.json()["error"]["code"] == "approval_gone"


def test_a_turn_stopped_with_its_daemon_is_denied_and_shown_so_after_a_restart(model, tmp_path):
    home = home_with(tmp_path)
    env = env_for(model, home)
    with start_daemon(home, env=env, cwd=tmp_path) as daemon:
        sid = new_session(daemon)
        model.script.clear()
        model.add(tool_call("shell", {"command": "touch stopped.txt"}), text("unused"))

        async def go():
            async with SseReader(daemon, sid) as sse, daemon.async_client() as http:
                await http.post(f"/sessions/{sid}/messages", json={"message": "make it"})
                [*_, (_, asked)] = await sse.until("approval")
                await asyncio.to_thread(daemon.stop)
                return asked, await sse.until("approval_done")

        asked, events = asyncio.run(go())
    assert events[-1][1]["decision"] == "deny" and events[-1][1]["reason"] == "turn ended"
    model.script.clear()
    model.add(text("Still here."))
    with start_daemon(home, env=env, cwd=tmp_path) as daemon, daemon.client() as http:
        gone = http.post(f"/sessions/{sid}/approvals/{asked['id']}", json={"decision": "once"})
        history = http.get(f"/sessions/{sid}/history").json()
        after = http.post(f"/sessions/{sid}/messages?wait=true", json={"message": "go on"})
    assert after.status_code == 200 and after.json()["text"] == "Still here."  # usable
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "approval_gone"
    assert "turn ended" in gone.json()["error"]["message"]
    [saved] = history["approvals"]
    assert saved["id"] == asked["id"] and saved["decision"] == "deny"
    assert not (tmp_path / "stopped.txt").exists()


def test_a_second_daemon_over_redis_shows_the_request_and_its_answer_reaches_the_asking_one(
        model, tmp_path):
    from redis_server import RedisServer

    home = home_with(tmp_path)
    env = env_for(model, home)
    server = RedisServer(tmp_path / "redis").start()
    try:
        with start_daemon(home, env=env, args=["--redis", server.url], cwd=tmp_path) as a, \
                start_daemon(home, env=env, args=["--redis", server.url], cwd=tmp_path) as b:
            sid = new_session(a)
            model.script.clear()
            model.add(tool_call("shell", {"command": "touch over-redis.txt"}), text("Done."))

            async def go():
                async with SseReader(a, sid) as sse, Listener(a, sid) as sio, \
                        a.async_client() as at_a, b.async_client() as at_b:
                    await at_b.post(f"/sessions/{sid}/messages", json={"message": "make it"})
                    [*_, (_, asked)] = await sse.until("approval")
                    [*_, (_, heard)] = await sio.until("approval")
                    assert heard == asked
                    url = f"/sessions/{sid}/approvals/{asked['id']}"
                    # answered at A, it reaches B (whose turn asked) through Redis
                    sent = await at_a.post(url, json={"decision": "once"})
                    assert sent.status_code == 200, sent.text
                    [*_, (_, done)] = await sio.until("approval_done")
                    again = await at_b.post(url, json={"decision": "once"})
                    assert again.status_code == 409, again.text
                    assert again.json()["error"]["code"] == "approval_answered"
                    return asked, done, await sse.until("turn_end")

            asked, done, events = asyncio.run(go())
    finally:
        server.stop()
    assert done == {"turn_id": asked["turn_id"], "id": asked["id"], "decision": "once",
                    "reason": "answered", "event_id": done["event_id"]}
    assert not results_of(events)[0]["is_error"]
    assert (tmp_path / "over-redis.txt").exists()


# -- the page -----------------------------------------------------------------------------


@pytest.fixture
def page(browser, daemon, model) -> Iterator[Page]:
    """A tab on the daemon (in through the printed link); fails on any script error."""
    model.script.clear()
    context = browser.new_context(base_url=daemon.url)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))

    def dialog(opened) -> None:  # an alert() the page ran: a script that should not have
        errors.append(f"a dialog opened: {opened.message}")
        opened.dismiss()

    tab.on("dialog", dialog)
    tab.goto(f"/?token={TOKEN}")
    yield tab
    context.close()
    assert not errors, errors


def open_session(page: Page, daemon) -> str:
    sid = new_session(daemon)
    page.goto(f"/#{sid}")
    expect(page.get_by_role("textbox", name="Message")).to_be_visible()
    return sid


def send(page: Page, message: str) -> None:
    box = page.get_by_role("textbox", name="Message")
    box.fill(message)
    box.press("Enter")


def test_the_page_asks_and_run_once_lets_the_turn_finish_with_the_output(
        page, daemon, model, workspace):
    open_session(page, daemon)
    model.add(tool_call("shell", {"command": "printf 'page said hi' && touch page.txt"}),
              text("It ran."))
    send(page, "run it")
    request = page.locator("form.approval")
    expect(request.locator("pre.command")).to_have_text(
        "printf 'page said hi' && touch page.txt")
    expect(request.locator("code.pattern")).to_have_text("printf * && touch *")
    expect(request.get_by_role("button", name="Always for this pattern")).to_be_visible()
    expect(request.get_by_role("button", name="Deny")).to_be_visible()
    expect(page.locator("details.tool > summary")).to_contain_text("waiting for your approval")
    assert not (workspace / "page.txt").exists()
    request.get_by_role("button", name="Run once").click()
    expect(page.locator(".approval-done")).to_contain_text("ran once")
    expect(page.locator("details.tool .output")).to_contain_text("page said hi")
    expect(page.locator(".msg.assistant").last).to_contain_text("It ran.")
    assert (workspace / "page.txt").exists()
    page.reload()  # the history shows it answered, in the tool's box
    expect(page.locator("details.tool .approval-done")).to_contain_text("ran once")
    expect(page.locator("form.approval")).to_have_count(0)


def test_the_page_shows_a_hostile_command_as_text_and_deny_refuses_it(
        page, daemon, model, workspace):
    open_session(page, daemon)
    command = ("echo '<img src=x onerror=alert(1)><b>bold</b>' && touch evil.txt"
               " \x1b[2K\u202e # hidden")
    model.add(tool_call("shell", {"command": command}), text("Refused, fine."))
    send(page, "run this")
    request = page.locator("form.approval")
    shown = request.locator("pre.command")
    expect(shown).to_have_text("echo '<img src=x onerror=alert(1)><b>bold</b>' && touch "
                               "evil.txt \\u{001b}[2K\\u{202e} # hidden")
    expect(request.locator("img, b")).to_have_count(0)
    request.get_by_role("button", name="Deny").click()
    expect(page.locator(".approval-done")).to_contain_text("denied")
    expect(page.locator(".msg.assistant").last).to_contain_text("Refused, fine.")
    assert not (workspace / "evil.txt").exists()
