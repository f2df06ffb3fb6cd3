"""Remote MCP servers behind OAuth 2.1, through the real commands: ``silica tools list`` and
``tools run`` log in on their own where config says ``approve = "direct"``, ``silica mcp
login`` prints the URL and takes the browser's redirect, tokens are kept 0600, refreshed when
they expire, deleted by ``logout``, never shown and never in a tool's environment; a refused
login, garbage from the token endpoint and a metadata issuer that does not match are each one
clear error.

The server is ``mcp_fixtures/oauth_server.py``: an MCP server and its authorization server,
which refuses a request without PKCE S256, the right ``resource`` or the registered
``redirect_uri`` (logged as ``refused ...``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
from conftest import wait_for_port, write_tool
from hypothesis import given, settings
from hypothesis import strategies as st

from silica.config import ConfigError, load_settings
from silica.mcp.oauth import LoginFailed, callback_result
from silica.mcp.tokens import AUTH_DIR

SERVER = Path(__file__).parent / "mcp_fixtures" / "oauth_server.py"
WAIT = 120


def silica(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          text=True, cwd=cwd, env=os.environ.copy(), timeout=WAIT)


class AuthServer:
    def __init__(self, port: int, log: Path) -> None:
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.log = log

    def events(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def start_server(tmp_path, free_port, errlog):
    started: list[subprocess.Popen] = []

    def start(*flags: str) -> AuthServer:
        log = tmp_path / f"server-{len(started)}.log"
        started.append(subprocess.Popen(
            [sys.executable, str(SERVER), str(free_port), "--log", str(log), *flags],
            stdout=errlog, stderr=errlog))
        wait_for_port(free_port)
        return AuthServer(free_port, log)

    yield start
    for process in started:
        process.kill()
        process.wait()


def configure(home: Path, servers: dict[str, tuple[str, str | None]]) -> None:
    """config.toml with ``name = (url, approve)`` servers (approve ``None``: no oauth table)."""
    home.mkdir(parents=True, exist_ok=True)
    text = "[sandbox]\nmode = \"off\"\n"
    for name, (url, approve) in servers.items():
        text += f'[mcp.servers.{name}]\nurl = "{url}"\n'
        if approve is not None:
            text += f'[mcp.servers.{name}.oauth]\napprove = "{approve}"\n'
    (home / "config.toml").write_text(text)


def token_files(home: Path) -> list[Path]:
    folder = home / AUTH_DIR
    return sorted(folder.glob("*.json")) if folder.exists() else []


def stored_tokens(home: Path) -> list[str]:
    found = []
    for path in token_files(home):
        data = json.loads(path.read_text())
        tokens = data.get("tokens") or {}
        found += [tokens[k] for k in ("access_token", "refresh_token") if k in tokens]
    return found


def browser_login(name: str, *extra: str) -> tuple[int, str, str]:
    """``silica mcp login NAME --no-browser``, with a person's browser played by an HTTP GET
    of the URL it prints (following the redirects back to silica's listener)."""
    process = subprocess.Popen([sys.executable, "-m", "silica", "mcp", "login", name,
                                "--no-browser", "--timeout", "60", *extra],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=os.environ.copy())
    assert process.stderr is not None
    said = ""
    for line in process.stderr:
        said += line
        if line.startswith("http://"):
            httpx2.get(line.strip(), follow_redirects=True, timeout=30)
            break
    out, rest = process.communicate(timeout=WAIT)
    return process.returncode, out, said + rest


def test_direct_login_through_tools_list_and_run_keeps_tokens_private(home, start_server):
    server = start_server()
    configure(home, {"remote": (server.url, "direct")})

    listed = silica("tools", "list", "--json")
    run = silica("tools", "run", "remote__whoami")

    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["remote__whoami"]["status"] == "ok"
    assert run.returncode == 0 and "hello from the protected server" in run.stdout, run.stderr
    events = server.events()
    assert not [e for e in events if e.startswith("refused")], events
    assert events[:3] == ["register", "authorize", "token authorization_code"]
    assert len([e for e in events if e.startswith("token")]) == 1  # the second run reused it
    [path] = token_files(home)
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    tokens = stored_tokens(home)
    assert tokens and f"mcp {tokens[0]}" in events
    for done in (listed, run):
        assert not any(t in done.stdout + done.stderr for t in tokens)


def test_login_by_the_printed_url_then_tools_use_it(home, start_server):
    server = start_server()
    configure(home, {"remote": (server.url, "browser")})

    code, out, err = browser_login("remote")
    run = silica("tools", "run", "remote__whoami")

    assert code == 0, err
    assert "logged in to the MCP server 'remote'" in out
    assert "code_challenge_method=S256" in err and "resource=" in err
    assert run.returncode == 0 and "hello from the protected server" in run.stdout, run.stderr
    assert not [e for e in server.events() if e.startswith("refused")]
    assert not any(t in out + err + run.stdout + run.stderr for t in stored_tokens(home))


def test_a_needed_login_is_a_clear_error_and_other_servers_still_work(home, start_server):
    server = start_server()  # "remote" has no oauth table: its 401 says it needs a login
    configure(home, {"remote": (server.url, None), "other": (server.url, "direct")})

    run = silica("tools", "run", "remote__whoami")
    listed = silica("tools", "list", "--json")

    assert run.returncode == 1
    assert "the MCP server 'remote' needs a login: run silica mcp login remote" in run.stderr
    assert "Traceback" not in run.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["other__whoami"]["status"] == "ok"
    assert "run silica mcp login remote" in rows["remote__*"]["reason"]


def test_an_expired_token_is_refreshed_and_saved(home, start_server):
    server = start_server("--expires", "1")
    configure(home, {"remote": (server.url, "browser")})
    assert browser_login("remote")[0] == 0
    [path] = token_files(home)
    before = json.loads(path.read_text())
    while time.time() <= before["expires_at"] + 0.5:  # until the server refuses it too
        time.sleep(0.1)

    run = silica("tools", "run", "remote__whoami")

    assert run.returncode == 0 and "hello from the protected server" in run.stdout, run.stderr
    after = json.loads(path.read_text())
    assert "token refresh_token" in server.events()
    assert after["tokens"]["access_token"] != before["tokens"]["access_token"]
    assert f"mcp {after['tokens']['access_token']}" in server.events()
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_refused_login_is_a_clear_error(home, start_server):
    server = start_server("--refuse")
    configure(home, {"remote": (server.url, "browser")})

    code, out, err = browser_login("remote")

    assert code == 1
    assert "refused the login (access_denied: the person said no)" in err
    assert "run silica mcp login remote" in err and "Traceback" not in err
    assert stored_tokens(home) == []


def test_garbage_from_the_token_endpoint_is_a_clear_error(home, start_server):
    server = start_server("--garbage")
    configure(home, {"remote": (server.url, "direct")})

    login = silica("mcp", "login", "remote")
    run = silica("tools", "run", "remote__whoami")

    for done in (login, run):
        assert done.returncode == 1
        assert ("the authorization server of the MCP server 'remote' answered the token "
                "request with something that is not a token") in done.stderr
        assert "Traceback" not in done.stderr and "Service Unavailable" not in done.stderr
    assert stored_tokens(home) == []


def test_a_metadata_issuer_that_does_not_match_is_refused(home, start_server):
    server = start_server("--bad-issuer")
    configure(home, {"remote": (server.url, "direct")})

    login = silica("mcp", "login", "remote")

    assert login.returncode == 1
    assert "names another issuer than the one silica asked" in login.stderr
    assert "authorize" not in server.events()  # never sent to the impostor's page
    assert stored_tokens(home) == []


def test_logout_deletes_the_tokens(home, start_server):
    server = start_server()
    configure(home, {"remote": (server.url, "direct")})
    assert silica("mcp", "login", "remote").returncode == 0
    assert stored_tokens(home)
    configure(home, {"remote": (server.url, "browser")})

    out = silica("mcp", "logout", "remote")
    again = silica("mcp", "logout", "remote")
    run = silica("tools", "run", "remote__whoami")

    assert out.returncode == 0 and "logged out of the MCP server 'remote'" in out.stdout
    assert again.returncode == 0 and "nothing to delete" in again.stdout
    assert stored_tokens(home) == []
    assert "run silica mcp login remote" in run.stderr


def test_the_token_is_not_in_a_tools_environment(home, start_server, user_tools):
    server = start_server()
    configure(home, {"remote": (server.url, "direct")})
    assert silica("mcp", "login", "remote").returncode == 0
    write_tool(user_tools, "snoop.py", """\
        import json, os, sys
        if "--toolspec" in sys.argv:
            print(json.dumps({"name": "snoop", "description": "d",
                              "input_schema": {"type": "object", "properties": {}}}))
        else:
            print(json.dumps(dict(os.environ)))
        """, deps="")

    run = silica("tools", "run", "snoop")

    assert run.returncode == 0, run.stderr
    assert "SILICA_HOME" in run.stdout or "PATH" in run.stdout
    tokens = stored_tokens(home)
    assert tokens and not any(t in run.stdout for t in tokens)


def test_oauth_goes_with_a_url_only(home):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        '[mcp.servers.x]\ncommand = "srv"\n[mcp.servers.x.oauth]\napprove = "direct"\n')
    with pytest.raises(ConfigError, match="oauth"):
        load_settings()


