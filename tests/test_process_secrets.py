"""No silica process shows its secrets in /proc/<pid>/environ (issue 19, defect 3).

A tool that walks up its parents and reads each one's ``/proc/<pid>/environ`` once found the
API keys of the ``silica`` that ran it, and the model got them in the tool result. Here that
tool (``peek``) runs through every silica process that runs tools (``ask``, ``chat``,
``mcp serve`` on stdio and HTTP, ``exec``, the ``serve`` daemon): it reports each ancestor it
could read, and no secret may be among what it found. The keys still work (the fake provider
checks nothing but gets them through the SDK), and a granted secret still reaches its tool.
Run as root (who can read every environ) and as an unprivileged user (who, the process being
non-dumpable, cannot read silica's at all).
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import script_tool, simple_spec
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from serve_daemon import start_daemon
from wire import anthropic_server, text, tool_call

MARK = "FAKESECRET"
KEY = f"sk-ant-{MARK}-provider-key"
SECRETS = {"ANTHROPIC_API_KEY": KEY, "SILICA_SERVE_TOKEN": f"{MARK}-serve-token-123456",
           "SILICA_MCP_TOKEN": f"{MARK}-mcp-token-1234567", "OPENAI_API_KEY": f"{MARK}-oa",
           "MY_SERVICE_TOKEN": "granted-value-42"}
TEST_USER = "silicatest"

WALK = f"""
import os
pid, seen = os.getppid(), []
while pid > 1:
    try:
        cmd = open(f"/proc/{{pid}}/cmdline", "rb").read().replace(b"\\0", b" ").decode()
    except OSError:
        cmd = "?"
    try:
        env = open(f"/proc/{{pid}}/environ", "rb").read()
        found = [e.decode(errors="replace") for e in env.split(b"\\0") if b"{MARK}" in e]
        seen.append(f"{{pid}} [{{cmd[:300]}}] environ read, secrets: {{found}}")
    except OSError as exc:
        seen.append(f"{{pid}} [{{cmd[:300]}}] environ: {{exc.strerror}}")
    pid = int(open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[1])
