"""The environment a tool sees: silica's own, plus the graphics it may use, minus secrets.

* ``AGENT_GRAPHICS`` tells the tool which inline-image protocols silica reads from stdout.
* ``SILICA_WORKDIR`` is the directory silica was started in (tools run in their own folder).
* ``SILICA_TOOL_ENV_WITHHOLD`` is a comma-separated list of variable names, or shell-style
  patterns such as ``*_TOKEN``, that tools must not see.
"""

import fnmatch
import os

from silica.hookspecs import hookimpl

AGENT_GRAPHICS = "kitty,iterm2"
WITHHOLD_VAR = "SILICA_TOOL_ENV_WITHHOLD"


def withheld_patterns() -> list[str]:
    raw = os.environ.get(WITHHOLD_VAR, "")
    return [p.strip() for p in raw.split(",") if p.strip()]


@hookimpl
def silica_tool_env(path, env: dict[str, str]) -> None:
    env["AGENT_GRAPHICS"] = AGENT_GRAPHICS
    env.setdefault("SILICA_WORKDIR", os.getcwd())
    patterns = withheld_patterns()
    if patterns:
        for name in [n for n in env if any(fnmatch.fnmatchcase(n, p) for p in patterns)]:
            del env[name]
