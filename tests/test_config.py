"""Settings from config.toml and the environment: what a user writes, what silica does."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from silica.agent.loop import Agent
from silica.config import ConfigError, Settings, load_settings


def write_config(home, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(text)


def test_no_config_file_means_defaults(home):
    assert load_settings(home, {}) == Settings()


def test_config_file_and_environment_on_top(home):
    write_config(home, 'provider = "openai"\nmodel = "gpt-4.1"\n[aging]\nlowres_px = 384\n'
                       '[tools]\ntimeout = 5\nenv_withhold = ["*_TOKEN"]\n')
    s = load_settings(home, {"SILICA_MODEL": "gpt-5", "SILICA_VISION": "false"})
    assert (s.provider, s.model, s.vision) == ("openai", "gpt-5", False)
    assert s.aging.lowres_px == 384 and s.tools.timeout == 5
    assert s.tools.env_withhold == ["*_TOKEN"]


@pytest.mark.parametrize(("text", "named"), [
    ("[aging]\nlowres_px = 10\n", "aging.lowres_px: must be greater than or equal to 64, not 10"),
    ("colour = 'red'\n", "colour: unknown key"),
    ("[images]\nmax_side = 'big'\n", "images.max_side: Input should be a valid integer"),
    ("provider = \n", "is not valid TOML"),
])
def test_a_bad_config_names_the_key_and_the_problem(home, text, named):
    write_config(home, text)
    with pytest.raises(ConfigError) as err:
        load_settings(home, {})
    assert named in str(err.value) and str(home / "config.toml") in str(err.value)


def test_a_bad_environment_value_names_the_variable(home):
    with pytest.raises(ConfigError, match=r"\$SILICA_MAX_TURNS: max_turns"):
        load_settings(home, {"SILICA_MAX_TURNS": "lots"})


def test_image_overrides_change_the_provider_limits(home):
    write_config(home, "[images]\ntarget_long_side = 1000\n")
    from silica.images.limits import ANTHROPIC

    limits = load_settings(home, {}).images.apply(ANTHROPIC)
    assert limits.target_long_side == 1000 and limits.max_side == ANTHROPIC.max_side


def test_cli_reports_a_bad_config_on_stderr(home, user_tools):
    write_config(home, "[tools]\ntimeout = -1\n")
    done = subprocess.run([sys.executable, "-m", "silica", "tools", "list"], text=True,
                          capture_output=True, env=os.environ.copy(), timeout=120)
    assert done.returncode == 1
    assert "tools.timeout: must be greater than 0, not -1" in " ".join(done.stderr.split())


def test_starting_a_session_removes_image_folders_older_than_keep_days(home):
    old, recent = home / "images" / "old-session", home / "images" / "recent-session"
    for folder in (old, recent):
        folder.mkdir(parents=True)
        (folder / ("a" * 64 + ".png")).write_bytes(b"x")
    past = time.time() - 40 * 86_400
    os.utime(old / ("a" * 64 + ".png"), (past, past))
    os.utime(old, (past, past))
    Agent.start(Settings(provider="anthropic"))
    assert not old.exists() and recent.exists()


@pytest.mark.parametrize(("toml", "key"), [
    ("[read_file]\nmax_text_bytes = 1e20\n", "read_file.max_text_bytes"),
    ("[read_file]\nmax_text_bytes = 99999999999999999\n", "read_file.max_text_bytes"),
    ("[tools]\ntimeout = inf\n", "tools.timeout"),
    ("[mcp]\ntimeout = nan\n", "mcp.timeout"),
    ("[store]\nkeep_days = 10000000\n", "store.keep_days"),
])
def test_values_that_would_overflow_are_refused_at_load(home, toml, key):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(toml)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_settings()
    done = subprocess.run([sys.executable, "-m", "silica", "tools", "list"],
                          capture_output=True, text=True)
    assert done.returncode == 1 and key in done.stderr and "Traceback" not in done.stderr
