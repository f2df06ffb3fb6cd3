"""MCP Apps in the page of `silica serve`, in a real Chromium (Playwright), with real servers.

The daemon (a subprocess, token on) knows three MCP servers: the npm example apps
``@modelcontextprotocol/server-basic-vanillajs`` and ``server-basic-preact`` (pinned in
tests/npm), and ``mcp_fixtures/apps_server.py``, whose app tries what an app must not do.
The model is the suite's local Anthropic wire server: it calls a tool, and the page shows
the tool's app under its text result. The page is opened on 127.0.0.1; every app runs in
the sandbox page served from localhost (another origin, no token cookie) inside a frame
with ``sandbox="allow-scripts"`` only.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx2
import pytest
from playwright.sync_api import Page, expect
from serve_daemon import start_daemon
from test_mcp_npm import npm_servers  # noqa: F401  (the session's npm install, a fixture)
from wire import WireServer, anthropic_server, text, tool_call

expect.set_options(timeout=60_000)  # node's first start of a server on a loaded machine

TOKEN = "apps-secret-token-for-the-page"
HOSTILE = Path(__file__).parent / "mcp_fixtures" / "apps_server.py"


class Counter:
    """A local HTTP server that counts the requests it gets (and lets any origin read)."""

    def __init__(self) -> None:
        self.hits = 0
        counter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                counter.hits += 1
                self.send_response(200)
                self.send_header("Access-Control-Allow-Origin", "*")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def counters() -> Iterator[tuple[Counter, Counter]]:
    allowed, blocked = Counter(), Counter()
    yield allowed, blocked
    allowed.close()
    blocked.close()


@pytest.fixture(scope="module")
def model() -> Iterator[WireServer]:
    with anthropic_server() as srv:
        yield srv


@pytest.fixture(scope="module")
def daemon(model, npm_servers, counters, tmp_path_factory):  # noqa: F811
    home = tmp_path_factory.mktemp("serve-apps") / "home"
    home.mkdir()
    allowed, _ = counters

    def server(name: str, command: str, args: list[str]) -> str:
        return (f"[mcp.servers.{name}]\ncommand = {json.dumps(command)}\n"
                f"args = {json.dumps(args)}\nstartup_timeout = 120\n")

    node = shutil.which("node") or "node"
    (home / "config.toml").write_text(
        '[sandbox]\nmode = "off"\n[mcp]\ntimeout = 60\n'
        + server("basic", node, [str(npm_servers / "server-basic-vanillajs" / "dist"
                                     / "index.js"), "--stdio"])
        + server("preact", node, [str(npm_servers / "server-basic-preact" / "dist"
                                      / "index.js"), "--stdio"])
        + server("hostile", sys.executable, [str(HOSTILE), "--connect", allowed.url]))
    env = {**model.env, "SILICA_PROVIDER": "anthropic", "SILICA_HOME": str(home),
           "SILICA_TOOLS_DIR": str(home / "tools")}
    with start_daemon(home, env=env, cwd=home.parent, token=TOKEN) as served:
        yield served


@pytest.fixture
def page(browser, daemon, model) -> Iterator[Page]:
    model.script.clear()
    context = browser.new_context(base_url=daemon.url)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.goto(f"/?token={TOKEN}")
    yield tab
    context.close()
    assert not errors, errors


def ask(page: Page, model: WireServer, message: str, *replies) -> None:
    """A new session; the person sends ``message`` and the model answers ``replies``."""
    model.add(*replies)
    page.get_by_role("button", name="New session").click()
    expect(page.get_by_role("textbox", name="Message")).to_be_focused()
    page.get_by_role("textbox", name="Message").fill(message)
    page.get_by_role("button", name="Send", exact=True).click()


def sandbox_url(daemon) -> str:
    return f"http://localhost:{daemon.port}"


def test_the_basic_example_app_renders_sandboxed_gets_its_result_and_calls_its_server(
        page, model, daemon):
    ask(page, model, "What time is it?", tool_call("basic__get-time", {}), text("Shown."))
    tool = page.locator("details.tool").filter(has_text="basic__get-time")
    expect(page.locator(".msg.assistant").last).to_have_text("Shown.")
    expect(tool.locator(".output pre")).to_contain_text('"time"')  # the text result stays
    outer = tool.locator("iframe.app")
    expect(outer).to_have_attribute("sandbox", "allow-scripts allow-same-origin")
    expect(outer).to_have_attribute("src", re.compile(
        "^" + re.escape(sandbox_url(daemon)) + "/apps/sandbox[?]"))
    sandbox = tool.frame_locator("iframe.app")
    expect(sandbox.locator("iframe")).to_have_attribute("sandbox", "allow-scripts")
    app = sandbox.frame_locator("iframe")
    shown = app.locator("#server-time")
    expect(shown).to_have_text(re.compile(r"^\d{4}-\d\d-\d\dT"))  # from the tool result
    expect(outer).not_to_have_css("height", "120px")  # sized as the app asked (size-changed)
    first = shown.text_content()
    page.wait_for_timeout(20)  # the server's clock must move on for the next answer to differ
    app.get_by_role("button", name="Get Server Time").click()  # the app calls its server
    expect(shown).not_to_have_text(first or "")
    expect(shown).to_have_text(re.compile(r"^\d{4}-\d\d-\d\dT"))

    app.get_by_role("button", name="Send Message").click()  # ui/message: into the box
    expect(page.get_by_role("textbox", name="Message")).to_have_value("This is message text.")

    page.reload()  # from the history: the text and the app again
    tool = page.locator("details.tool").filter(has_text="basic__get-time")
    expect(tool.locator(".output pre")).to_contain_text('"time"')
    expect(tool.frame_locator("iframe.app").frame_locator("iframe")
           .locator("#server-time")).to_have_text(first or "")


def test_a_page_opened_on_localhost_gets_its_sandbox_from_127_0_0_1(browser, daemon, model):
    model.script.clear()
    context = browser.new_context(base_url=f"http://localhost:{daemon.port}")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"/?token={TOKEN}")
    ask(page, model, "Time, from the other name?", tool_call("basic__get-time", {}),
        text("Shown."))
    tool = page.locator("details.tool").filter(has_text="basic__get-time")
    expect(tool.locator("iframe.app")).to_have_attribute("src", re.compile(
        f"^http://127[.]0[.]0[.]1:{daemon.port}/apps/sandbox[?]"))
    app = tool.frame_locator("iframe.app").frame_locator("iframe")
    expect(app.locator("#server-time")).to_have_text(re.compile(r"^\d{4}-\d\d-\d\dT"))
    context.close()
    assert not errors, errors


def test_a_second_example_app_renders(page, model):
    ask(page, model, "And with preact?", tool_call("preact__get-time", {}), text("Again."))
    tool = page.locator("details.tool").filter(has_text="preact__get-time")
    app = tool.frame_locator("iframe.app").frame_locator("iframe")
    expect(app.get_by_text(re.compile(r"\d{4}-\d\d-\d\dT")).first).to_be_visible()


def test_a_hostile_app_reaches_neither_the_page_nor_the_daemon_nor_beyond_its_csp(
        page, model, daemon, counters):
    allowed, blocked = counters
    before = allowed.hits, blocked.hits
    ask(page, model, "probe", tool_call("hostile__probe", {
        "daemon": daemon.url, "sandbox": sandbox_url(daemon), "allowed": allowed.url,
        "blocked": blocked.url}), text("Probed."))
    tool = page.locator("details.tool").filter(has_text="hostile__probe")
    out = tool.frame_locator("iframe.app").frame_locator("iframe").locator("#out")
    expect(out).to_contain_text('"done":true')
    got = json.loads(out.text_content() or "{}")
    assert got["host"]["name"] == "silica"
    assert got["result"]["structuredContent"] == {"probed": True}
    assert got["parent"].startswith("blocked") and got["top"].startswith("blocked")
    assert got["daemon"] == "failed" and got["sandbox"] == "failed"  # CSP: no connections
    assert got["allowed"] == "status 200" and allowed.hits == before[0] + 1  # as declared
    assert got["blocked"] == "failed" and blocked.hits == before[1]
    assert any(v.startswith("connect-src") and blocked.url in v for v in got["violations"])
    assert json.loads(got["app_tool"]["result"]["content"][0]["text"]) == {"app_tool": "ran"}
    assert "not visible to apps" in got["model_tool"]["error"]["message"]
    assert "no tool 'get-time'" in got["other_server"]["error"]["message"]
    for link in ("loopback_link", "script_link", "data_link"):
        assert "error" in got[link], got[link]
    assert len(page.context.pages) == 1  # no link was opened

    # the app-only tool was never offered to the model
    offered = {t["name"] for t in model.requests[-1].get("tools", [])}
    assert "hostile__probe" in offered and "hostile__app_tool" not in offered


def test_the_sandbox_host_serves_the_sandbox_page_only_and_never_the_api(daemon):
    page = f"http://127.0.0.1:{daemon.port}"
    # the daemon listens on 127.0.0.1; what names it localhost is the Host a browser sends
    with httpx2.Client(base_url=page, timeout=30,
                       headers={"Host": f"localhost:{daemon.port}"}) as other:
        assert other.get("/sessions").status_code == 401  # no cookie there, no token
        got = other.get("/apps/sandbox", params={"host": page, "csp": json.dumps(
            {"connectDomains": ["https://api.example.com", page]}), "x": "1"})
        assert got.status_code == 200, got.text
        policy = got.headers["content-security-policy"]
        assert "connect-src https://api.example.com;" in policy
        assert f"frame-ancestors {page}" in policy and "set-cookie" not in got.headers
    with httpx2.Client(base_url=page, timeout=30) as same:  # never for a page of its own name
        refused = same.get("/apps/sandbox", params={"host": page})
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_sandbox"


def peak_kib(pid: int) -> int:
    """The process's peak resident memory (VmHWM), in KiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)[1])  # type: ignore[index]


