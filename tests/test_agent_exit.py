"""``silica ask`` and ``silica chat`` end by themselves with status 0, and every MCP server
they started is gone by then: nothing left behind holds the process up or outlives it. A
chat's turns share one event loop, so one client and its connections."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from wire import anthropic_server, text, tool_call

FIXTURES = Path(__file__).parent / "mcp_fixtures"


def configure(home: Path, pidfile: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    server = FIXTURES / "state_server.py"
    (home / "config.toml").write_text(
        '[sandbox]\nmode = "off"\n[mcp.servers.state]\n'
        f'command = "{sys.executable}"\nargs = ["{server}", "--pidfile", "{pidfile}"]\n'
        "startup_timeout = 60\n", encoding="utf-8")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "State:\tZ" in status.read_text())


@pytest.mark.parametrize("command", [["ask", "count once"], ["chat"]])
def test_ask_and_chat_exit_0_with_their_mcp_servers_gone(command, home, project, tmp_path):
    pidfile = tmp_path / "pids"
    configure(home, pidfile)
    script = [tool_call("state__count", {}), text("It said 1.")]
    with anthropic_server(script) as srv:
        done = subprocess.run([sys.executable, "-m", "silica", *command],
                              input="count once\n/exit\n", capture_output=True, text=True,
                              cwd=project, env={**os.environ, **srv.env}, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "It said 1." in done.stdout
    pids = [int(line) for line in pidfile.read_text().split()]
    assert pids, "the MCP server never started"
    assert not [pid for pid in pids if alive(pid)], done.stderr


def test_a_chats_turns_share_one_client_and_its_connection(home, project):
    """One event loop for the whole session: the SDK client of the first turn, and the
    connection it opened, serve the next turn too."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[sandbox]\nmode = "off"\n')
    with anthropic_server([text("One."), text("Two."), text("Three.")]) as srv:
        srv.keep_alive = True
        done = subprocess.run([sys.executable, "-m", "silica", "chat"],
                              input="first\nsecond\nthird\n", capture_output=True, text=True,
                              cwd=project, env={**os.environ, **srv.env}, timeout=180)
    assert done.returncode == 0, done.stderr
    assert len(srv.peers) == 3 and len(set(srv.peers)) == 1, srv.peers
    said = [line.removeprefix("you> ") for line in done.stdout.splitlines()]
    assert [line for line in said if line.endswith(".")] == ["One.", "Two.", "Three."]


def test_a_run_that_ends_during_the_sdk_warm_up_exits_with_its_own_status(tmp_path):
    """``ask`` imports its provider's SDK in a thread while it reads its input; a run that
    fails before the import is done (a refused image) waits for it at exit. An import the
    interpreter cuts off at shutdown, inside an extension module, crashed the process
    (signal 6 or 11 instead of status 1) on a loaded machine."""
    done_file = tmp_path / "warmed"
    script = (
        "import sys, time\n"
        "from silica.providers.clients import warm_up\n"
        "class Slow:\n"
        "    def warm(self):\n"
        "        time.sleep(1.0)\n"
        f"        open({str(done_file)!r}, 'w').write('done')\n"
        "warm_up(Slow())\n"
        "sys.exit(1)\n")
    ended = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=60)
    assert ended.returncode == 1, ended.stderr
    assert done_file.read_text() == "done"  # the warm-up ran to its end, not cut off
