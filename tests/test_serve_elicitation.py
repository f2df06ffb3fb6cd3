"""Elicitation in `silica serve`: a tool asks the person for values while its turn runs.

A real daemon (`python -m silica serve`) runs in a subprocess with a plugin (an entry point on
its PYTHONPATH) that registers the built-in tool `probe`: it puts `many` requests for values
to its `ToolContext.elicit` at once and answers with what it got back, as JSON. The model is
the suite's local Anthropic wire server, scripted to call `probe`. The person answers over
HTTP, over Socket.IO, or on the page in the real headless Chromium.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from playwright.sync_api import Browser, Page, expect
from serve_daemon import (
    SioListener,
    SseReader,
    new_session,
    start_daemon,
)
from wire import WireServer, anthropic_server, text, tool_call

from silica.elicitation import Elicitation
from silica.mcp.elicit import check_answer, check_request
from silica.serve.asking import Elicitations, Open
from silica.serve.errors import ApiError

expect.set_options(timeout=30_000)

TOKEN = "elicit-page-secret-0123456789"
MAX_OPEN = 8  # silica.serve.asking.MAX_OPEN
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Your name", "description": "as on the badge",
                 "minLength": 2},
        "count": {"type": "integer", "title": "How many", "minimum": 1, "maximum": 10,
                  "default": 2},
        "colour": {"type": "string", "title": "Colour", "enum": ["r", "g", "b"],
                   "enumNames": ["Red", "Green", "Blue"], "default": "g"},
        "fast": {"type": "boolean", "title": "Express", "default": False},
        "tags": {"type": "array", "title": "Tags",
                 "items": {"anyOf": [{"const": "x", "title": "Ex"},
                                     {"const": "y", "title": "Why"},
                                     {"const": "z", "title": "Zed"}]}},
    },
    "required": ["name", "count"],
}
PLUGIN = f"""
import asyncio, json
from silica.blocks import TextBlock, ToolResult
from silica.elicitation import Elicitation
from silica.hookspecs import hookimpl
from silica.tools.builtin import BuiltinTool

SCHEMA = {SCHEMA!r}


async def run(arguments, context):
    if context.elicit is None:
        return ToolResult(blocks=[TextBlock(text="nobody to ask")])
    request = Elicitation(source="probe", message=arguments.get("message", "Fill it in."),
                          schema=SCHEMA)
    answers = await asyncio.gather(*(context.elicit(request)
                                     for _ in range(int(arguments.get("many", 1)))))
    said = [{{"action": a.action, "content": a.content, "reason": a.reason}} for a in answers]
    return ToolResult(blocks=[TextBlock(text="ANSWERS " + json.dumps(said, sort_keys=True))])


@hookimpl
def silica_builtin_tools(register):
    register(BuiltinTool(name="probe", description="asks the person for values",
                         input_schema={{"type": "object", "properties": {{
                             "message": {{"type": "string"}}, "many": {{"type": "integer"}}}}}},
                         run=run))
