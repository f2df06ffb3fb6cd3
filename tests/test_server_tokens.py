"""The tokens of `silica serve` and `silica mcp serve --http` (issue 19, defect 8 and "Also
bound"): a random token per start by default, shown in the link printed; ``--no-token`` only
by choice, with a warning; secrets given as files, variables or at a prompt; and a secret
given on the command line anyway warned about and masked in ``/proc/<pid>/cmdline``.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote

import httpx2
import pytest
from conftest import wait_for_port
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from serve_daemon import Daemon, daemon_env, free_port, launch

TOKEN = "file-token-0123456789abcdef"
REDIS_SERVER = "/usr/bin/redis-server"


def run_serve(home: Path, *args: str, env: dict[str, str] | None = None,
              stdin: bytes | None = None) -> Daemon:
    """``silica serve --port P ARGS`` as a user would start it (no token unless given); its
    ``token`` is the one in the link it printed."""
    daemon = launch(home, list(args), env, stdin=b"" if stdin is None else stdin)
    found = re.search(r"\?token=(\S+)$", daemon.start_line)
    daemon.token = unquote(found.group(1)) if found else None
    return daemon


def status(daemon: Daemon, path: str = "/sessions", **headers: str) -> int:
    with httpx2.Client(base_url=daemon.url, timeout=30) as client:
        return client.get(path, headers=headers).status_code


def cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


# -- silica serve ---------------------------------------------------------------------------


def test_serve_makes_a_token_each_start_and_the_printed_link_opens_the_page(home):
    with run_serve(home) as daemon:
        token = daemon.token
        assert token and len(token) >= 32, daemon.start_line
        assert daemon.start_line == \
            f"silica serve: http://127.0.0.1:{daemon.port}/?token={token}"
        assert status(daemon) == 401 and status(daemon, "/") == 401
        assert status(daemon, Authorization=f"Bearer {token}") == 200
        with httpx2.Client(base_url=daemon.url, timeout=30) as browser:
            login = browser.get(f"/?token={token}")
            assert login.status_code == 303 and "silica_token=" in login.headers["set-cookie"]
            assert browser.get("/").status_code == 200  # the page, by its cookie
            assert browser.get("/sessions").status_code == 200
        assert "warning" not in daemon.stderr()
    with run_serve(home) as again:
        assert again.token and again.token != token


def test_no_token_is_a_choice_that_warns(home):
    with run_serve(home, "--no-token") as daemon:
        assert daemon.token is None
        assert daemon.start_line == f"silica serve: http://127.0.0.1:{daemon.port}/"
        assert status(daemon) == 200
        said = daemon.stderr()
    assert "warning: --no-token: every user of this machine can run your tools" in said


def test_a_token_on_the_command_line_warns_and_is_masked_in_the_process_title(home):
    given = "cmdline-token-0123456789abcdef"
    with run_serve(home, "--token", given) as daemon:
        shown = cmdline(daemon.proc.pid)
        assert daemon.token == given
        assert status(daemon, Authorization=f"Bearer {given}") == 200
        said = daemon.stderr()
    assert given.encode() not in shown
    assert b"--token\0" + b"*" * len(given) + b"\0" in shown
    assert "--token on the command line can be read by every user" in said
    assert "--token-file PATH or $SILICA_SERVE_TOKEN" in said


def test_the_token_from_a_file_from_stdin_and_from_the_variable(home, tmp_path):
    private = tmp_path / "token"
    private.write_text(TOKEN + "\n")
    private.chmod(0o600)
    with run_serve(home, "--token-file", str(private)) as daemon:
        assert daemon.token == TOKEN and status(daemon, Authorization=f"Bearer {TOKEN}") == 200
        assert status(daemon) == 401
        assert "warning" not in daemon.stderr()
        assert TOKEN.encode() not in cmdline(daemon.proc.pid)
    private.chmod(0o644)
    with run_serve(home, "--token-file", str(private)) as daemon:
        assert daemon.token == TOKEN
        assert f"chmod 600 {private}" in daemon.stderr()
    with run_serve(home, "--token-file", "-", stdin=f"{TOKEN}\n".encode()) as daemon:
        assert daemon.token == TOKEN and status(daemon, Authorization=f"Bearer {TOKEN}") == 200
    with run_serve(home, env={"SILICA_SERVE_TOKEN": TOKEN}) as daemon:
        assert daemon.token == TOKEN and "warning" not in daemon.stderr()


@pytest.mark.parametrize("args, said", [
    (["--token-file", "TOKEN", "--no-token"], "--token-file and --no-token contradict"),
    (["--token", TOKEN, "--token-file", "TOKEN"], "--token-file and --token contradict"),
    (["--token-file", "missing"], "cannot read the token from missing"),
    (["--token-file", "EMPTY"], "no token in"),
])
def test_token_options_that_cannot_work_are_clear_errors(home, tmp_path, args, said):
    (tmp_path / "TOKEN").write_text(TOKEN)
    (tmp_path / "EMPTY").write_text("\n")
    done = subprocess.run([sys.executable, "-m", "silica", "serve", "--port", str(free_port()),
                           *args], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=daemon_env(home))
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.fixture
def redis_with_password(tmp_path):
    """A ``redis-server`` that needs the password ``PASSWORD``: its port."""
    port = free_port()
    proc = subprocess.Popen([REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", str(tmp_path),
                             "--requirepass", "redis-pw-0123456789"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        yield port
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_redis_password_on_the_command_line_warns_and_is_masked(home, redis_with_password):
    url = f"redis://:redis-pw-0123456789@127.0.0.1:{redis_with_password}/0"
    with run_serve(home, "--redis", url) as daemon:
        shown = cmdline(daemon.proc.pid)
        assert status(daemon, Authorization=f"Bearer {daemon.token}") == 200
        said = daemon.stderr()
    assert b"redis-pw-0123456789" not in shown
    assert f"redis://{'*' * len(':redis-pw-0123456789')}@127.0.0.1".encode() in shown
    assert "--redis holds a password" in said and "$SILICA_SERVE_REDIS" in said
    with run_serve(home, env={"SILICA_SERVE_REDIS": url}) as daemon:
        assert status(daemon, Authorization=f"Bearer {daemon.token}") == 200
        assert "warning" not in daemon.stderr()
        assert b"redis-pw" not in Path(f"/proc/{daemon.proc.pid}/environ").read_bytes()


# -- silica mcp serve --http ----------------------------------------------------------------


class McpHttp:
    """``silica mcp serve --http --port 0 ARGS``: ``url``, ``stderr()``, ``proc``."""

    def __init__(self, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.err = tmp_path / f"mcp-{time.monotonic_ns()}.err"
        base = {k: v for k, v in os.environ.items() if k != "SILICA_MCP_TOKEN"}
        with open(self.err, "w") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "silica", "mcp", "serve",
                                          "--http", "--port", "0", *args],
                                         env={**base, **(env or {})}, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + 120
        while not (found := re.search(r"serving MCP at (http://\S+)", self.stderr())):
            assert self.proc.poll() is None and time.monotonic() < deadline, self.stderr()
            time.sleep(0.1)
        self.url = found.group(1)

    def stderr(self) -> str:
        return self.err.read_text()

    def __enter__(self) -> McpHttp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def tools_listed(url: str, token: str | None) -> list[str]:
    async def act():
        client = create_mcp_http_client(
            headers={"Authorization": f"Bearer {token}"} if token else None)
        async with client, streamable_http_client(url, http_client=client) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            return [t.name for t in (await session.list_tools()).tools]

    return asyncio.run(asyncio.wait_for(act(), 120))


def post_initialize(url: str, **headers: str) -> httpx2.Response:
    return httpx2.post(url, timeout=30, headers={
        "Accept": "application/json, text/event-stream", **headers}, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}})


def test_mcp_http_needs_the_token_it_prints(tmp_path):
    with McpHttp(tmp_path) as server:
        said = server.stderr()
        token = re.search(r'Authorization: Bearer ([^"\s]+)', said).group(1)
        assert len(token) >= 32 and "--token-file PATH or $SILICA_MCP_TOKEN" in said
        assert post_initialize(server.url).status_code == 401
        refused = post_initialize(server.url, Authorization="Bearer wrong")
        assert refused.status_code == 401 and "Bearer" in refused.headers["www-authenticate"]
        assert "read_file" in tools_listed(server.url, token)


def test_mcp_http_token_from_a_file_or_the_variable_or_none(tmp_path):
    private = tmp_path / "token"
    private.write_text(TOKEN)
    private.chmod(0o600)
    with McpHttp(tmp_path, "--token-file", str(private)) as server:
        assert "Authorization: Bearer" not in server.stderr()  # given: not printed
        assert post_initialize(server.url).status_code == 401
        assert "read_file" in tools_listed(server.url, TOKEN)
    with McpHttp(tmp_path, env={"SILICA_MCP_TOKEN": TOKEN}) as server:
        assert post_initialize(server.url).status_code == 401
        assert "read_file" in tools_listed(server.url, TOKEN)
    with McpHttp(tmp_path, "--no-token") as server:
        assert "warning: --no-token: every user of this machine" in server.stderr()
        assert "read_file" in tools_listed(server.url, None)


def test_the_token_is_asked_for_without_echo_at_a_terminal(home):
    import pty
    import select
    import signal

    typed = "typed-token-0123456789abcdef"
    pid, fd = pty.fork()
    if pid == 0:  # the child: silica serve on a terminal
        os.environ.update(daemon_env(home))
        os.execv(sys.executable, [sys.executable, "-m", "silica", "serve", "--port", "0",
                                  "--token-file", "-"])
    shown, answered = b"", False
    try:
        deadline = time.monotonic() + 120
        while b"silica serve: http" not in shown or not shown.endswith(b"\n"):
            assert time.monotonic() < deadline, shown
            if select.select([fd], [], [], 0.5)[0]:
                shown += os.read(fd, 4096)
            if not answered and b"token: " in shown:
                os.write(fd, typed.encode() + b"\n")
                answered = True
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)
    prompt, _, start = shown.decode().partition("silica serve: ")
    assert prompt.strip() == "token:"  # what was typed was not echoed
    assert start.strip().endswith(f"/?token={typed}")