print("\\n".join(seen))
print("grant:", "ok" if os.environ.get("MY_SERVICE_TOKEN") == "granted-value-42" else "missing")
"""


def peek_tool(folder: Path) -> None:
    script_tool(folder, "peek.py", simple_spec("peek"), body=WALK)
    # The hardening layer alone, seen by a tool that walks its ancestors: the sandbox (whose
    # PID namespace hides them; tests/test_sandbox_escapes.py) is off here.
    (folder.parent / "config.toml").write_text('[tools.env_grant]\npeek = ["MY_SERVICE_TOKEN"]\n'
                                               '[sandbox]\nmode = "off"\n')


def silica_lines(report: str) -> list[str]:
    """The lines of ``peek``'s report about silica's own processes."""
    return [line for line in report.splitlines() if "-m silica" in line]


def assert_nothing_found(report: str, *, readable: bool = True) -> None:
    """``report`` walked through a silica process, found no secret, and the grant arrived."""
    ours = silica_lines(report)
    assert ours, report
    if readable:  # root reads every environ: the values must be gone from it
        assert all("environ read" in line for line in ours), report
    else:  # the same user cannot read it at all
        assert all("environ: Permission denied" in line for line in ours), report
    assert MARK not in report
    assert "grant: ok" in report


def tool_text(request: dict) -> str:
    """The text of the tool result in a request to the fake Anthropic API."""
    blocks = request["messages"][-1]["content"]
    result = next(b for b in blocks if b["type"] == "tool_result")
    content = result["content"]
    return content if isinstance(content, str) else "".join(c.get("text", "") for c in content)


def sent_key(srv, i: int) -> str:
    """The key request ``i`` to the fake Anthropic API carried."""
    headers = srv.received[i].headers
    return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")


@pytest.fixture
def world(user_tools, home):
    peek_tool(user_tools)
    return {**os.environ, **SECRETS, "SILICA_PROVIDER": "anthropic"}


def test_ask_through_a_tool_that_reads_its_ancestors(world):
    with anthropic_server([tool_call("peek"), text("Done.")], api_key=KEY) as srv:
        done = subprocess.run([sys.executable, "-m", "silica", "ask", "peek"],
                              capture_output=True, text=True, timeout=300,
                              env={**world, **srv.env})
    assert done.returncode == 0, done.stderr
    assert sent_key(srv, 0) == KEY  # the SDK still has the key
    assert_nothing_found(tool_text(srv.requests[1]))


def test_chat_through_a_tool_that_reads_its_ancestors(world):
    with anthropic_server([tool_call("peek"), text("Done.")], api_key=KEY) as srv:
        done = subprocess.run([sys.executable, "-m", "silica", "chat"], input="peek\n/exit\n",
                              capture_output=True, text=True, timeout=300,
                              env={**world, **srv.env})
    assert done.returncode == 0, done.stderr
    assert sent_key(srv, 1) == KEY
    assert_nothing_found(tool_text(srv.requests[1]))


def test_mcp_serve_on_stdio(world):
    params = StdioServerParameters(command=sys.executable, args=["-m", "silica", "mcp", "serve"],
                                   env=world)

    async def act():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            return await s.call_tool("peek", {})

    result = asyncio.run(asyncio.wait_for(act(), 300))
    assert_nothing_found(result.content[0].text)


def test_mcp_serve_over_http(world, tmp_path):
    with open(tmp_path / "err", "w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "silica", "mcp", "serve", "--http",
                                 "--port", "0"], env=world, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err)
        try:
            deadline = time.monotonic() + 120
            while not (found := re.search(r"serving MCP at (http://\S+)",
                                          (tmp_path / "err").read_text())):
                assert proc.poll() is None and time.monotonic() < deadline, \
                    (tmp_path / "err").read_text()
                time.sleep(0.1)
            auth = {"Authorization": f"Bearer {SECRETS['SILICA_MCP_TOKEN']}"}

            async def act():
                client = create_mcp_http_client(headers=auth)
                async with client, streamable_http_client(found.group(1), http_client=client) \
                        as (read, write), ClientSession(read, write) as s:
                    await s.initialize()
                    return await s.call_tool("peek", {})

            result = asyncio.run(asyncio.wait_for(act(), 300))
            environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        finally:
            proc.terminate()
            proc.wait(30)
    assert_nothing_found(result.content[0].text)
    assert MARK.encode() not in environ


def test_exec(world, tmp_path):
    walker = tmp_path / "walk.py"
    walker.write_text(WALK)
    urls = ["https://me:URLSECRET1@example.org/x", "https://example.org/?api_key=URLSECRET2"]
    done = subprocess.run([sys.executable, "-m", "silica", "exec", "--", sys.executable,
                           str(walker), *urls], capture_output=True, text=True, timeout=300,
                          env=world)
    # exec gives what a tool gets without a grant: the report says so, and nothing leaked
    assert done.returncode == 0, done.stderr
    assert_nothing_found(done.stdout.replace("grant: missing", "grant: ok"))
    # the secrets of URLs on silica's command line are masked there (the command keeps its
    # own: it is the user's)
    ours = "\n".join(silica_lines(done.stdout))
    assert "URLSECRET" not in ours
    assert f"https://{'*' * len('me:URLSECRET1')}@example.org/x" in ours
    assert "api_key=**********" in ours


def test_serve_daemon(home, tmp_path):
    peek_tool(home / "tools")
    with anthropic_server([tool_call("peek"), text("Done.")], api_key=KEY) as srv, \
            start_daemon(home, env={**srv.env, **SECRETS, "SILICA_PROVIDER": "anthropic"},
                         cwd=tmp_path) as daemon:
        assert daemon.token == SECRETS["SILICA_SERVE_TOKEN"]
        with daemon.client() as http:
            sid = http.post("/sessions", json={}).json()["session_id"]
            done = http.post(f"/sessions/{sid}/messages?wait=true", json={"message": "peek"})
        environ = Path(f"/proc/{daemon.proc.pid}/environ").read_bytes()
    assert done.status_code == 200, done.text
    assert sent_key(srv, 0) == KEY
    assert_nothing_found(tool_text(srv.requests[1]))
    assert MARK.encode() not in environ and b"SILICA_SERVE_TOKEN=" in environ


# -- as an unprivileged user ----------------------------------------------------------------


@pytest.fixture
def unprivileged():
    """A user other than root, and a folder of theirs (skipped unless this runs as root)."""
    if os.geteuid() != 0 or not shutil.which("runuser"):
        pytest.skip("needs root, to run silica as another user")
    try:
        pwd.getpwnam(TEST_USER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", TEST_USER],
                       check=True, capture_output=True)
    entry = pwd.getpwnam(TEST_USER)
    folder = Path(tempfile.mkdtemp(prefix="silica-user-"))
    os.chmod(folder, 0o755)
    os.chown(folder, entry.pw_uid, entry.pw_gid)
    python, path = user_python(TEST_USER)
    env = {"PATH": os.environ["PATH"], "HOME": str(folder), "SILICA_HOME": str(folder / "h"),
           "PYTHONUNBUFFERED": "1", "SILICA_RESIDENT": "0", **path, **SECRETS}
    yield TEST_USER, folder, python, env
    shutil.rmtree(folder, ignore_errors=True)


def user_python(user: str) -> tuple[str, dict[str, str]]:
    """A Python the user can run silica with, and the ``PYTHONPATH`` it needs: this one, or
    (when it lives in a folder the user cannot enter, such as root's home) the system's Python
    of the same version, given this environment's packages and this checkout."""
    if subprocess.run(["runuser", "-u", user, "--", sys.executable, "-c", "pass"],
                      capture_output=True).returncode == 0:
        return sys.executable, {}
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not os.access(system, os.X_OK):
        pytest.skip(f"{user} cannot run {sys.executable}, and there is no {system}")
    import sysconfig

    import silica

    paths = [str(Path(silica.__file__).parent.parent), sysconfig.get_path("purelib"),
             sysconfig.get_path("platlib")]
    return system, {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


def as_user(user: str, argv: list[str]) -> list[str]:
    # the environment goes through Popen's env, not argv: runuser's own command line is
    # readable by everyone, and the walk reads it
    return ["runuser", "-u", user, "--", *argv]


def test_exec_as_an_unprivileged_user(unprivileged):
    user, folder, python, env = unprivileged
    walker = folder / "walk.py"
    walker.write_text(WALK)
    os.chmod(walker, 0o644)
    argv = as_user(user, [python, "-m", "silica", "exec", "--", python, str(walker)])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=folder,
                          env=env)
    assert done.returncode == 0, done.stderr
    assert_nothing_found(done.stdout.replace("grant: missing", "grant: ok"), readable=False)


def test_serve_daemon_as_an_unprivileged_user(unprivileged):
    user, folder, python, env = unprivileged
    argv = as_user(user, [python, "-m", "silica", "serve", "--port", "0"])
    proc = subprocess.Popen(argv, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, env=env)
    try:
        started = proc.stdout.readline()
        assert started.startswith("silica serve: http://"), proc.stderr.read()
        daemon = _python_below(proc.pid, python)
        as_root = Path(f"/proc/{daemon}/environ").read_bytes()
        peeked = subprocess.run(["runuser", "-u", user, "--", "cat", f"/proc/{daemon}/environ"],
                                capture_output=True, timeout=60)
        cmdline = Path(f"/proc/{daemon}/cmdline").read_bytes()
    finally:
        proc.terminate()
        proc.wait(30)
    assert cmdline.startswith(f"{python}\0-m\0silica\0serve".encode())
    assert MARK.encode() not in as_root and b"ANTHROPIC_API_KEY=" in as_root
    assert peeked.returncode != 0 and MARK.encode() not in peeked.stdout
    assert b"Permission denied" in peeked.stderr


def _python_below(pid: int, python: str) -> int:
    """The pid of the silica process started by ``runuser`` (``pid``, or its child)."""
    if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(python.encode()):
        return pid
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for task in Path("/proc").glob("[0-9]*"):
            try:
                stat = (task / "stat").read_text()
                cmd = (task / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid and \
                    cmd.startswith(python.encode()):
                return int(task.name)
        time.sleep(0.1)
    raise AssertionError(f"no silica process below {pid}: {json.dumps(os.listdir('/proc'))}")


def test_a_variable_withheld_in_config_is_gone_from_proc_too(world, home, tmp_path):
    """``[tools] env_withhold`` in config.toml makes a variable a secret like the built-in
    patterns: no tool gets it, and no tool finds it in silica's /proc/<pid>/environ."""
    (home / "config.toml").write_text('[tools]\nenv_withhold = ["DEPLOY_*"]\n')
    walker = tmp_path / "walk.py"
    walker.write_text(WALK)
    done = subprocess.run([sys.executable, "-m", "silica", "exec", "--", sys.executable,
                           str(walker)], capture_output=True, text=True, timeout=300,
                          env={**world, "DEPLOY_HOOK": f"{MARK}-deploy-hook"})
    assert done.returncode == 0, done.stderr
    assert silica_lines(done.stdout) and MARK not in done.stdout
