"""The page of `silica serve` in a real browser: Debian's chromium driven by Playwright.

A real daemon (`python -m silica serve`) runs in a subprocess; its model is the suite's local
Anthropic wire server, and its one tool is a script that answers with a PNG. Each test does
what a person does in the browser and checks what they would see.
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from conftest import script_tool, simple_spec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image
from playwright.sync_api import Page, expect
from serve_daemon import daemon_env as serve_env
from serve_daemon import gate_tool, start_daemon
from wire import WireServer, anthropic_server, error, text, tool_call, trickle

# the first call of a tool builds its environment with uv: allow for it
expect.set_options(timeout=30_000)

TOOL_IMAGE = (300, 200)
TOKEN = "page-secret"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def screenshot(page: Page, name: str) -> None:
    """A screenshot for the run's artefacts: in $SILICA_TEST_ARTIFACTS, else tests/artifacts/."""
    folder = Path(os.environ.get("SILICA_TEST_ARTIFACTS") or Path(__file__).parent / "artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=folder / f"serve-page-{name}.png")


def png(size=(40, 30), color=(200, 40, 40)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="PNG")
    return out.getvalue()


def png_file(name: str, size=(40, 30), color=(200, 40, 40)) -> dict:
    return {"name": name, "mimeType": "image/png", "buffer": png(size, color)}


@pytest.fixture(scope="module")
def model() -> Iterator[WireServer]:
    with anthropic_server() as srv:
        yield srv


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A silica home whose user tools hold `picture`: a PNG and its label, as JSON."""
    home = tmp_path_factory.mktemp("serve-page") / "home"
    data = base64.b64encode(png(TOOL_IMAGE, (30, 80, 200))).decode()
    body = textwrap.dedent(f"""
        import json, sys
        label = sys.argv[-1].split("=", 1)[-1] if len(sys.argv) > 1 else "none"
        print(json.dumps({{"label": label, "media_type": "image/png", "base64": {data!r}}}))
    """)
    script_tool(home / "tools", "picture.py", simple_spec("picture", label="string"), body=body)
    script_tool(home / "tools", "words.py", simple_spec("words"), body='print("only words")')
    gate_tool(home / "tools")
    script_tool(home / "tools", "snap.py", simple_spec("snap"), body=f"""
        import json
        print(json.dumps({{"media_type": "image/png", "base64": {data!r}}}))
    """)
    return home


def daemon_env(model: WireServer, home) -> dict[str, str]:
    return {**model.env, "SILICA_PROVIDER": "anthropic", "SILICA_HOME": str(home),
            "SILICA_TOOLS_DIR": str(home / "tools")}


@pytest.fixture(scope="module")
def daemon(model, home):
    """The daemon, with a token: the page gets in through the link it prints (a cookie)."""
    with start_daemon(home, env=daemon_env(model, home), cwd=home.parent,
                      token=TOKEN) as served:
        yield served


@pytest.fixture
def page(browser, daemon, model) -> Iterator[Page]:
    """A fresh browser tab on the daemon; fails the test on any script error in the page."""
    model.script.clear()  # a reply a failed test left behind must not answer this one
    context = browser.new_context(base_url=daemon.url, viewport=DESKTOP)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.goto(f"/?token={TOKEN}")
    yield tab
    context.close()
    assert not errors, errors


def prompt_of(page: Page):
    return page.get_by_role("textbox", name="Message")


def new_session(page: Page) -> None:
    """A new session: a draft, saved with its first message."""
    page.get_by_role("button", name="New session").click()
    expect(prompt_of(page)).to_be_focused()
    expect(page.locator("#session-title")).to_have_text("New session")
    assert page.evaluate("location.hash.slice(1)") == ""


def listed(page: Page) -> list[dict]:
    return page.request.get("/sessions").json()["sessions"]


def paste_png(page: Page, data: bytes, name: str = "image.png") -> None:
    """What a browser does when a screenshot is pasted: a paste event holding a PNG file."""
    page.locator("#prompt").evaluate("""(target, [b64, name]) => {
        const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
        const data = new DataTransfer();
        data.items.add(new File([bytes], name, {type: "image/png"}));
        target.dispatchEvent(new ClipboardEvent("paste", {clipboardData: data, bubbles: true,
                                                          cancelable: true}));
    }""", [base64.b64encode(data).decode(), name])


def drop_file(page: Page, data: bytes, name: str, mime: str) -> None:
    """What a browser does when a file is dragged from the desktop onto the chat."""
    page.locator("main").evaluate("""(target, [b64, name, mime]) => {
        const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
        const data = new DataTransfer();
        data.items.add(new File([bytes], name, {type: mime}));
        for (const type of ["dragenter", "dragover", "drop"]) {
            target.dispatchEvent(new DragEvent(type, {dataTransfer: data, bubbles: true,
                                                      cancelable: true}));
        }
    }""", [base64.b64encode(data).decode(), name, mime])


def images_sent(body: dict) -> list[dict]:
    """The images of the last user message the model received."""
    return [b for b in body["messages"][-1]["content"] if b["type"] == "image"]


def loaded(img) -> None:
    img.scroll_into_view_if_needed()
    expect(img).to_have_attribute("loading", "lazy")
    expect(img).not_to_have_js_property("naturalWidth", 0)


def test_a_pasted_and_a_chosen_screenshot_get_an_answer_with_a_tool_image(page, model):
    new_session(page)
    page.locator("#files").set_input_files([png_file("red.png"),
                                            png_file("green.png", color=(0, 160, 0))])
    paste_png(page, png((50, 20), (250, 200, 0)))
    previews = page.locator("#previews li")
    expect(previews).to_have_count(3)
    expect(previews.nth(2)).to_contain_text("pasted.png")
    page.get_by_role("button", name="Remove green.png").click()
    expect(previews).to_have_count(2)
    expect(previews).to_contain_text(["red.png", "pasted.png"])

    model.add(trickle(text("Let me draw what I see.") + tool_call("picture", {"label": "one"}),
                      0.05),
              trickle(text("A blue rectangle: the layout is fine."), 0.05))
    page.evaluate("""() => {  // every state of the answer the reader saw, as it grew
        window.seen = [];
        new MutationObserver(() => {
            const last = [...document.querySelectorAll("#log .msg.assistant .text")].pop();
            if (last) window.seen.push(last.textContent);
        }).observe(document.getElementById("log"), {childList: true, subtree: true,
                                                    characterData: true});
    }""")
    prompt_of(page).fill("What is wrong on this page?")
    page.get_by_role("button", name="Send", exact=True).click()

    user = page.locator(".msg.user")
    expect(user).to_contain_text("What is wrong on this page?")
    expect(user.locator("img")).to_have_count(2)
    expect(previews).to_have_count(0)
    answer = page.locator(".msg.assistant")
    expect(answer.last).to_have_text("A blue rectangle: the layout is fine.")
    expect(answer.first).to_have_text("Let me draw what I see.")
    final = "A blue rectangle: the layout is fine."
    seen = page.evaluate("window.seen")
    assert any(0 < len(s) < len(final) and final.startswith(s) for s in seen), seen  # streamed
    expect(page.locator(".usage")).to_contain_text("tokens:")

    tool = page.locator("details.tool")
    expect(tool.locator("summary").first).to_contain_text("picture")
    expect(tool.locator("summary").first).to_contain_text("done · 1 image")
    img = tool.locator(".output img")
    expect(img).to_be_visible()  # the tool's image is shown; its input is folded
    expect(tool.locator("pre.input")).to_be_hidden()
    tool.get_by_text("Input", exact=True).click()
    expect(tool.locator("pre.input")).to_contain_text('"label": "one"')
    loaded(img)
    loaded(user.locator("img").first)

    img.click()  # the full size, in a dialog; Escape closes it and focus comes back
    viewer = page.locator("#viewer")
    expect(viewer).to_be_visible()
    expect(viewer.locator("img")).to_have_js_property("naturalWidth", TOOL_IMAGE[0])
    page.keyboard.press("Escape")
    expect(viewer).to_be_hidden()
    expect(tool.locator("button.thumb")).to_be_focused()

    [first, second] = model.requests[-2:]
    assert len(images_sent(first)) == 2  # the model saw both screenshots, not the removed one
    [result] = [b for b in second["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert [c["type"] for c in result["content"]] == ["text", "image"]

    page.reload()  # the same conversation, drawn from the history
    expect(user).to_contain_text("What is wrong on this page?")
    expect(user.locator("img")).to_have_count(2)
    loaded(user.locator("img").last)
    expect(answer.last).to_have_text("A blue rectangle: the layout is fine.")
    loaded(tool.locator(".output img"))
    tool.get_by_text("Input", exact=True).click()
    expect(tool.locator("pre.input")).to_contain_text('"label": "one"')


def test_a_refused_image_is_named_next_to_its_preview_and_nothing_is_sent(page, model):
    new_session(page)
    before = listed(page)
    truncated = png((64, 64))[:-40]
    svg = b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>'
    drop_file(page, png(), "fine.png", "image/png")
    page.locator("#files").set_input_files([
        {"name": "drawing.svg", "mimeType": "image/svg+xml", "buffer": svg}])
    prompt_of(page).fill("Look at these")
    page.get_by_role("button", name="Send", exact=True).click()

    refused = page.locator("#previews li", has_text="drawing.svg")
    expect(refused.locator(".refusal")).to_contain_text("drawing.svg")
    expect(refused).to_have_class("refused")
    expect(page.locator("#previews li", has_text="fine.png").locator(".refusal")).to_be_empty()
    expect(prompt_of(page)).to_have_value("Look at these")

    page.get_by_role("button", name="Remove drawing.svg").click()
    page.locator("#files").set_input_files([
        {"name": "cut.png", "mimeType": "image/png", "buffer": truncated}])
    page.get_by_role("button", name="Send", exact=True).click()
    expect(page.locator("#previews li", has_text="cut.png").locator(".refusal")).to_contain_text(
        "cut.png")

    assert listed(page) == before  # nothing was stored, not even an empty session
    expect(page.locator(".msg")).to_have_count(0)

    model.add(text("One image, received."))
    page.get_by_role("button", name="Remove cut.png").click()
    expect(page.get_by_role("button", name="Remove fine.png")).to_be_focused()
    prompt_of(page).press("Enter")
    expect(page.locator(".msg.assistant")).to_have_text("One image, received.")
    expect(page.locator(".msg.user img")).to_have_count(1)


def test_the_keyboard_alone_reaches_every_control_and_sends(page, model):
    focused: list[str] = []
    for _ in range(12):  # Tab from the top of the page to the New session button
        page.keyboard.press("Tab")
        focused.append(page.evaluate("document.activeElement.id || document.activeElement.tagName"))
        if focused[-1] == "new-session":
            break
    assert focused[-1] == "new-session", focused
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline == "solid"  # focus is visible
    page.keyboard.press("Enter")
    prompt = prompt_of(page)
    expect(prompt).to_be_focused()

    model.add(text("Two lines, read."))
    page.keyboard.type("first line")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("second line")
    expect(prompt).to_have_value("first line\nsecond line")
    page.keyboard.press("Enter")
    expect(page.locator(".msg.user .text")).to_have_text("first line\nsecond line")
    expect(page.locator(".msg.assistant")).to_have_text("Two lines, read.")
    expect(prompt).to_have_value("")

    reached = set()
    for _ in range(40):  # from the message box on, Tab goes round the whole page
        page.keyboard.press("Tab")
        reached.add(page.evaluate("""() => {
            const a = document.activeElement;
            return a.id || a.className || a.tagName;
        }"""))
        if "prompt" in reached:
            break
    assert {"files", "send", "new-session", "open", "delete", "prompt"} <= reached, reached


def test_sessions_started_elsewhere_show_up_and_one_can_be_deleted(page, model, daemon, home):
    new_session(page)
    model.add(text("Hello from the command line."), text("Hello from a script."))
    asked = subprocess.run(
        [sys.executable, "-m", "silica", "ask", "Say hello"], capture_output=True, text=True,
        env=serve_env(home, daemon_env(model, home)), timeout=300)
    assert asked.returncode == 0, asked.stderr
    made = page.request.post("/sessions", data={})
    assert made.status == 201
    scripted = made.json()["session_id"]
    answered = page.request.post(f"/sessions/{scripted}/messages?wait=true",
                                 data={"message": "Say hello too"})
    assert answered.ok, answered.text()

    # without a reload: the list keeps itself current
    expect(page.locator(f'#sessions li[data-sid="{scripted}"]')).to_contain_text("Say hello too")
    item = page.locator("#sessions li", has_text="Say hello").filter(has_not_text="too")
    expect(item).to_contain_text("2 messages")
    item.locator(".open").click()
    sid = item.get_attribute("data-sid")
    expect(item.locator(".open")).to_have_attribute("aria-current", "true")
    assert page.evaluate("location.hash") == f"#{sid}"
    expect(page.locator(".msg.user .text")).to_have_text("Say hello")
    expect(page.locator(".msg.assistant")).to_have_text("Hello from the command line.")

    page.once("dialog", lambda dialog: dialog.accept())
    item.locator(".delete").click()
    expect(item).to_have_count(0)
    expect(page.locator("#session-title")).to_have_text("New session")  # back to a draft
    assert page.request.get(f"/sessions/{sid}/history").status == 404


def test_model_and_tool_text_is_shown_as_text_and_errors_in_the_chat(page, model):
    new_session(page)
    markup = "<img src=x onerror=window.pwned=1><b>bold</b>"
    model.add(tool_call("picture", {"label": markup}), text(markup))
    prompt = prompt_of(page)
    prompt.fill("Show me markup")
    prompt.press("Enter")
    expect(page.locator(".msg.assistant")).to_have_text(markup)
    expect(page.locator("details.tool .output pre")).to_contain_text(markup)
    expect(page.locator("#log b")).to_have_count(0)
    assert page.evaluate("window.pwned") is None

    model.add(error(400, "Could not process the request"))
    prompt.fill("Again")
    prompt.press("Enter")
    expect(page.locator("#log .error")).to_contain_text("Could not process the request")

    model.add(text("Back to normal."))  # the session stays usable after an error
    prompt.fill("Once more")
    prompt.press("Enter")
    expect(page.locator(".msg.assistant").last).to_have_text("Back to normal.")

    page.reload()  # the failed turn is marked in the history
    expect(page.locator(".turn").nth(1)).to_contain_text("This turn was interrupted.")
    expect(page.locator(".msg.assistant").last).to_have_text("Back to normal.")


def test_the_printed_link_lets_the_page_in_and_nothing_else_does(browser, daemon):
    assert daemon.start_line.endswith(f"/?token={TOKEN}")
    context = browser.new_context(base_url=daemon.url)
    tab = context.new_page()
    assert tab.goto("/").status == 401
    assert tab.request.get("/sessions").status == 401
    tab.goto(f"/?token={TOKEN}")
    assert "token" not in tab.url  # the link leaves a cookie, not the token in the address
    expect(tab.get_by_role("button", name="New session")).to_be_visible()
    expect(tab.locator("#sessions-status")).not_to_contain_text("token")
    assert tab.request.get("/sessions").ok
    context.close()


# -- the rough edges a new user found --------------------------------------------------------


def send(page: Page, message: str) -> None:
    prompt_of(page).fill(message)
    prompt_of(page).press("Enter")


def test_a_tool_box_shows_its_output_first_and_never_a_null(page, model):
    new_session(page)
    model.add(tool_call("words") + tool_call("snap"), text("Both tools answered."))
    send(page, "Run both tools")
    expect(page.locator(".msg.assistant")).to_have_text("Both tools answered.")
    words, snap = page.locator("details.tool").all()
    expect(words.locator(".output")).to_have_text("only words")  # no "null" beside it
    expect(snap.locator(".output img")).to_be_visible()  # open, with no click
    expect(snap.locator(".output")).not_to_contain_text("null")
    image_box = snap.locator(".output img").bounding_box()
    input_box = snap.get_by_text("Input", exact=True).bounding_box()
    assert image_box and input_box and image_box["y"] < input_box["y"]  # the image comes first
    expect(snap.locator("pre.input")).to_be_hidden()

    page.reload()  # drawn again from the history: the same
    expect(page.locator("details.tool")).to_have_count(2)
    words, snap = page.locator("details.tool").all()
    expect(words.locator(".output")).to_have_text("only words")
    expect(snap.locator(".output img")).to_be_visible()
    expect(snap.locator(".output")).not_to_contain_text("null")


def test_a_preview_that_cannot_be_drawn_or_is_refused_shows_words_not_a_broken_image(page):
    new_session(page)
    drop_file(page, b"this is not a PNG at all", "broken.png", "image/png")
    item = page.locator("#previews li", has_text="broken.png")
    expect(item).to_contain_text("No preview")
    expect(item.locator("img")).to_have_count(0)
    page.get_by_role("button", name="Remove broken.png").click()
    drop_file(page, png((64, 64))[:-40], "cut.png", "image/png")  # drawn, then refused
    expect(page.locator("#previews li", has_text="cut.png").locator("img")).to_have_count(1)
    send(page, "Look")
    cut = page.locator("#previews li", has_text="cut.png")
    expect(cut.locator(".refusal")).to_contain_text("cut.png")
    expect(cut.locator("img")).to_have_count(0)  # the reason takes the preview's place
    broken = page.evaluate("""() => [...document.querySelectorAll("img")]
        .filter((img) => img.complete && img.naturalWidth === 0 && img.getAttribute("src"))
        .length""")
    assert broken == 0


def test_each_turns_token_line_is_still_there_after_a_reload(page, model):
    new_session(page)
    model.add(text("First.", usage=(120, 45)), text("Second.", usage=(300, 9)))
    send(page, "One")
    expect(page.locator(".usage")).to_have_text(["tokens: 120 in, 45 out"])
    send(page, "Two")
    expect(page.locator(".usage")).to_have_text(["tokens: 120 in, 45 out",
                                                 "tokens: 300 in, 9 out"])
    page.reload()
    expect(page.locator(".msg.assistant")).to_have_text(["First.", "Second."])
    expect(page.locator(".usage")).to_have_text(["tokens: 120 in, 45 out",
                                                 "tokens: 300 in, 9 out"])


def test_new_session_saves_nothing_until_its_first_message_which_names_it(page, model):
    empty = page.request.post("/sessions", data={}).json()["session_id"]  # as a program makes
    before = {s["id"] for s in listed(page)}
    new_session(page)
    new_session(page)  # twice: still nothing saved
    page.wait_for_timeout(300)
    assert {s["id"] for s in listed(page)} == before
    expect(page.locator(f'#sessions li[data-sid="{empty}"] .title')).to_have_text(
        "Empty session")
    expect(page.locator("#sessions")).not_to_contain_text("Untitled")

    slowly = "Here is the plan, written out slowly, one word at a time, for the board."
    model.add(trickle(text(slowly), 0.3))
    send(page, "  Plot the monthly sales\nof 2026   for the board meeting next Tuesday, please  ")
    name = "Plot the monthly sales of 2026 for the board meeting next…"
    expect(page.locator("#session-title")).to_have_text(name)  # named while it answers
    assert page.locator(".usage").count() == 0
    expect(page.locator(".msg.assistant")).to_have_text(slowly)
    made = [s for s in listed(page) if s["id"] not in before]
    assert len(made) == 1
    sid = made[0]["id"]
    assert made[0]["title"] == name
    assert page.evaluate("location.hash") == f"#{sid}"
    expect(page.locator(f'#sessions li[data-sid="{sid}"] .title')).to_have_text(name)
    expect(page.locator("#session-title")).to_have_text(name)


def test_on_a_phone_the_message_box_is_on_screen_and_sends(browser, daemon, model):
    model.script.clear()
    context = browser.new_context(base_url=daemon.url, viewport=PHONE, is_mobile=True,
                                  has_touch=True)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"/?token={TOKEN}")
    box = prompt_of(page)
    expect(box).to_be_visible()
    inside(page, box)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]

    model.add(trickle(text("A **short** answer, on a small screen.") + tool_call("snap"), 0.02),
              text("And the picture above."))
    box.click()
    page.keyboard.type("Hello from a phone")
    page.keyboard.press("Enter")
    expect(page.locator(".msg.assistant").last).to_have_text("And the picture above.")
    inside(page, box)
    inside(page, page.get_by_role("button", name="Send", exact=True))
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "phone-chat")

    toggle = page.get_by_role("button", name="Show list")  # the list folds away
    expect(page.locator("#sessions")).to_be_hidden()
    toggle.click()
    expect(page.locator("#sessions")).to_be_visible()
    expect(page.locator("#sessions")).to_contain_text("Hello from a phone")
    screenshot(page, "phone-list")
    page.get_by_role("button", name="Hide list").click()
    expect(page.locator("#sessions")).to_be_hidden()
    inside(page, box)
    context.close()
    assert not errors, errors


def inside(page: Page, locator) -> None:
    """The element is wholly on the screen, as the page is laid out now."""
    box = locator.bounding_box()
    view = page.viewport_size
    assert box and view, (box, view)
    assert box["x"] >= 0 and box["y"] >= 0, box
    assert box["x"] + box["width"] <= view["width"], (box, view)
    assert box["y"] + box["height"] <= view["height"], (box, view)


HOSTILE = ("# Plan\n\nSome **bold** words and `inline code`.\n\n"
           "```python\nprint('drawn as code')\n```\n\n"
           "- [the docs](https://example.com/docs)\n"
           "- [a trap](javascript:window.pwned=3)\n\n"
           "<img src=x onerror=window.pwned=1> <script>window.pwned=2</script>\n\n"
           "<a href=\"javascript:window.pwned=4\">raw link</a>\n")


def test_answers_are_markdown_and_nothing_in_them_runs(page, model):
    new_session(page)
    model.add(trickle(text("Drawing it now.") + tool_call("picture", {"label": "chart"}), 0.02),
              trickle(text(HOSTILE), 0.02))
    send(page, "Make me a plan")
    answer = page.locator(".msg.assistant").last
    expect(answer.locator("h1")).to_have_text("Plan")
    check_markdown(page, answer)
    expect(page.locator(".usage")).to_have_count(1)  # the whole answer is in
    screenshot(page, "desktop-chat")

    page.reload()  # the same, drawn from the history
    check_markdown(page, page.locator(".msg.assistant").last)


def check_markdown(page: Page, answer) -> None:
    expect(answer.locator("strong")).to_have_text("bold")
    expect(answer.locator("p code")).to_have_text("inline code")
    expect(answer.locator("pre code")).to_contain_text("print('drawn as code')")
    link = answer.locator("a")
    expect(link).to_have_count(1)  # only the safe one is a link
    expect(link).to_have_attribute("href", "https://example.com/docs")
    expect(link).to_have_attribute("target", "_blank")
    expect(link).to_have_attribute("rel", "noopener noreferrer")
    expect(answer).to_contain_text("[a trap](javascript:window.pwned=3)")  # shown, inert
    expect(answer).to_contain_text("<img src=x onerror=window.pwned=1>")  # as text
    expect(answer.locator("img, script, iframe")).to_have_count(0)
    assert page.evaluate("window.pwned") is None


def test_a_browser_without_the_token_gets_a_page_to_give_it(browser, daemon):
    context = browser.new_context(base_url=daemon.url, viewport=DESKTOP)
    tab = context.new_page()
    answer = tab.goto("/")
    assert answer.status == 401 and answer.headers["content-type"].startswith("text/html")
    expect(tab.get_by_role("heading")).to_contain_text("needs its token")
    screenshot(tab, "token-page")
    field = tab.get_by_label("Token")
    field.fill("not-the-token")
    field.press("Enter")
    expect(tab.get_by_role("alert")).to_contain_text("not this daemon's token")
    tab.get_by_label("Token").fill(TOKEN)
    tab.get_by_role("button", name="Open silica").click()
    expect(tab.get_by_role("button", name="New session")).to_be_visible()
    assert "token" not in tab.url
    assert tab.request.get("/sessions").ok  # the cookie the start link sets
    context.close()

    phone = browser.new_context(base_url=daemon.url, viewport=PHONE, is_mobile=True)
    tab = phone.new_page()
    tab.goto("/")
    inside(tab, tab.get_by_role("button", name="Open silica"))
    screenshot(tab, "phone-token-page")
    phone.close()

    with httpx2.Client(base_url=daemon.url) as program:  # programs keep the JSON 401
        for answer in (program.get("/", headers={"accept": "application/json"}),
                       program.get("/sessions"),
                       program.post("/sessions", headers={"accept": "text/html"})):
            assert answer.status_code == 401
            assert answer.json()["error"]["code"] == "unauthorized"


MARKDOWN_TAGS = {"p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "s",
                 "code", "pre", "blockquote", "ul", "ol", "li", "a", "img", "table", "thead",
                 "tbody", "tr", "th", "td"}
MARKDOWN_ATTRIBUTES = {"href", "src", "alt", "title", "class", "start", "target", "rel",
                       "style"}
PIECES = st.sampled_from([
    "<", ">", "&", '"', "'", "`", "```", "*", "_", "[", "]", "(", ")", "!", "#", "-", "|",
    "\n", " ", "\\", "javascript:", "JaVaScRiPt:", "vbscript:", "file:", "data:text/html,",
    "data:image/png;base64,AAAA", "<script>", "</script>", "<img src=x onerror=alert(1)>",
    "<a href=", "onerror=", "<svg onload=alert(1)>", "http://a.example/", "&#106;", "%0a",
    "<iframe src=x>", "<style>", "<!--", "-->", "<div>", "<b>", "1. ", "> ", "    "])


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(source=st.lists(PIECES | st.text(max_size=4), max_size=40).map("".join))
def test_markdown_of_any_text_makes_no_markup_that_runs(page, source):
    made = page.evaluate("""async (source) => {
        const { showMarkdown } = await import("/static/markdown.js");
        const node = document.createElement("div");
        showMarkdown(node, source);
        return [...node.querySelectorAll("*")].map((e) => [e.tagName.toLowerCase(),
            [...e.attributes].map((a) => [a.name, a.value])]);
    }""", source)
    for tag, attributes in made:
        assert tag in MARKDOWN_TAGS, (tag, source)
        for name, value in attributes:
            assert name in MARKDOWN_ATTRIBUTES, (name, source)
            if name in ("href", "src"):
                assert not re.match(r"\s*(javascript|vbscript|file):", value, re.I), value
                assert not value.lower().startswith("data:") or \
                    value.lower().startswith("data:image/"), value


class Cuttable:
    """A TCP relay to the daemon that a test can cut (every connection closed, new ones
    refused) and let through again: a network that drops, as a browser meets it."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.open = True
        self.sockets: list[socket.socket] = []
        self.heads: list[str] = []  # what each request said before its body, as sent
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if not self.open:
                client.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.sockets += [client, upstream]
            for one, other in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(one, other, one is client),
                                 daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, asks: bool) -> None:
        try:
            while data := source.recv(65536):
                if asks:
                    self.heads.append(data.split(b"\r\n\r\n")[0].decode("latin-1"))
                sink.sendall(data)
        except OSError:
            pass
        for one in (source, sink):
            with contextlib.suppress(OSError):
                one.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self.open = False
        with self.lock:
            for one in self.sockets:
                with contextlib.suppress(OSError):
                    one.shutdown(socket.SHUT_RDWR)
            self.sockets.clear()

    def close(self) -> None:
        self.cut()
        self.server.close()