def test_an_app_that_is_not_html_or_is_50_mb_is_refused_and_the_session_goes_on(
        page, model, daemon):
    ask(page, model, "show it", tool_call("hostile__not_html", {}), text("Done."))
    expect(page.locator(".msg.assistant").last).to_have_text("Done.")
    plain = page.locator("details.tool").filter(has_text="hostile__not_html")
    expect(plain.locator(".app-note")).to_contain_text("not an MCP App")
    expect(plain.locator(".output pre")).to_contain_text("not_html")  # the text stays

    before = peak_kib(daemon.proc.pid)  # the servers and the daemon are warm now
    model.add(tool_call("hostile__huge", {}), text("Done again."))
    page.get_by_role("textbox", name="Message").fill("and the big one")
    page.get_by_role("button", name="Send", exact=True).click()
    huge = page.locator("details.tool").filter(has_text="hostile__huge")
    expect(huge.locator(".app-note")).to_contain_text("over 4,194,304 bytes")
    grown = peak_kib(daemon.proc.pid) - before
    print(f"the daemon's peak memory grew by {grown / 1024:.1f} MiB")
    assert grown < 40 * 1024  # the 50 MB answer was cut off while read, never held whole
    expect(page.locator("iframe.app")).to_have_count(0)

    sid = page.evaluate("location.hash.slice(1)")
    with daemon.client() as http:
        history = http.get(f"/sessions/{sid}/history").json()
        calls = {i["name"]: i["id"] for m in history["messages"] for i in m["content"]
                 if i["type"] == "tool_call"}
        plain_got = http.get(f"/sessions/{sid}/apps/{calls['hostile__not_html']}")
        huge_got = http.get(f"/sessions/{sid}/apps/{calls['hostile__huge']}")
    assert plain_got.status_code == 415 and plain_got.json()["error"]["code"] == "app_not_html"
    assert huge_got.status_code == 413 and huge_got.json()["error"]["code"] == "app_too_large"

    model.add(text("Still here."))  # the session is still usable
    page.get_by_role("textbox", name="Message").fill("and now?")
    page.get_by_role("button", name="Send", exact=True).click()
    expect(page.locator(".msg.assistant").last).to_have_text("Still here.")


def test_the_apps_routes_refuse_what_they_cannot_answer_with_a_clear_error(daemon):
    with daemon.client() as http:
        sid = http.post("/sessions", json={}).json()["session_id"]
        unknown = http.get(f"/sessions/{sid}/apps/toolu_nope")
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "no_call"
        gone = http.get("/sessions/nope-nope/apps/toolu_nope")
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "no_session"
        bad = http.post(f"/sessions/{sid}/apps/toolu_nope/calls", json={"name": 3})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_field"
        extra = http.post(f"/sessions/{sid}/apps/toolu_nope/calls",
                          json={"name": "app_tool", "as": "root"})
        assert extra.status_code == 400 and extra.json()["error"]["code"] == "unknown_field"
    with httpx2.Client(base_url=daemon.url, timeout=30) as stranger:  # no token
        assert stranger.get(f"/sessions/{sid}/apps/toolu_nope").status_code == 401
