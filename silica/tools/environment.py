"""What one tool run gets: silica's environment without secrets plus its granted ones, and
its sandbox (the confinement with its granted hosts, paths and display)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from silica.security.env import EnvPolicy
from silica.security.sandbox import SandboxPolicy
from silica.tools.model import Tool

if TYPE_CHECKING:  # running (asyncio and the runner) is not needed to list tools
    from silica.tools.confined import Sandboxed


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


def tool_sandbox(policy: SandboxPolicy | None, path: Path, tools: Sequence[Tool], *,
                 workspace: Path | None, cache_folder: Path | None) -> Sandboxed | None:
    """The sandbox of one run of the file at ``path``: with the grants of ``tools`` (the
    names it runs as; none for a ``--toolspec`` run), writing to ``workspace`` (if any)."""
    if policy is None:
        return None
    from silica.tools.confined import Sandboxed

    network: list[str] = []
    write: list[str] = []
    display = False
    confs = [policy.for_tool(t.name, t.metadata.network, t.metadata.write,
                             t.metadata.display, from_pack(t), workspace=workspace,
                             readable=[path.parent]) for t in tools]
    for c in confs:
        network += c.network
        write += map(str, c.writable)
        display = display or c.display
    label = tools[0].name if len(tools) == 1 else path.stem
    conf = policy.confinement(label=label, workspace=workspace, network=network,
                              writable=[Path(w) for w in dict.fromkeys(write)],
                              display=display, readable=[path.parent])
    return Sandboxed(policy, conf, cache_folder)