"""


def plugin_site(folder: Path) -> Path:
    """A folder for PYTHONPATH holding the plugin module and its entry point."""
    site = folder / "site"
    dist = site / "elicitprobe-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: elicitprobe\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[silica]\nelicitprobe = elicitprobe\n")
    (site / "elicitprobe.py").write_text(textwrap.dedent(PLUGIN))
    return site


def env_for(model: WireServer, home: Path, site: Path) -> dict[str, str]:
    return {**model.env, "SILICA_PROVIDER": "anthropic", "SILICA_HOME": str(home),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
            "SILICA_LOAD_PLUGINS": "elicitprobe"}


def home_with(tmp: Path, *, timeout: float | None = None) -> Path:
    home = tmp / "home"
    home.mkdir()
    if timeout is not None:
        (home / "config.toml").write_text(f"[mcp]\nelicitation_timeout = {timeout}\n")
    return home


@pytest.fixture(scope="module")
def model() -> Iterator[WireServer]:
    with anthropic_server() as srv:
        yield srv


@pytest.fixture(scope="module")
def daemon(model, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve-elicit")
    home = home_with(tmp)
    with start_daemon(home, env=env_for(model, home, plugin_site(tmp)), cwd=tmp,
                      token=TOKEN) as served:
        yield served


class Listener(SioListener):
    EVENTS = (*SioListener.EVENTS, "elicitation", "elicitation_done")


def answers_of(events: list) -> list[dict]:
    """What the tool got back, from its tool_result event."""
    [result] = [d for n, d in events if n == "tool_result" and d["name"] == "probe"]
    return json.loads(result["text"].split("ANSWERS ", 1)[1])


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=3),
    max_leaves=8)
FIELDS = st.sampled_from([*SCHEMA["properties"], "other"])
ANSWERS = st.one_of(
    st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=3),
    st.fixed_dictionaries(
        {"action": st.sampled_from(["accept", "decline", "cancel"]) | JSON_VALUES},
        optional={"content": st.dictionaries(FIELDS, JSON_VALUES | st.text(max_size=12),
                                             max_size=6) | JSON_VALUES}))


@settings(max_examples=300, deadline=None)
@given(body=ANSWERS)
def test_any_answer_body_is_taken_checked_or_refused_with_a_clear_error(body):
    """``Elicitations.answer``, the reader of every answer (route and Socket.IO): whatever
    JSON object comes, it is an answer that fits the schema or a 400 naming what is wrong,
    and a refused answer leaves the request open."""
    loop = asyncio.new_event_loop()
    try:
        asking = Elicitations(Path("/nonexistent"), timeout=5)
        request = check_request("probe", "Fill it in.", SCHEMA)
        pending = Open(request, "s1", "t1", 1, answer=loop.create_future())
        asking.open[request.id] = pending
        try:
            answer = asking.answer("s1", request.id, body)
        except ApiError as exc:
            assert exc.status == 400 and exc.message and not pending.answer.done()
            return
        assert pending.answer.result() == answer
        if answer.action == "accept":
            assert check_answer(request, answer.content) == answer.content
        else:
            assert answer.content is None
    finally:
        loop.close()


class Shown:
    """A stand-in for a session's ``Pump``: what would be published."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []

    def put(self, event: str, data: dict) -> None:
        self.events.append((event, data))


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"deep": {"type": "object", "properties": {}}}},
    {"type": "object", "properties": {"n": {"type": "integer", "default": "x"}}},
    {"type": "object", "properties": {}, "required": ["missing"]},
    ["not", "an", "object"],
], ids=["nested", "bad-default", "required-unknown", "not-an-object"])
def test_a_request_that_is_not_valid_is_declined_and_never_shown(schema, tmp_path):
    shown = Shown()
    ask = Elicitations(tmp_path, timeout=5).asker(shown, "s1", "t1", 1)  # a Pump for put()
    answer = asyncio.run(ask(Elicitation(source="probe", message="Hi", schema=schema)))
    assert answer.action == "decline" and "not valid" in answer.reason
    assert shown.events == []