def test_login_names_an_unknown_server(home):
    configure(home, {})
    done = silica("mcp", "login", "nosuch")
    assert done.returncode == 2 and "no MCP server named 'nosuch'" in done.stderr


# -- the redirect's query, parsed --------------------------------------------------------

_VALUES = st.text(min_size=0, max_size=20)


@settings(deadline=None)  # the first example imports the SDK
@given(code=st.text(min_size=1, max_size=40), state=_VALUES,
       extra=st.dictionaries(st.sampled_from(["iss", "scope", "x"]), _VALUES, max_size=3))
def test_a_callback_with_a_code_gives_it_back_exactly(code, state, extra):
    from urllib.parse import urlencode

    result = callback_result("s", urlencode({"code": code, "state": state, **extra}))
    assert result.code == code and result.state == state
    assert result.iss == extra.get("iss")


@settings(deadline=None)  # the first example imports the SDK
@given(query=st.text(max_size=200))
def test_any_callback_query_gives_a_code_or_login_failed(query):
    try:
        result = callback_result("s", query)
    except LoginFailed as exc:
        assert "run silica mcp login s" in str(exc)
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x1b]", str(exc))
    else:
        assert result.code


@settings(deadline=None)  # the first example imports the SDK
@given(error=st.text(min_size=1, max_size=50), code=_VALUES)
def test_a_callback_with_an_error_is_always_a_refusal(error, code):
    from urllib.parse import urlencode

    with pytest.raises(LoginFailed, match="refused the login"):
        callback_result("s", urlencode({"error": error, "code": code}))


