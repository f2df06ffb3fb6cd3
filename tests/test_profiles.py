"""Agent profiles (``[agents.NAME]``): ``silica ask/chat --agent``, ``"agent"`` in
``POST /sessions``, resuming a session as its profile, and what a profile changes.

Every test runs the real command (or daemon) against a local server speaking the Anthropic
wire protocol, and asserts on what the SDK sent and what the person sees.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import script_tool, simple_spec
from PIL import Image
from serve_daemon import start_daemon
from wire import anthropic_server, ollama_server, text, tool_call

from silica.agent.profiles import ToolRule, UnknownAgent, settings_for, tool_rule
from silica.agent.sessions import export_session, list_sessions
from silica.config import ConfigError, Settings, load_settings

CONFIG = """\
model = "claude-top-level"
system = "You are the default."

[agents.reviewer]
model = "claude-reviewer"
system = "You review code."
tools = ["echo_*", "read_file"]

[agents.blind]
vision = false

[agents.mute]
tools = []

[agents.local]
provider = "ollama"
model = "llava-profile"
"""


def silica(*args: str, env: dict, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, input=stdin, timeout=300)


def png(size=(64, 48)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (200, 60, 60)).save(buf, format="PNG")
    return buf.getvalue()


def tool_names(body: dict) -> list[str]:
    return [t["name"] for t in body.get("tools", [])]


def system_text(body: dict) -> str:
    return "".join(part["text"] for part in body.get("system", []))


def blocks(body: dict) -> list[dict]:
    """Every content block of the request, tool results' content included."""
    found = []
    for message in body["messages"]:
        for block in message["content"]:
            found.append(block)
            if block["type"] == "tool_result":
                found.extend(block.get("content") or [])
    return found


