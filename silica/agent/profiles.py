"""Agent profiles: named setups, ``[agents.NAME]`` in config.toml.

    settings = settings_for(load_settings(), "reviewer", model="gpt-4.1-mini")
    rule = tool_rule(settings, "reviewer")
    rule.offered(toolbox.specs())            # what the model is told
    rule.allows("git_log")                   # whether a call may run

A profile gives an agent its own ``provider``, ``model``, ``vision`` and ``system`` prompt
(each optional: unset ones come from the rest of the settings), and ``tools``: the names or
fnmatch patterns of the tools it may use (case-sensitive; unset: every tool, ``[]``: none).
A tool the profile does not allow is not offered to the model, and a call to it is refused
with an error result. ``vision = false`` makes every image a line of text for this agent
only (``silica.providers.models.without_images``): another agent, or the same model without
the profile, still gets images.

The precedence is: what the caller names outright (``--provider``, ``--model``, a
``provider`` or ``model`` in ``POST /sessions``), then the profile, then config.toml and the
environment. A session remembers the profile it runs as (``Conversation.agent``, saved with
it), so resuming it applies the profile again, as config.toml defines it then.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

from silica.config import AgentProfile, Settings
from silica.errors import SilicaError


class UnknownAgent(SilicaError):
    """No ``[agents.NAME]`` of that name; the message lists the known ones."""


def known_agents(settings: Settings) -> list[str]:
    """The names of the profiles in ``settings``, sorted."""
    return sorted(settings.agents)


def find_profile(settings: Settings, name: str, *, session: str | None = None) -> AgentProfile:
    """The profile ``name``; ``UnknownAgent`` listing the known ones if there is none
    (``session``: the session that remembered the name, for the message)."""
    profile = settings.agents.get(name)
    if profile is not None:
        return profile
    known = known_agents(settings)
    listed = (f"known agents: {', '.join(known)} ([agents.NAME] in config.toml)" if known
              else "config.toml defines no agent (add an [agents.NAME] section)")
    if session:
        raise UnknownAgent(
            f"session {session} runs as agent {name!r}, which config.toml no longer defines; "
            f"{listed}. Add [agents.{name}] back, or resume it with --agent NAME")
    raise UnknownAgent(f"unknown agent {name!r}; {listed}")


def settings_for(settings: Settings, agent: str | None = None, *,
                 provider: str | None = None, model: str | None = None,
                 session: str | None = None) -> Settings:
    """``settings`` as agent ``agent`` uses them: its profile's ``provider``, ``model``,
    ``vision`` and ``system`` in place of the top-level ones, then ``provider`` and
    ``model`` if given. ``UnknownAgent`` for a name config.toml does not define."""
    changes: dict = {}
    if agent:
        profile = find_profile(settings, agent, session=session)
        changes = {key: value for key in ("provider", "model", "vision", "system")
                   if (value := getattr(profile, key)) is not None}
    changes |= {k: v for k, v in (("provider", provider), ("model", model)) if v}
    return settings.model_copy(update=changes) if changes else settings


@dataclass(frozen=True)
class ToolRule:
    """Which tools an agent may use: ``patterns`` (names or fnmatch patterns), or None for
    every tool. ``agent`` names the profile, for the refusal."""

    patterns: tuple[str, ...] | None = None
    agent: str = ""

    def allows(self, name: str) -> bool:
        return self.patterns is None or any(fnmatchcase(name, p) for p in self.patterns)

    def offered(self, specs: Iterable[dict]) -> list[dict]:
        """The specs of the tools the agent may use, in their order."""
        return [spec for spec in specs if self.allows(str(spec.get("name", "")))]

    def refusal(self, name: str) -> str:
        """What the model is told of a call to a tool it may not use."""
        return (f"the tool {name!r} may not be used by agent {self.agent!r} (its profile "
                "does not allow it); use one of the tools you were offered")


def tool_rule(settings: Settings, agent: str | None) -> ToolRule:
    """The ``ToolRule`` of agent ``agent`` (every tool when it is None or sets no
    ``tools``); ``UnknownAgent`` for a name config.toml does not define."""
    if not agent:
        return ToolRule()
    patterns = find_profile(settings, agent).tools
    return ToolRule(None if patterns is None else tuple(patterns), agent)
