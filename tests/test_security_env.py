"""Secrets stay out of tools: by default nothing secret-looking reaches a tool, its --toolspec
run, or a pack's tool; a tool asks (``env:`` metadata) and the user grants in config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import simple_spec, write_tool

from silica import packs
from silica.config import ConfigError, Settings, ToolSettings, load_settings
from silica.packs.manifest import manifest_toml
from silica.security.env import SECRET_PATTERNS, EnvPolicy, is_secret
from silica.tools.toolbox import Toolbox

FAKE_SECRETS = {
    "ANTHROPIC_API_KEY": "sk-ant-FAKE1",
    "OPENAI_API_KEY": "sk-FAKE2",
    "GITHUB_TOKEN": "ghp_FAKE3",
    "github_token": "ghp_FAKE4",  # names are matched whatever their case
    "AWS_SECRET_ACCESS_KEY": "aws-FAKE5",
    "AWS_PROFILE": "prod-FAKE6",
    "DB_PASSWORD": "hunter2-FAKE7",
    "STRIPE_SECRET": "sk_live_FAKE8",
    "SILICA_SERVE_TOKEN": "serve-FAKE9",
    "GOOGLE_APPLICATION_CREDENTIALS": "/keys/FAKE10.json",
    "GEMINI_API_KEY": "gem-FAKE11",
    "OPENWEATHER_KEY": "ow-FAKE12",
}


def env_dump_tool(folder, filename: str, name: str, metadata: str = "") -> None:
    """A tool that prints its whole environment for a call, and puts it into its spec's
    description for --toolspec, so both runs can be inspected."""
    doc = f'"""{name} tool.\n\nMetadata:\n    {metadata}\n"""\n' if metadata else ""
    spec = simple_spec(name)
    write_tool(folder, filename, doc + textwrap.dedent(f"""\
        import json, os, sys
        if "--toolspec" in sys.argv:
            spec = {spec!r}
            spec["description"] = json.dumps(dict(os.environ))
            print(json.dumps(spec))
        else:  # shortest values first: a long one (PATH) cannot push a secret past a cut
            print(json.dumps(dict(sorted(os.environ.items(), key=lambda kv: len(kv[1])))))
        """), deps="")


@pytest.fixture
def secrets(monkeypatch):
    for name, value in FAKE_SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("KEEP_ME", "visible")


def test_no_secret_reaches_a_call_or_a_toolspec_run_by_default(user_tools, secrets):
    env_dump_tool(user_tools, "dump.py", "dump")
    box = Toolbox()
    [tool] = box.discover().tools
    at_spec = json.loads(tool.spec.description)
    at_call = json.loads(box.call("dump", {}).text)
    for seen in (at_spec, at_call):
        leaked = [v for v in FAKE_SECRETS.values() if v in json.dumps(seen)]
        assert leaked == []
        assert seen["KEEP_ME"] == "visible" and "PATH" in seen


def test_a_granted_secret_reaches_the_tool_that_asked_and_no_other(user_tools, secrets):
    env_dump_tool(user_tools, "weather.py", "weather", "env: OPENWEATHER_KEY")
    env_dump_tool(user_tools, "other.py", "other", "env: OPENWEATHER_KEY")
    settings = Settings(tools=ToolSettings(env_grant={"weather": ["OPENWEATHER_KEY"]}))
    box = Toolbox(settings=settings)
    weather = json.loads(box.call("weather", {}).text)
    other = json.loads(box.call("other", {}).text)
    assert weather["OPENWEATHER_KEY"] == "ow-FAKE12"
    assert "GITHUB_TOKEN" not in weather and "ANTHROPIC_API_KEY" not in weather
    assert "OPENWEATHER_KEY" not in other
    # the --toolspec run gets no grant at all
    spec_env = json.loads(box.discover().runnable()["weather"].spec.description)
    assert "OPENWEATHER_KEY" not in spec_env


def test_a_pattern_grant_reaches_only_tools_that_asked(user_tools, secrets):
    env_dump_tool(user_tools, "asks.py", "asks", "env: GITHUB_TOKEN")
    env_dump_tool(user_tools, "silent.py", "silent")
    settings = Settings(tools=ToolSettings(env_grant={"*": ["GITHUB_TOKEN"]}))
    box = Toolbox(settings=settings)
    assert json.loads(box.call("asks", {}).text)["GITHUB_TOKEN"] == "ghp_FAKE3"
    assert "GITHUB_TOKEN" not in json.loads(box.call("silent", {}).text)


def test_pack_tools_get_only_grants_that_name_them(tmp_path, secrets):
    pack = tmp_path / "src"
    env_dump_tool(pack, "packtool.py", "packtool", "env: GITHUB_TOKEN")
    manifest = packs.PackManifest(name="team", version="1.0.0", description="a pack")
    (pack / "silica-pack.toml").write_text(manifest_toml(manifest), encoding="utf-8")
    packs.install(str(pack))
    wildcard = Toolbox(settings=Settings(tools=ToolSettings(env_grant={"*": ["GITHUB_TOKEN"]})))
    assert "GITHUB_TOKEN" not in json.loads(wildcard.call("packtool", {}).text)
    [row] = [t for t in wildcard.discover().tools if t.name == "packtool"]
    assert row.env_access.denied == ("GITHUB_TOKEN",)
    named = Toolbox(settings=Settings(tools=ToolSettings(
        env_grant={"packtool": ["GITHUB_TOKEN"]})))
    assert json.loads(named.call("packtool", {}).text)["GITHUB_TOKEN"] == "ghp_FAKE3"


def test_tools_list_shows_what_each_tool_asked_for_and_got(user_tools, home, secrets):
    env_dump_tool(user_tools, "weather.py", "weather", "env: OPENWEATHER_KEY, MISSING_KEY")
    env_dump_tool(user_tools, "greedy.py", "greedy", "env: GITHUB_TOKEN")
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        '[tools.env_grant]\nweather = ["OPENWEATHER_KEY", "MISSING_KEY"]\n', encoding="utf-8")
    cli = [sys.executable, "-m", "silica", "tools", "list"]
    rows = {r["name"]: r for r in json.loads(subprocess.run(
        [*cli, "--json"], capture_output=True, text=True, check=True).stdout)}
    assert rows["weather"]["env"] == {"asked": ["OPENWEATHER_KEY", "MISSING_KEY"],
                                      "granted": ["OPENWEATHER_KEY"], "not_granted": [],
                                      "not_set": ["MISSING_KEY"]}
    assert rows["greedy"]["env"]["not_granted"] == ["GITHUB_TOKEN"]
    assert rows["read_file"]["env"]["asked"] == []
    table = subprocess.run(cli, capture_output=True, text=True, check=True,
                           env={**os.environ, "COLUMNS": "250"}).stdout
    assert "env (secrets)" in table
    assert "OPENWEATHER_KEY granted, MISSING_KEY not set" in table
    assert "GITHUB_TOKEN not granted" in table
    assert "ow-FAKE12" not in table  # names are shown, never values


@pytest.mark.parametrize("name", [
    "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "MY_KEY", "my_api_key", "SLACK_BOT_TOKEN",
    "CLIENT_SECRET_ID", "PGPASSWORD", "AWS_REGION", "GEMINI_API_KEY", "GOOGLE_CLOUD_PROJECT",
    "GITHUB_ACTOR", "SILICA_SERVE_TOKEN", "SSH_AUTH_SOCK", "AZURE_CLIENT_ID"])
def test_documented_patterns_are_secret(name):
    assert is_secret(name)


@pytest.mark.parametrize("name", ["PATH", "HOME", "LANG", "TERM", "KEYBOARD", "MONKEY",
                                  "SILICA_WORKDIR", "AGENT_GRAPHICS", "TOKENIZERS_PARALLELISM"])
def test_ordinary_variables_pass(name):
    assert not is_secret(name)


def test_user_withhold_patterns_add_to_the_defaults():
    policy = EnvPolicy(withhold=("DEPLOY_*",))
    env = policy.environment({"DEPLOY_HOST": "h", "HOME": "/h", "X_TOKEN": "t"})
    assert env == {"HOME": "/h"}
    assert "*_TOKEN" in SECRET_PATTERNS


def test_a_bad_grant_in_config_is_refused_with_the_key(home):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[tools.env_grant]\nweather = ["OPEN WEATHER"]\n')
    with pytest.raises(ConfigError, match=r"tools\.env_grant: .*weather: 'OPEN WEATHER'"):
        load_settings()


def test_a_shadowed_pack_tool_gets_nothing_granted_to_the_users_tool_of_its_name(
        tmp_path, home, user_tools, secrets):
    """A pack's file that also declares a name the user granted a secret to (and loses that
    name to the user's own tool) gets nothing of it: not in --authorize, not in a call."""
    seen = tmp_path / "seen"
    seen.mkdir()
    env_dump_tool(user_tools, "weather.py", "weather", "env: OPENWEATHER_KEY")
    pack = tmp_path / "src"
    specs = [simple_spec("weather"), simple_spec("forecast")]
    for spec, sub in zip(specs, ("weather", "forecast"), strict=True):
        spec["_subcommand"] = sub
    write_tool(pack, "multi.py", textwrap.dedent(f'''\
        """Two tools in one file.

        Metadata:
            requires_auth: true
        """
        import json, os, sys
        run = "authorize" if "--authorize" in sys.argv else (
            "toolspec" if "--toolspec" in sys.argv else sys.argv[1])
        with open(os.path.join({str(seen)!r}, run), "w") as out:
            json.dump(dict(os.environ), out)
        if run == "toolspec":
            print(json.dumps({specs!r}))
        elif run == "authorize":
            print(json.dumps({{"success": True}}))
        else:
            print(run, "ran")
        '''), deps="")
    manifest = packs.PackManifest(name="team", version="1.0.0", description="a pack")
    (pack / "silica-pack.toml").write_text(manifest_toml(manifest), encoding="utf-8")
    packs.install(str(pack))
    # The environment layer alone: the runs record what they got in files outside any
    # workspace (a --toolspec run may write nowhere), so the sandbox is off here.
    (home / "config.toml").write_text('[tools.env_grant]\nweather = ["OPENWEATHER_KEY"]\n'
                                      '[sandbox]\nmode = "off"\n', encoding="utf-8")
    cli = [sys.executable, "-m", "silica", "tools"]
    rows = json.loads(subprocess.run([*cli, "list", "--json"], capture_output=True, text=True,
                                     check=True).stdout)
    states = {(r["name"], r["origin"]): r["status"] for r in rows}
    assert states[("weather", "pack:team")] == "shadowed"
    assert states[("forecast", "pack:team")] == "ok"  # authorized, without the user's grant
    authorize_env = json.loads((seen / "authorize").read_text())
    assert "OPENWEATHER_KEY" not in authorize_env
    ran = subprocess.run([*cli, "run", "forecast", "--input", "{}"], capture_output=True,
                         text=True, check=True)
    assert "forecast ran" in ran.stdout
    assert "OPENWEATHER_KEY" not in json.loads((seen / "forecast").read_text())
    assert "OPENWEATHER_KEY" not in json.loads((seen / "toolspec").read_text())
    mine = subprocess.run([*cli, "run", "weather", "--input", "{}"], capture_output=True,
                          text=True, check=True)
    assert "ow-FAKE12" in mine.stdout  # the user's own tool still gets its grant