def test_a_pre_registered_client_sends_its_secret_from_the_environment(home, start_server,
                                                                       monkeypatch):
    server = start_server("--client", "pre:s3cret-from-env")
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f'[sandbox]\nmode = "off"\n[mcp.servers.remote]\nurl = "{server.url}"\n'
        '[mcp.servers.remote.oauth]\napprove = "direct"\nclient_id = "pre"\n'
        'client_secret = "${SILICA_TEST_SECRET}"\n')
    monkeypatch.setenv("SILICA_TEST_SECRET", "s3cret-from-env")

    run = silica("tools", "run", "remote__whoami")

    assert run.returncode == 0 and "hello from the protected server" in run.stdout, run.stderr
    events = server.events()
    assert "register" not in events and "token authorization_code" in events
    assert not [e for e in events if e.startswith("refused")], events
    assert all("s3cret-from-env" not in p.read_text() for p in token_files(home))
    monkeypatch.delenv("SILICA_TEST_SECRET")
    for path in token_files(home):
        path.unlink()
    unset = silica("tools", "run", "remote__whoami")
    assert "needs the environment variable SILICA_TEST_SECRET" in unset.stderr


def test_ctrl_c_while_login_waits_ends_it_cleanly(home, start_server):
    server = start_server()
    configure(home, {"remote": (server.url, "browser")})
    process = subprocess.Popen(
        [sys.executable, "-m", "silica", "mcp", "login", "remote", "--no-browser"],
        stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert process.stderr is not None
    for line in process.stderr:
        if line.startswith("Waiting for the redirect"):
            break

    process.send_signal(signal.SIGINT)

    rest = process.stderr.read()
    assert process.wait(WAIT) == 130
    assert "login to 'remote' interrupted; no token was saved" in rest
    assert "Traceback" not in rest and stored_tokens(home) == []


def test_ask_with_a_server_that_needs_a_login_says_so_and_does_not_wait(home, start_server,
                                                                         project):
    from wire import anthropic_server, text, tool_call

    server = start_server()
    configure(home, {"remote": (server.url, None)})
    script = [tool_call("remote__whoami", {}), text("It could not.")]
    with anthropic_server(script) as srv:
        done = subprocess.run([sys.executable, "-m", "silica", "ask", "who am i"],
                              capture_output=True, text=True, cwd=project,
                              env={**os.environ, **srv.env}, timeout=WAIT)

    assert "run silica mcp login remote" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert [e for e in server.events() if e.startswith("mcp")] == []
