"""The agent's public session API as a program uses it: the example in docs/agent.md runs,
its tools run in the workspace it sets, and its turn is its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import script_tool, simple_spec
from wire import anthropic_server, text, tool_call

from silica.agent.loop import Agent
from silica.agent.turnlock import SessionBusy, TurnLock
from silica.config import Settings

DOCS = Path(__file__).parents[1] / "docs" / "agent.md"


def documented_example() -> str:
    page = DOCS.read_text()
    section = page.split("## From your own program", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "docs/agent.md has no example under 'From your own program'"
    return found.group(1)


def where_tool(folder: Path) -> None:
    script_tool(folder, "where.py", simple_spec("where"), body="""
        import os
        print("workdir=" + os.environ["SILICA_WORKDIR"])
    """)


def test_the_documented_example_runs_its_tools_in_the_workspace(user_tools, home,
                                                                  tmp_path):
    where_tool(user_tools)
    (home / "config.toml").write_text('[sandbox]\nmode = "off"\n')
    cwd = tmp_path / "project"
    (cwd / "work").mkdir()
    (cwd / "example.py").write_text(documented_example())
    with anthropic_server([tool_call("where", {}), text("they run in work")]) as srv:
        env = {**os.environ, **srv.env, "SILICA_PROVIDER": "anthropic"}
        done = subprocess.run([sys.executable, "example.py"], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        asked = "\n".join(str(body) for body in srv.requests)
    assert "they run in work" in done.stdout
    assert f"in {(cwd / 'work').resolve()}" in done.stdout
    assert f"workdir={(cwd / 'work').resolve()}" in asked  # the tool saw the workspace


def test_a_turn_owned_by_the_agent_is_busy_elsewhere(home):
    agent = Agent.start(Settings(provider="anthropic", model="m"))
    other = TurnLock(agent.conversation.id, home)
    with agent.turn(), pytest.raises(SessionBusy):
        other.acquire()
    other.acquire()  # the block ended: the turn is free again
    with pytest.raises(SessionBusy):
        agent.claim_turn()
    other.release()


def test_an_unknown_event_name_is_refused_with_the_names():
    agent = Agent.start(Settings(provider="anthropic", model="m"))
    with pytest.raises(ValueError, match="text, tool_call"):
        agent.on("txt", print)