@pytest.fixture
def world(home, user_tools, project):
    """config.toml with three profiles, and three tools: echo_a, echo_b and other (which
    leaves a file behind when it runs)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(CONFIG)
    for name in ("echo_a", "echo_b"):
        script_tool(user_tools, f"{name}.py", simple_spec(name, text="string"),
                    body="print('echoed')")
    ran = project / "other-ran"
    script_tool(user_tools, "other.py", simple_spec("other"), body=f"""
        open({str(ran)!r}, "w").write("ran")
        print("other ran")
    """)
    return {"home": home, "ran": ran, "cwd": project}


def saved(home: Path, sid: str) -> dict:
    return json.loads(export_session(sid, home))["conversation"]


def only_session(home: Path) -> str:
    [info] = list_sessions(home)
    return info.id


# -- the settings -------------------------------------------------------------------------


def test_a_profile_replaces_what_it_sets_and_explicit_choices_win():
    settings = Settings.model_validate({
        "provider": "openai", "model": "gpt-4.1", "system": "top",
        "agents": {"rev": {"provider": "anthropic", "model": "claude-x", "vision": False,
                           "tools": ["git_*"]}}})
    mine = settings_for(settings, "rev")
    assert (mine.provider, mine.model, mine.vision, mine.system) == \
        ("anthropic", "claude-x", False, "top")  # system unset in the profile: kept
    assert settings_for(settings, "rev", model="claude-y").model == "claude-y"
    assert settings_for(settings, None) is settings
    rule = tool_rule(settings, "rev")
    assert rule.allows("git_log") and not rule.allows("Git_log") and not rule.allows("shell")
    assert rule.offered([{"name": "read_file"}, {"name": "git_diff"}]) == [{"name": "git_diff"}]
    assert ToolRule().allows("anything") and not ToolRule((), "none").allows("anything")
    with pytest.raises(UnknownAgent, match=r"unknown agent 'nope'; known agents: rev"):
        settings_for(settings, "nope")
    with pytest.raises(UnknownAgent, match=r"defines no agent"):
        settings_for(Settings(), "nope")


@pytest.mark.parametrize("toml, problem", [
    ('[agents.rev]\nmodle = "x"\n', "agents.rev.modle: unknown key"),
    ('[agents."two words"]\nmodel = "x"\n', "is not an agent name"),
    ('[agents.rev]\ntools = ["git_*", " "]\n', "agents.rev.tools: an empty name allows no tool"),
    ('[agents.rev]\nmodel = "has space"\n', "agents.rev.model: a model name is"),
    ('[agents.rev]\nvision = "maybe"\n', "agents.rev.vision"),
])
def test_a_bad_profile_is_a_config_error_naming_the_key(home, toml, problem):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(toml)
    with pytest.raises(ConfigError, match=problem):
        load_settings(home)


# -- silica ask and chat ------------------------------------------------------------------


def test_ask_as_a_profile_uses_its_model_system_and_tools_and_refuses_others(world):
    with anthropic_server([tool_call("other"), text("Done.")]) as srv:
        env = {**os.environ, **srv.env}
        done = silica("ask", "--agent", "reviewer", "review this", env=env, cwd=world["cwd"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Done."
    first, second = srv.requests
    assert first["model"] == "claude-reviewer"
    assert system_text(first) == "You review code."
    assert sorted(tool_names(first)) == ["echo_a", "echo_b", "read_file"]  # not "other"
    [result] = [b for b in second["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert result["is_error"] is True
    assert "may not be used by agent 'reviewer'" in result["content"][0]["text"]
    assert not world["ran"].exists()  # refused: the tool never ran
    assert "→ other" in done.stderr and "may not be used" in done.stderr
    assert saved(world["home"], only_session(world["home"]))["agent"] == "reviewer"


def test_without_a_profile_every_tool_is_offered_and_flags_beat_the_profile(world):
    with anthropic_server([text("Plain."), text("Flagged.")]) as srv:
        env = {**os.environ, **srv.env}
        plain = silica("ask", "hello", env=env, cwd=world["cwd"])
        flagged = silica("ask", "--agent", "reviewer", "--model", "claude-flag", "hello",
                         env=env, cwd=world["cwd"])
    assert plain.returncode == 0 and flagged.returncode == 0, plain.stderr + flagged.stderr
    no_profile, with_flag = srv.requests
    assert no_profile["model"] == "claude-top-level"
    assert system_text(no_profile) == "You are the default."
    assert {"echo_a", "echo_b", "other"} <= set(tool_names(no_profile))
    assert with_flag["model"] == "claude-flag"  # --model wins over the profile's
    assert system_text(with_flag) == "You review code."


def test_a_profile_picks_its_provider(world, monkeypatch):
    for var in ("OLLAMA_HOST", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    with ollama_server([text("From the local model.")]) as local, \
            anthropic_server([]) as remote:
        done = silica("ask", "--agent", "local", "hi", env={**os.environ, **local.env,
                                                              **remote.env},
                      cwd=world["cwd"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "From the local model."
    assert [r["model"] for r in local.requests] == ["llava-profile"]
    assert remote.requests == []


def test_a_profile_with_no_tools_offers_none(world):
    with anthropic_server([text("Nothing to use.")]) as srv:
        done = silica("ask", "--agent", "mute", "hi", env={**os.environ, **srv.env},
                      cwd=world["cwd"])
    assert done.returncode == 0, done.stderr
    assert "tools" not in srv.requests[0] or srv.requests[0]["tools"] == []


def test_an_unknown_profile_is_a_clear_error_listing_the_known_ones(world):
    with anthropic_server([text("never sent")]) as srv:
        env = {**os.environ, **srv.env}
        ask = silica("ask", "--agent", "nope", "hi", env=env, cwd=world["cwd"])
        chat = silica("chat", "--agent", "nope", env=env, cwd=world["cwd"], stdin="hi\n")
    for done in (ask, chat):
        assert done.returncode == 1
        assert "unknown agent 'nope'; known agents: blind, local, mute, reviewer" in done.stderr
        assert "Traceback" not in done.stderr
    assert srv.requests == []
    assert list_sessions(world["home"]) == []


def test_a_resumed_session_runs_as_its_profile_again(world):
    with anthropic_server([text("First."), text("Second."), text("Third.")]) as srv:
        env = {**os.environ, **srv.env}
        first = silica("ask", "--agent", "reviewer", "one", env=env, cwd=world["cwd"])
        sid = only_session(world["home"])
        chat = silica("chat", "--resume", sid, env=env, cwd=world["cwd"],
                      stdin="two\n/exit\n")
        switched = silica("chat", "--resume", sid, "--agent", "mute", env=env,
                          cwd=world["cwd"], stdin="three\n/exit\n")
    assert first.returncode == chat.returncode == switched.returncode == 0, \
        first.stderr + chat.stderr + switched.stderr
    assert "agent reviewer" in chat.stderr and "agent mute" in switched.stderr
    resumed, after_switch = srv.requests[1], srv.requests[2]
    assert resumed["model"] == "claude-reviewer"
    assert system_text(resumed) == "You review code."
    assert sorted(tool_names(resumed)) == ["echo_a", "echo_b", "read_file"]
    # another profile: its tools and system prompt; the session's model (mute sets none)
    assert tool_names(after_switch) == []
    assert system_text(after_switch) == "You are the default."
    assert after_switch["model"] == "claude-reviewer"
    assert saved(world["home"], sid)["agent"] == "mute"


def test_a_session_whose_profile_was_removed_says_so(world):
    with anthropic_server([text("First.")]) as srv:
        env = {**os.environ, **srv.env}
        silica("ask", "--agent", "reviewer", "one", env=env, cwd=world["cwd"])
        sid = only_session(world["home"])
        (world["home"] / "config.toml").write_text('[agents.other]\nmodel = "x"\n')
        done = silica("chat", "--resume", sid, env=env, cwd=world["cwd"], stdin="two\n")
    assert done.returncode == 1
    assert f"session {sid} runs as agent 'reviewer', which config.toml no longer defines" \
        in done.stderr
    assert "known agents: other" in done.stderr and "Traceback" not in done.stderr
    assert len(srv.requests) == 1


def test_vision_false_makes_images_stand_ins_for_that_agent_only(world, tmp_path):
    picture = tmp_path / "chart.png"
    picture.write_bytes(png())
    with anthropic_server([text("A chart."), text("A chart.")]) as srv:
        env = {**os.environ, **srv.env}
        blind = silica("ask", "--agent", "blind", "--image", str(picture), "what is it?",
                       env=env, cwd=world["cwd"])
        seeing = silica("ask", "--image", str(picture), "what is it?", env=env,
                        cwd=world["cwd"])
    assert blind.returncode == seeing.returncode == 0, blind.stderr + seeing.stderr
    blind_body, seeing_body = srv.requests
    assert not [b for b in blocks(blind_body) if b["type"] == "image"]
    stand_in = " ".join(b.get("text", "") for b in blocks(blind_body))
    assert "[Image:" in stand_in and "64x48" in stand_in
    assert [b for b in blocks(seeing_body) if b["type"] == "image"]


# -- silica serve -------------------------------------------------------------------------


def test_serve_creates_a_session_as_a_profile_and_keeps_it(world):
    home = world["home"]
    with anthropic_server([text("Reviewed."), text("Again.")]) as srv, \
            start_daemon(home, env={**srv.env, "SILICA_PROVIDER": "anthropic"},
                         cwd=world["cwd"]) as daemon, daemon.client() as http:
        unknown = http.post("/sessions", json={"agent": "nope"})
        wrong = http.post("/sessions", json={"agent": 7})
        created = http.post("/sessions", json={"agent": "reviewer"})
        assert created.status_code == 201, created.text
        sid = created.json()["session_id"]
        turn = http.post(f"/sessions/{sid}/messages?wait=true", json={"message": "look"})
        assert turn.status_code == 200, turn.text
        # a later turn, after the daemon forgot the session's agent: resumed as its profile
        (home / "config.toml").write_text(CONFIG.replace("You review code.", "Reviewer 2."))
        stderr = daemon.stderr()
    with anthropic_server([text("Again.")]) as srv2, \
            start_daemon(home, env={**srv2.env, "SILICA_PROVIDER": "anthropic"},
                         cwd=world["cwd"]) as again, again.client() as http:
        later = http.post(f"/sessions/{sid}/messages?wait=true", json={"message": "more"})
        assert later.status_code == 200, later.text
    assert unknown.status_code == 400
    assert unknown.json()["error"]["code"] == "unknown_agent"
    assert "known agents: blind, local, mute, reviewer" in unknown.json()["error"]["message"]
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "invalid_field"
    body = srv.requests[0]
    assert body["model"] == "claude-reviewer" and system_text(body) == "You review code."
    assert sorted(tool_names(body)) == ["echo_a", "echo_b", "read_file"]
    assert saved(home, sid)["agent"] == "reviewer"
    resumed = srv2.requests[0]
    assert sorted(tool_names(resumed)) == ["echo_a", "echo_b", "read_file"]
    assert system_text(resumed) == "You review code."  # the session keeps its prompt
    assert "Traceback" not in stderr


def test_resume_in_the_library_applies_the_profile(world, monkeypatch):
    import asyncio

    from silica.agent.loop import Agent

    with anthropic_server([text("One."), text("Two.")]) as srv:
        srv.use(monkeypatch)
        settings = load_settings(world["home"])
        agent = Agent.start(settings, agent="reviewer", workdir=world["cwd"])
        asyncio.run(agent.send("one"))
        again = Agent.resume(agent.conversation.id, settings, workdir=world["cwd"])
        asyncio.run(again.send("two"))
    assert again.conversation.agent == "reviewer" and again.model == "claude-reviewer"
    assert sorted(tool_names(srv.requests[1])) == ["echo_a", "echo_b", "read_file"]