def test_http_answer_reaches_the_tool_and_sse_and_socketio_carry_the_request(daemon, model):
    sid = new_session(daemon)
    model.script.clear()
    model.add(tool_call("probe", {"message": "Who is <b>there</b>?"}), text("Thanks."))

    async def go():
        async with SseReader(daemon, sid) as sse, Listener(daemon, sid) as sio, \
                daemon.async_client() as http:
            posted = await http.post(f"/sessions/{sid}/messages", json={"message": "ask me"})
            assert posted.status_code == 202
            [*_, (_, asked)] = await sse.until("elicitation")
            [*_, (_, heard)] = await sio.until("elicitation")
            assert heard == asked
            assert asked["source"] == "probe" and asked["message"] == "Who is <b>there</b>?"
            assert asked["turn_id"] == posted.json()["turn_id"]
            props = asked["schema"]["properties"]
            assert props["colour"]["enumNames"] == ["Red", "Green", "Blue"]
            assert asked["schema"]["required"] == ["name", "count"]
            url = f"/sessions/{sid}/elicitations/{asked['id']}"

            bad = await http.post(url, json={"action": "accept",
                                             "content": {"name": "Ada", "count": "many"}})
            assert bad.status_code == 400
            error = bad.json()["error"]
            assert error["code"] == "invalid_answer" and error["field"] == "count"
            assert "'count' must be a whole number" in error["message"]
            missing = await http.post(url, json={"action": "accept", "content": {"count": 3}})
            assert missing.status_code == 400 and missing.json()["error"]["field"] == "name"
            wrong = await http.post(url, json={"action": "maybe"})
            assert wrong.status_code == 400 and "action" in wrong.json()["error"]["message"]
            unknown = await http.post(f"/sessions/{sid}/elicitations/nosuchid",
                                      json={"action": "decline"})
            assert unknown.status_code == 404

            good = await http.post(url, json={"action": "accept", "content": {
                "name": "Ada", "count": "3", "colour": "b", "fast": True, "tags": ["x", "z"]}})
            assert good.status_code == 200, good.text
            assert good.json() == {"id": asked["id"], "action": "accept"}
            [*_, (_, done)] = await sse.until("elicitation_done")
            [*_, (_, done_sio)] = await sio.until("elicitation_done")
            assert done == done_sio
            assert done["id"] == asked["id"] and done["action"] == "accept"
            events = await sse.until("turn_end")
            again = await http.post(url, json={"action": "decline"})
            assert again.status_code == 409
            history = (await http.get(f"/sessions/{sid}/history")).json()
            return events, asked, history

    events, asked, history = asyncio.run(go())
    assert answers_of(events) == [{"action": "accept", "reason": "", "content": {
        "name": "Ada", "count": 3, "colour": "b", "fast": True, "tags": ["x", "z"]}}]
    [saved] = history["elicitations"]
    assert saved["id"] == asked["id"] and saved["action"] == "accept"
    assert saved["message"] == "Who is <b>there</b>?"
    assert "Ada" not in json.dumps(saved)  # the values went to the tool, not to the record


def test_socketio_answer_declines_and_must_be_joined(daemon, model):
    sid = new_session(daemon)
    other = new_session(daemon)
    model.script.clear()
    model.add(tool_call("probe", {}), text("Fine."))

    async def go():
        async with SseReader(daemon, sid) as sse, Listener(daemon, other) as stranger, \
                Listener(daemon, sid) as sio, daemon.async_client() as http:
            await http.post(f"/sessions/{sid}/messages", json={"message": "ask"})
            [*_, (_, asked)] = await sio.until("elicitation")
            refused = await stranger.client.call("elicitation_answer", {
                "session_id": sid, "id": asked["id"], "action": "accept"},
                namespace="/events", timeout=30)
            assert refused["error"]["code"] == "not_joined"
            bad = await sio.client.call("elicitation_answer", {
                "session_id": sid, "id": asked["id"], "action": "accept",
                "content": {"name": "A"}}, namespace="/events", timeout=30)
            assert bad["error"]["code"] == "invalid_answer" and bad["error"]["field"] == "name"
            ack = await sio.client.call("elicitation_answer", {
                "session_id": sid, "id": asked["id"], "action": "decline"},
                namespace="/events", timeout=30)
            assert ack == {"ok": True, "id": asked["id"], "action": "decline"}
            [*_, (_, done)] = await sse.until("elicitation_done")
            assert done["action"] == "decline"
            return await sse.until("turn_end")

    assert answers_of(asyncio.run(go())) == [{"action": "decline", "content": None,
                                              "reason": ""}]


def test_more_open_requests_than_allowed_are_declined(daemon, model):
    sid = new_session(daemon)
    model.script.clear()
    model.add(tool_call("probe", {"many": MAX_OPEN + 2}), text("Done."))

    async def go():
        async with SseReader(daemon, sid) as sse, daemon.async_client() as http:
            await http.post(f"/sessions/{sid}/messages", json={"message": "ask a lot"})
            asked = []
            while len(asked) < MAX_OPEN:
                [*_, (_, one)] = await sse.until("elicitation")
                asked.append(one)
            listed = (await http.get(f"/sessions/{sid}/history")).json()["elicitations"]
            assert sorted(i["id"] for i in listed) == sorted(a["id"] for a in asked)
            assert all(i["action"] is None for i in listed)  # open
            for one in asked:
                sent = await http.post(f"/sessions/{sid}/elicitations/{one['id']}",
                                       json={"action": "cancel"})
                assert sent.status_code == 200
            return await sse.until("turn_end")

    events = asyncio.run(go())
    assert not [e for e in events if e[0] == "elicitation"]  # no more were shown
    got = answers_of(events)
    assert sorted(a["action"] for a in got) == ["cancel"] * MAX_OPEN + ["decline"] * 2
    assert all("already waiting" in a["reason"] for a in got if a["action"] == "decline")


