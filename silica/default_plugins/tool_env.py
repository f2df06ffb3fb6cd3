"""What silica adds to a tool's environment (which holds no secrets: ``silica.security.env``).

* ``AGENT_GRAPHICS`` tells the tool which inline-image protocols silica reads from stdout.
* ``SILICA_WORKDIR`` is the directory silica was started in (tools run in their own folder).
"""

import os

from silica.hookspecs import hookimpl

AGENT_GRAPHICS = "kitty,iterm2,sixel"


@hookimpl
def silica_tool_env(path, env: dict[str, str]) -> None:
    env["AGENT_GRAPHICS"] = AGENT_GRAPHICS
    env.setdefault("SILICA_WORKDIR", os.getcwd())
