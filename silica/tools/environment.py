"""The environment one tool run gets: silica's own without secrets, plus its grants."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from silica.security.env import EnvPolicy
from silica.tools.model import Tool


def tool_env(pm, path: Path, policy: EnvPolicy | None = None,
             granted: Sequence[str] = ()) -> dict[str, str]:
    """The environment the tool file at ``path`` runs with: silica's own without its secrets
    (``policy``; only the ``granted`` names or patterns come through), then adjusted by the
    ``silica_tool_env`` plugins."""
    env = (policy or EnvPolicy()).environment(os.environ, granted)
    pm.hook.silica_tool_env(path=path, env=env)
    return env


def granted_env(tools: Sequence[Tool], policy: EnvPolicy) -> list[str]:
    """The grants of every tool in ``tools`` (one file's), for a run of that file."""
    return [g for t in tools
            for g in policy.granted_patterns(t.name, t.metadata.env, from_pack(t))]


def from_pack(tool: Tool) -> bool:
    return tool.folder.origin.startswith("pack:")