def test_a_request_nobody_answers_is_declined_when_it_times_out(model, tmp_path):
    home = home_with(tmp_path, timeout=1)
    with start_daemon(home, env=env_for(model, home, plugin_site(tmp_path)),
                      cwd=tmp_path) as daemon:
        sid = new_session(daemon)
        model.script.clear()
        model.add(tool_call("probe", {}), text("Nobody there."))

        async def go():
            async with SseReader(daemon, sid) as sse, daemon.async_client() as http:
                await http.post(f"/sessions/{sid}/messages", json={"message": "ask"})
                [*_, (_, asked)] = await sse.until("elicitation")
                [*_, (_, done)] = await sse.until("elicitation_done")
                events = await sse.until("turn_end")
                late = await http.post(f"/sessions/{sid}/elicitations/{asked['id']}",
                                       json={"action": "accept", "content": {}})
                return asked, done, events, late

        asked, done, events, late = asyncio.run(go())
    assert done["id"] == asked["id"] and done["action"] == "decline"
    assert "nobody answered" in done["reason"]
    [got] = answers_of(events)
    assert got["action"] == "decline" and "nobody answered" in got["reason"]
    assert late.status_code == 409


def test_a_stopped_daemon_cancels_the_open_request(model, tmp_path):
    home = home_with(tmp_path)
    with start_daemon(home, env=env_for(model, home, plugin_site(tmp_path)),
                      cwd=tmp_path) as daemon:
        sid = new_session(daemon)
        model.script.clear()
        model.add(tool_call("probe", {}), text("unused"))

        async def go():
            async with SseReader(daemon, sid) as sse, daemon.async_client() as http:
                await http.post(f"/sessions/{sid}/messages", json={"message": "ask"})
                [*_, (_, asked)] = await sse.until("elicitation")
                await asyncio.to_thread(daemon.stop)
                return asked, await sse.until("elicitation_done")

        asked, events = asyncio.run(go())
    done = events[-1][1]
    assert done["id"] == asked["id"] and done["action"] == "cancel"
    saved = (home / "sessions" / sid / "elicitations.jsonl").read_text().splitlines()
    assert json.loads(saved[-1])["action"] == "cancel"


@pytest.mark.parametrize("legacy", [True, False], ids=["elicitation-create", "input-required"])
def test_an_mcp_servers_request_is_answered_over_http_and_the_server_gets_the_values(
        model, tmp_path, legacy):
    home = home_with(tmp_path)
    got = tmp_path / "server-got.txt"
    server = Path(__file__).parent / "mcp_fixtures" / "elicit_server.py"
    args = [str(server), "--log", str(got), *(["--legacy"] if legacy else [])]
    (home / "config.toml").write_text(
        '[sandbox]\nmode = "off"\n[mcp.servers.asker]\n'
        f"command = {json.dumps(sys.executable)}\nargs = {json.dumps(args)}\n"
        "startup_timeout = 60\n")
    schema = {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string", "title": "City"},
        "nights": {"type": "integer", "minimum": 1}}}
    with start_daemon(home, env=env_for(model, home, plugin_site(tmp_path)),
                      cwd=tmp_path) as daemon:
        sid = new_session(daemon)
        model.script.clear()
        model.add(tool_call("asker__fill", {"schema": json.dumps(schema),
                                            "message": "Where to?"}), text("Booked."))

        async def go():
            async with SseReader(daemon, sid) as sse, daemon.async_client() as http:
                await http.post(f"/sessions/{sid}/messages", json={"message": "book"})
                [*_, (_, asked)] = await sse.until("elicitation")
                url = f"/sessions/{sid}/elicitations/{asked['id']}"
                bad = await http.post(url, json={"action": "accept",
                                                 "content": {"city": "Oslo", "nights": "0"}})
                assert bad.status_code == 400 and bad.json()["error"]["field"] == "nights"
                sent = await http.post(url, json={"action": "accept",
                                                  "content": {"city": "Oslo", "nights": "2"}})
                assert sent.status_code == 200, sent.text
                return asked, await sse.until("turn_end")

        asked, events = asyncio.run(go())
    assert asked["source"] == "asker" and asked["message"] == "Where to?"
    assert asked["schema"]["properties"]["city"]["title"] == "City"
    assert got.read_text().splitlines() == ['accept {"city": "Oslo", "nights": 2}']
    assert "turn_end" in [name for name, _ in events]


