"""Where the user's MCP servers start: never where an untrusted project can plant code.

Each test is a cloned repository that was never trusted, holding code named like what the
user's own server runs (a ``some_server.py`` module, a ``node_modules/.bin`` script, a
``bin/server``); each planted file writes a marker when it runs. The real commands
(``silica tools list``, ``silica ask``, ``silica mcp serve``) run inside the repository.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from wire import anthropic_server, text

from silica.security.server_start import SERVERS_DIR, server_start

FIXTURES = Path(__file__).parent / "mcp_fixtures"
PLANTED = """\
import pathlib, sys
pathlib.Path({marker!r}).write_text("planted code ran")
sys.exit(1)
"""


@pytest.fixture
def repo(tmp_path) -> Path:
    """An untrusted clone: a git repository the user never ran ``silica trust`` on."""
    root = tmp_path / "clone"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


@pytest.fixture
def marker(tmp_path) -> Path:
    return tmp_path / "planted-ran"


@pytest.fixture
def real_module(tmp_path) -> Path:
    """The user's own ``some_server`` module, in a folder of theirs outside the repository."""
    mine = tmp_path / "my-servers"
    mine.mkdir()
    shutil.copy(FIXTURES / "state_server.py", mine / "some_server.py")
    return mine


def toml(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def configure(home: Path, **servers: dict) -> None:
    lines = ['[sandbox]', 'mode = "off"']  # the start folder's layer: planted files say what ran
    for name, table in servers.items():
        lines.append(f"[mcp.servers.{name}]")
        lines += [f"{key} = {toml(value)}" for key, value in table.items()]
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def python_module_server(real_module: Path, args: tuple[str, ...] = ("-m", "some_server")
                         ) -> dict:
    return {"command": sys.executable, "args": list(args),
            "env": {"PYTHONPATH": str(real_module)}, "startup_timeout": 30}


def silica(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, **(env or {})}, timeout=180)


def listed(cwd: Path) -> dict[str, dict]:
    done = silica("tools", "list", "--json", "--refresh", cwd=cwd)
    assert done.returncode == 0, done.stderr
    return {row["name"]: row for row in json.loads(done.stdout)}


def plant_module(repo: Path, marker: Path) -> None:
    (repo / "some_server.py").write_text(PLANTED.format(marker=str(marker)))


# -- silica tools list ------------------------------------------------------------------


RUN_C = "import runpy; runpy.run_module('some_server', run_name='__main__')"


@pytest.mark.parametrize("args", [("-m", "some_server"), ("-c", RUN_C)])
def test_python_m_in_an_untrusted_clone_runs_the_users_module_not_the_clones(
        repo, marker, real_module, home, args):
    plant_module(repo, marker)
    configure(home, mine=python_module_server(real_module, args))
    rows = listed(repo)
    assert not marker.exists(), "the clone's some_server.py ran"
    assert rows["mine__count"]["status"] == "ok"
    assert rows["mine__where"]["status"] == "ok"


def test_once_the_clone_is_trusted_the_server_starts_in_it_as_before(
        repo, marker, real_module, home):
    plant_module(repo, marker)
    configure(home, mine=python_module_server(real_module))
    assert silica("trust", str(repo), cwd=repo).returncode == 0
    rows = listed(repo)
    assert marker.exists()  # python -m takes the trusted project's module first, as always
    assert "mine__*" in rows


def test_the_server_runs_in_a_private_folder_of_its_own_and_says_so_when_it_finds_nothing(
        repo, marker, home):
    plant_module(repo, marker)
    configure(home, mine={"command": sys.executable, "args": ["-m", "some_server"]})
    rows = listed(repo)
    assert not marker.exists()
    error = rows["mine__*"]["reason"]
    private = home / SERVERS_DIR / "mine"
    assert "No module named some_server" in error
    assert f"it started in {private}, not in {repo}" in error
    assert '"cwd"' in error and f"silica trust {repo}" in error
    assert private.is_dir() and (private.stat().st_mode & 0o777) == 0o700


def test_npx_does_not_run_the_clones_node_modules_bin(repo, marker, home):
    if shutil.which("npx") is None:
        pytest.skip("npx is not installed")
    script = repo / "node_modules" / ".bin" / "silica-test-planted-server"
    script.parent.mkdir(parents=True)
    script.write_text(f"#!/bin/sh\necho planted > '{marker}'\nexit 1\n")
    script.chmod(0o755)
    configure(home, npx={"command": "npx", "args": ["--no-install", script.name],
                         "env": {"npm_config_offline": "true"}, "startup_timeout": 60})
    rows = listed(repo)
    assert not marker.exists(), "the clone's node_modules/.bin script ran"
    assert "silica trust" in rows["npx__*"]["reason"]