def test_the_page_resumes_after_its_last_event_when_its_connection_drops(browser, daemon,
                                                                        model, tmp_path):
    model.script.clear()
    gate = tmp_path / "open"
    model.add(text("Opening. ") + tool_call("gate", {"path": str(gate)}), text("Opened."))
    relay = Cuttable(daemon.port)
    context = browser.new_context(base_url=relay.url, viewport=DESKTOP)
    try:
        tab = context.new_page()
        asked: list[str] = []
        tab.on("request", lambda r: asked.append(r.url))
        tab.goto(f"/?token={TOKEN}")
        new_session(tab)
        send(tab, "open the gate")
        expect(tab.locator("details.tool")).to_have_count(1)  # the turn waits at the gate
        sid = tab.evaluate("decodeURIComponent(location.hash.slice(1))")
        relay.cut()
        cut_at, heads_at = len(asked), len(relay.heads)
        gate.write_text("go")  # the turn ends while the page is cut off
        with daemon.client() as http:
            deadline = time.monotonic() + 60
            while http.get(f"/sessions/{sid}/history").json()["turns"][-1]["status"] \
                    != "complete":
                assert time.monotonic() < deadline
                time.sleep(0.1)
        relay.open = True
        expect(tab.locator(".msg.assistant")).to_have_text(["Opening.", "Opened."])
        expect(tab.locator("details.tool")).to_have_count(1)
        expect(tab.locator(".usage")).to_have_count(1)
        streams = [head for head in relay.heads[heads_at:]
                   if head.startswith(f"GET /sessions/{sid}/events")]
        assert streams, relay.heads[heads_at:]
        # the browser's own retry sends Last-Event-ID; the page's, once it gave up, ?after=
        assert re.search(r"(?im)^last-event-id: [0-9]+-[0-9]+\r?$|[?&]after=[0-9]+-[0-9]+ ",
                         streams[-1]), streams[-1]
        assert not [url for url in asked[cut_at:] if url.endswith("/history")]  # no redraw
    finally:
        context.close()
        relay.close()