def test_a_second_daemon_over_redis_carries_the_request_and_its_end(model, tmp_path):
    from redis_server import RedisServer

    home = home_with(tmp_path)
    env = env_for(model, home, plugin_site(tmp_path))
    server = RedisServer(tmp_path / "redis").start()
    try:
        with start_daemon(home, env=env, args=["--redis", server.url], cwd=tmp_path) as a, \
                start_daemon(home, env=env, args=["--redis", server.url], cwd=tmp_path) as b:
            sid = new_session(a)
            model.script.clear()
            model.add(tool_call("probe", {}), text("Over there."))

            async def go():
                async with SseReader(a, sid) as sse, Listener(a, sid) as sio, \
                        a.async_client() as at_a, b.async_client() as at_b:
                    await at_b.post(f"/sessions/{sid}/messages", json={"message": "ask"})
                    [*_, (_, asked)] = await sse.until("elicitation")
                    [*_, (_, heard)] = await sio.until("elicitation")
                    assert heard == asked
                    url = f"/sessions/{sid}/elicitations/{asked['id']}"
                    # answered at A, it reaches B (whose turn asked) through Redis, checked
                    # there: an answer that does not fit is refused as B refuses it
                    bad = await at_a.post(url, json={"action": "accept",
                                                     "content": {"count": "many"}})
                    assert bad.status_code == 400, bad.text
                    assert bad.json()["error"]["code"] == "invalid_answer"
                    sent = await at_a.post(url, json={"action": "accept",
                                                      "content": {"name": "Bo", "count": 1}})
                    assert sent.status_code == 200, sent.text
                    assert sent.json()["action"] == "accept"
                    [*_, (_, done)] = await sio.until("elicitation_done")
                    again = await at_b.post(url, json={"action": "decline"})
                    assert again.status_code == 409, again.text
                    events = await sse.until("turn_end")
                    return asked, done, events

            asked, done, events = asyncio.run(go())
    finally:
        server.stop()
    assert done == {"turn_id": asked["turn_id"], "id": asked["id"], "action": "accept",
                    "reason": "", "event_id": done["event_id"]}
    assert answers_of(events)[0]["content"]["name"] == "Bo"


# -- the page ---------------------------------------------------------------------------------


def session_in_hash(page: Page) -> str:
    """The session the page opened, once its address names one. Polled from here: a
    predicate polled inside the page would be evaluated as a string, which the page's
    content security policy forbids."""
    for _ in range(300):
        sid = page.evaluate("location.hash.slice(1)")
        if sid:
            return sid
        page.wait_for_timeout(100)
    raise AssertionError("the page never named its new session in its address")


def tab(browser: Browser, daemon) -> tuple[Page, list[str]]:
    context = browser.new_context(base_url=daemon.url)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"/?token={TOKEN}")
    return page, errors


