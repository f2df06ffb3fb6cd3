"""What silica adds to a tool's environment (which holds no secrets: ``silica.security.env``).

* ``AGENT_GRAPHICS`` tells the tool which inline-image protocols silica reads from stdout.
* ``SILICA_WORKDIR`` is the workspace: the folder the session's tools work in (a ``Toolbox``
  sets it to its ``cwd``: the current folder for ``tools run``, ``ask`` and ``chat``, the
  session's workspace under ``serve``); this plugin's default is the current folder, for a
  caller that sets none. Tools run in their own folder.
"""

import os

from silica.hookspecs import hookimpl

AGENT_GRAPHICS = "kitty,iterm2,sixel"


@hookimpl
def silica_tool_env(path, env: dict[str, str]) -> None:
    env["AGENT_GRAPHICS"] = AGENT_GRAPHICS
    env.setdefault("SILICA_WORKDIR", os.getcwd())
