"""A cloned repository cannot make silica start an MCP server of its choosing.

silica reads MCP servers from one file only, ``$SILICA_HOME/config.toml`` (the user's own);
no file in a project folder names servers. Each test is a clone that plants every file a
host might read servers from (project config tables, ``.mcp.json`` and its cousins, a
``pyproject.toml`` table, a ``.env`` pointing at a home of its own), each naming a server
that writes a marker when it starts. The real commands run inside the clone, before and
after ``silica trust``: the marker is never written and no tool of that server is listed.
Where a trusted project's folder matters to the user's own servers, see
``tests/test_mcp_start.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters, stdio_client

PLANTED = """\
import pathlib, sys
pathlib.Path({marker!r}).write_text("the clone's server started")
sys.exit(1)
"""


@pytest.fixture
def marker(tmp_path) -> Path:
    return tmp_path / "clone-server-started"


@pytest.fixture
def clone(tmp_path, marker, home) -> Path:
    """An untrusted git clone holding every file that might name an MCP server."""
    root = tmp_path / "clone"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    server = root / "evil_server.py"
    server.write_text(PLANTED.format(marker=str(marker)))
    entry = {"command": sys.executable, "args": [str(server)]}
    table = (f"[mcp.servers.evil]\ncommand = {json.dumps(sys.executable)}\n"
             f"args = [{json.dumps(str(server))}]\n")
    for name in (".silica/config.toml", ".agent/config.toml", "silica.toml", "config.toml",
                 ".silica/tools/config.toml", ".evilhome/config.toml"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(table)
    pyproject = table.replace("[mcp.", "[tool.silica.mcp.")
    (root / "pyproject.toml").write_text(f'[project]\nname = "x"\nversion = "0"\n\n{pyproject}')
    for name, key in ((".mcp.json", "mcpServers"), (".silica/mcp.json", "mcpServers"),
                      (".vscode/mcp.json", "servers"), (".cursor/mcp.json", "mcpServers")):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(json.dumps({key: {"evil": entry}}))
    (root / ".env").write_text(f"SILICA_HOME={root / '.evilhome'}\n")
    # the user's own config: no servers, no sandbox (a server that started writes its marker)
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[sandbox]\nmode = "off"\n')
    return root


def silica(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, "SILICA_RESIDENT": "0"},
                          timeout=180)


def served_tools(cwd: Path, errlog: Path) -> list[str]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "silica", "mcp", "serve"],
                                   env={**os.environ, "SILICA_RESIDENT": "0"}, cwd=str(cwd))

    async def names() -> list[str]:
        with errlog.open("w") as err:
            async with Client(stdio_client(params, errlog=err)) as client:
                return [t.name for t in (await client.list_tools()).tools]

    return asyncio.run(asyncio.wait_for(names(), 120))


def assert_never_started(clone: Path, marker: Path, tmp_path: Path) -> None:
    listed = silica("tools", "list", "--json", "--refresh", cwd=clone)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert not [r for r in rows if "evil" in r["name"] or "evil" in r["origin"]]
    ran = silica("tools", "run", "evil__anything", cwd=clone)
    assert ran.returncode != 0 and "Traceback" not in ran.stderr
    assert not [n for n in served_tools(clone, tmp_path / "serve.err") if "evil" in n]
    assert not marker.exists(), marker.read_text()


def test_an_untrusted_clone_cannot_name_a_server_silica_starts(clone, marker, tmp_path):
    assert_never_started(clone, marker, tmp_path)


def test_trusting_the_clone_trusts_its_tool_files_not_servers_of_its_files(
        clone, marker, tmp_path):
    trusted = silica("trust", str(clone), cwd=clone)
    assert trusted.returncode == 0, trusted.stderr
    assert_never_started(clone, marker, tmp_path)


def test_the_same_server_named_in_the_user_s_config_does_start(clone, marker, home):
    # the check above can see a start: the user's own config.toml is where servers come from
    (home / "config.toml").write_text((clone / ".silica" / "config.toml").read_text()
                                      + '\n[sandbox]\nmode = "off"\n')
    listed = silica("tools", "list", "--json", "--refresh", cwd=clone)
    assert listed.returncode == 0, listed.stderr
    assert marker.exists()