def test_the_page_shows_a_form_and_the_tool_gets_what_the_browser_typed(browser, daemon,
                                                                         model):
    page, errors = tab(browser, daemon)
    second, errors2 = tab(browser, daemon)
    model.script.clear()
    model.add(tool_call("probe", {"message": "Who is <b>there</b>?"}), text("Thanks, Ada."))
    page.get_by_role("button", name="New session").click()  # saved with its first message
    page.get_by_role("textbox", name="Message").fill("ask me")
    page.get_by_role("button", name="Send", exact=True).click()
    sid = session_in_hash(page)
    assert sid
    second.goto(f"/#{sid}")

    form = page.locator("form.elicitation")
    expect(form).to_be_visible()
    expect(second.locator("form.elicitation")).to_be_visible()  # every tab shows it
    expect(form.locator(".message")).to_have_text("Who is <b>there</b>?")  # text, not HTML
    expect(form.locator(".message b")).to_have_count(0)
    expect(form).to_contain_text("probe")
    name = form.get_by_label("Your name")
    expect(name).to_have_attribute("required", "")
    expect(name).to_have_accessible_description("as on the badge")
    count = form.get_by_label("How many")
    expect(count).to_have_attribute("type", "number")
    expect(count).to_have_value("2")
    colour = form.get_by_label("Colour")
    expect(colour).to_have_value("g")
    expect(colour.locator("option")).to_have_text(["—", "Red", "Green", "Blue"])  # optional
    fast = form.get_by_label("Express")
    expect(fast).to_have_attribute("type", "checkbox")
    expect(fast).not_to_be_checked()

    name.fill("A")  # too short: the daemon says so and the form stays open
    form.get_by_role("button", name="Accept").click()
    expect(form.locator(".problem")).to_contain_text("'name' must be at least 2 characters")
    expect(form).to_be_visible()
    name.fill("Ada Lovelace")
    count.fill("7")
    colour.select_option("b")
    fast.check()
    form.get_by_role("checkbox", name="Why").check()
    form.get_by_role("checkbox", name="Zed").check()
    form.get_by_role("button", name="Accept").click()

    expect(page.locator(".msg.assistant").last).to_have_text("Thanks, Ada.")
    expect(form).to_have_count(0)
    answered = page.locator(".elicitation-done")
    expect(answered).to_contain_text("accepted")
    expect(second.locator("form.elicitation")).to_have_count(0)  # closed in the other tab
    expect(second.locator(".elicitation-done")).to_contain_text("accepted")

    with daemon.client() as http:
        history = http.get(f"/sessions/{sid}/history").json()
    [result] = [i for m in history["messages"] for i in m["content"]
                if i["type"] == "tool_result"]
    got = json.loads(result["content"][0]["text"].split("ANSWERS ", 1)[1])
    assert got == [{"action": "accept", "reason": "", "content": {
        "name": "Ada Lovelace", "count": 7, "colour": "b", "fast": True, "tags": ["y", "z"]}}]

    page.reload()  # the history shows the request as answered
    expect(page.locator(".elicitation-done")).to_contain_text("accepted")
    expect(page.locator(".elicitation-done")).to_contain_text("Who is <b>there</b>?")
    expect(page.locator("form.elicitation")).to_have_count(0)
    page.context.close()
    second.context.close()
    assert not errors and not errors2, errors + errors2


def test_a_reloaded_page_shows_an_open_request_as_a_form_that_still_answers(browser, daemon,
                                                                            model):
    page, errors = tab(browser, daemon)
    model.script.clear()
    model.add(tool_call("probe", {"message": "Still there?"}), text("Declined, fine."))
    page.get_by_role("button", name="New session").click()  # saved with its first message
    page.get_by_role("textbox", name="Message").fill("ask me")
    page.get_by_role("button", name="Send", exact=True).click()
    sid = session_in_hash(page)
    expect(page.locator("form.elicitation .message")).to_have_text("Still there?")

    page.reload()  # the open request comes back from the history, as a form
    form = page.locator("form.elicitation")
    expect(form.locator(".message")).to_have_text("Still there?")
    form.get_by_role("button", name="Decline").click()
    expect(form).to_have_count(0)
    expect(page.locator(".elicitation-done")).to_contain_text("declined")
    expect(page.locator(".msg.assistant").last).to_have_text("Declined, fine.")
    with daemon.client() as http:
        history = http.get(f"/sessions/{sid}/history").json()
    [result] = [i for m in history["messages"] for i in m["content"]
                if i["type"] == "tool_result"]
    assert '"action": "decline"' in result["content"][0]["text"]
    page.context.close()
    assert not errors, errors


def test_an_answer_that_is_not_json_says_what_to_send(daemon):
    sid = new_session(daemon)
    with daemon.client() as http:
        sent = http.post(f"/sessions/{sid}/elicitations/abc", data={"action": "accept"})
        empty = http.post(f"/sessions/{sid}/elicitations/abc")
        elsewhere = http.post("/sessions/nosuchsession/elicitations/abc",
                              json={"action": "decline"})
    assert sent.status_code == 415
    assert '{"action": "accept", "content": {"field": "value"}}' in \
        sent.json()["error"]["message"]
    assert "optional" not in sent.json()["error"]["message"]
    assert empty.status_code == 404  # nothing to answer: no such request
    assert elsewhere.status_code == 404 and elsewhere.json()["error"]["code"] == "no_session"
