"""docs/agent.md is true to the code: the providers it lists are the built-in ones, its
config example loads and shows the defaults the code has, and its curl example works against
a real ``silica serve``."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path

from serve_daemon import start_daemon
from wire import anthropic_server

from silica.config import AgingSettings, Settings
from silica.providers.models import DEFAULT_MODELS

DOC = (Path(__file__).resolve().parent.parent / "docs" / "agent.md").read_text(encoding="utf-8")


def toml_blocks() -> list[str]:
    return re.findall(r"```toml\n(.*?)```", DOC, re.S)


def test_the_providers_listed_are_the_built_in_ones():
    sentence = DOC[DOC.index("`--provider` ("):].split(")", 1)[0]
    assert re.findall(r"`([a-z-]+)`", sentence) == ["--provider", *DEFAULT_MODELS]
    comment = re.search(r'^provider = "\w+" +# (.*)$', DOC, re.M)
    assert comment and comment.group(1).split(", ") == list(DEFAULT_MODELS)


def test_the_config_example_loads_and_its_aging_values_are_the_defaults():
    [config, *_] = toml_blocks()
    for block in toml_blocks():
        Settings.model_validate(tomllib.loads(block))
    aging = tomllib.loads(config)["aging"]
    defaults = AgingSettings().model_dump()
    assert aging and {k: defaults[k] for k in aging} == aging


def test_the_curl_example_starts_a_session_on_a_real_daemon(home):
    start = DOC.index("curl -X POST")
    command = DOC[start:DOC.index("\n```", start)].replace("\\\n", " ")
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[agents.reviewer]\nprovider = "anthropic"\n')
    with anthropic_server([]) as srv, \
            start_daemon(home, env={**srv.env, "SILICA_PROVIDER": "anthropic"}) as daemon:
        command = command.replace("http://127.0.0.1:8700", daemon.url)
        done = subprocess.run(["bash", "-c", command + " -s -w '\\n%{http_code}'"],
                              env={"PATH": "/usr/bin:/bin", "SILICA_SERVE_TOKEN": daemon.token},
                              capture_output=True, text=True, timeout=60)
    body, status = done.stdout.rsplit("\n", 1)
    assert status == "201", done.stdout
    assert json.loads(body)["session_id"]