@pytest.mark.parametrize("command", ["./server", "bin/server"])
def test_a_relative_command_is_not_taken_from_the_clone(repo, marker, home, command):
    planted = repo / command
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text(f"#!/bin/sh\necho planted > '{marker}'\nexit 1\n")
    planted.chmod(0o755)
    configure(home, rel={"command": command})
    rows = listed(repo)
    assert not marker.exists()
    error = rows["rel__*"]["reason"]
    assert str(home / SERVERS_DIR / "rel" / command.removeprefix("./")) in error
    assert "silica trust" in error


def test_a_relative_entry_of_path_is_not_read_in_the_clone(repo, marker, home):
    planted = repo / "silica-test-planted-command"
    planted.write_text(f"#!/bin/sh\necho planted > '{marker}'\nexit 1\n")
    planted.chmod(0o755)
    configure(home, rel={"command": planted.name,
                         "env": {"PATH": f".:bin:{os.environ['PATH']}"}})
    rows = listed(repo)
    assert not marker.exists()
    assert f"no command {planted.name!r}" in rows["rel__*"]["reason"]


def test_a_relative_path_in_args_is_not_read_from_the_clone(repo, marker, real_module, home):
    (repo / "server.py").write_text(PLANTED.format(marker=str(marker)))
    configure(home, rel={"command": sys.executable, "args": ["server.py"]})
    rows = listed(repo)
    assert not marker.exists()
    assert "can't open file" in rows["rel__*"]["reason"]


def test_a_server_with_its_own_cwd_starts_there(repo, marker, real_module, home):
    plant_module(repo, marker)
    configure(home, mine={"command": sys.executable, "args": ["-m", "some_server"],
                          "cwd": str(real_module)})
    rows = listed(repo)
    assert not marker.exists() and rows["mine__count"]["status"] == "ok"


# -- silica ask and silica mcp serve -----------------------------------------------------


def test_ask_in_an_untrusted_clone_does_not_run_the_clones_module(
        repo, marker, real_module, home):
    plant_module(repo, marker)
    configure(home, mine=python_module_server(real_module))
    with anthropic_server([text("done")]) as srv:
        done = silica("ask", "hi", cwd=repo, env=srv.env)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    offered = {t["name"] for t in srv.requests[0]["tools"]}
    assert {"mine__count", "mine__where"} <= offered


def test_mcp_serve_in_an_untrusted_clone_does_not_run_the_clones_module(
        repo, marker, real_module, home, tmp_path):
    plant_module(repo, marker)
    configure(home, mine=python_module_server(real_module))
    params = StdioServerParameters(command=sys.executable, args=["-m", "silica", "mcp", "serve"],
                                   env=dict(os.environ), cwd=str(repo))

    async def names() -> set[str]:
        with open(tmp_path / "serve.err", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                where = await session.call_tool("mine__where", {})
                return {t.name for t in (await session.list_tools()).tools} | {
                    f"where={where.content[0].text}"}

    found = asyncio.run(asyncio.wait_for(names(), 180))
    assert not marker.exists()
    assert "mine__count" in found
    assert f"where={home / SERVERS_DIR / 'mine'}" in found


# -- the policy ---------------------------------------------------------------------------


def test_the_policy_in_one_place(tmp_path, repo):
    home = tmp_path / "h"
    kept_out = server_start("a b/../c", "bin/x", None, here=repo / "sub", home=home)
    folder = home / SERVERS_DIR / f"a_b____c-{hashlib.sha256(b'a b/../c').hexdigest()[:8]}"
    assert kept_out.cwd == folder and kept_out.command == str(folder / "bin" / "x")
    assert server_start("a_b____c", "x", None, here=repo, home=home).cwd != folder
    assert kept_out.project == repo
    named = server_start("a", "x", Path("srv"), here=repo, home=home)
    assert named.cwd == home / "srv" and named.command == "x" and named.project is None
    assert server_start("a", "x", Path("/abs"), here=repo, home=home).cwd == Path("/abs")
    (repo / "sub").mkdir()
    from silica.security.trust import TrustStore

    TrustStore(home).add(repo)
    trusted = server_start("a", "./x", None, here=repo / "sub", home=home)
    assert trusted.cwd == repo / "sub" and trusted.command == str(repo / "sub" / "x")
    assert trusted.project is None
