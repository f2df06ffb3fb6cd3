"""The page of `silica serve` in a real browser: Debian's chromium driven by Playwright.

A real daemon (`python -m silica serve`) runs in a subprocess; its model is the suite's local
Anthropic wire server, and its one tool is a script that answers with a PNG. Each test does
what a person does in the browser and checks what they would see.
"""

from __future__ import annotations

import base64
import io
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from conftest import script_tool, simple_spec
from PIL import Image
from playwright.sync_api import Browser, Page, expect, sync_playwright
from serve_daemon import daemon_env as serve_env
from serve_daemon import start_daemon
from wire import WireServer, anthropic_server, error, text, tool_call, trickle

# the first call of a tool builds its environment with uv: allow for it
expect.set_options(timeout=30_000)

TOOL_IMAGE = (300, 200)
TOKEN = "page-secret"


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


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=shutil.which("chromium"),
                                     args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, daemon, model) -> Iterator[Page]:
    """A fresh browser tab on the daemon; fails the test on any script error in the page."""
    model.script.clear()  # a reply a failed test left behind must not answer this one
    context = browser.new_context(base_url=daemon.url)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.goto(f"/?token={TOKEN}")
    yield tab
    context.close()
    assert not errors, errors


def prompt_of(page: Page):
    return page.get_by_role("textbox", name="Message")


def new_session(page: Page) -> str:
    page.get_by_role("button", name="New session").click()
    expect(prompt_of(page)).to_be_focused()
    sid = page.evaluate("location.hash.slice(1)")
    assert sid
    expect(page.locator(f'#sessions li[data-sid="{sid}"] .open')).to_have_attribute(
        "aria-current", "true")
    return sid


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
    expect(tool.locator("summary")).to_contain_text("picture")
    expect(tool.locator("summary")).to_contain_text("done · 1 image")
    expect(tool).not_to_have_attribute("open", "")
    tool.locator("summary").click()
    expect(tool.locator("pre.input")).to_contain_text('"label": "one"')
    img = tool.locator(".output img")
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
    tool.locator("summary").click()
    expect(tool.locator("pre.input")).to_contain_text('"label": "one"')
    loaded(tool.locator(".output img"))


def test_a_refused_image_is_named_next_to_its_preview_and_nothing_is_sent(page, model):
    sid = new_session(page)
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

    history = page.request.get(f"/sessions/{sid}/history").json()
    assert history["messages"] == []  # nothing was stored
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
    expect(page.locator("#composer")).to_be_hidden()
    assert page.request.get(f"/sessions/{sid}/history").status == 404


def test_model_and_tool_text_is_shown_as_text_and_errors_in_the_chat(page, model):
    new_session(page)
    markup = "<img src=x onerror=window.pwned=1><b>bold</b>"
    model.add(tool_call("picture", {"label": markup}), text(markup))
    prompt = prompt_of(page)
    prompt.fill("Show me markup")
    prompt.press("Enter")
    expect(page.locator(".msg.assistant")).to_have_text(markup)
    page.locator("details.tool summary").click()
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
