"""What a tool's environment may hold: everything of silica's own except secrets, plus the
secrets the user granted it.

A variable is a secret when its name matches one of ``SECRET_PATTERNS`` (case-insensitive)
or a pattern the user withholds (``[tools] env_withhold``, ``$SILICA_TOOL_ENV_WITHHOLD``).
Secrets never reach a tool, its ``--toolspec`` run or anything it starts, unless the user
grants them in config.toml:

    [tools.env_grant]
    weather = ["OPENWEATHER_KEY"]       # the tool named weather gets this variable
    "*" = ["HTTP_PROXY_TOKEN"]          # a pattern: every tool that asks for it (env: ...)

A grant keyed by a tool's exact name is given whether or not the tool asked. A grant keyed by
a pattern reaches only tools that name the variable in their metadata (``env: NAME, ...``),
and never a pack's tools: a pack's tool gets only what the user granted it by name.
``--toolspec`` runs get no grant at all; ``--authorize`` runs get the grants of the names
the file wins once name clashes are settled, so a shadowed tool gets nothing.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

SECRET_PATTERNS: tuple[str, ...] = (
    "*_KEY", "*_API_KEY", "*_TOKEN", "*_SECRET*", "*PASSWORD*", "*PASSWD*", "*_PASS",
    "*CREDENTIAL*", "AWS_*", "AZURE_*", "ANTHROPIC_*", "OPENAI_*", "GEMINI_*", "GOOGLE_*",
    "GITHUB_*", "SSH_AUTH_SOCK", "SILICA_SERVE_TOKEN", "SILICA_SERVE_REDIS",
)
"""Names of variables no tool sees unless granted (matched case-insensitively)."""

WITHHOLD_VAR = "SILICA_TOOL_ENV_WITHHOLD"
"""A comma-separated list of names or patterns withheld on top of the settings' own."""

_PATTERN_CHARS = frozenset("*?[")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")  # a TOML key that needs no quotes


def withhold_from_environment() -> tuple[str, ...]:
    """The patterns in ``$SILICA_TOOL_ENV_WITHHOLD``."""
    raw = os.environ.get(WITHHOLD_VAR, "")
    return tuple(p.strip() for p in raw.split(",") if p.strip())


def withhold_from_config(home: Path) -> tuple[str, ...]:
    """The patterns of ``[tools] env_withhold`` in ``<home>/config.toml``, read with the
    stdlib alone: a silica process hides them from ``/proc`` before it loads its settings
    (``silica.security.process``). ``()`` when the file is missing or not valid: loading the
    settings says what is wrong with it."""
    import tomllib

    try:
        with open(home / "config.toml", "rb") as f:  # silica.config.CONFIG_NAME
            tools = tomllib.load(f).get("tools", {})
    except (OSError, ValueError):
        return ()
    patterns = tools.get("env_withhold", []) if isinstance(tools, dict) else []
    if not isinstance(patterns, list):
        return ()
    return tuple(p for p in patterns if isinstance(p, str) and p)


def is_pattern(text: str) -> bool:
    return any(c in _PATTERN_CHARS for c in text)


# One compiled pattern each: listing 50 tools checks every variable for every tool.
_SECRET = re.compile("|".join(fnmatch.translate(p) for p in SECRET_PATTERNS), re.IGNORECASE)


@lru_cache(maxsize=64)
def _any_of(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    return re.compile("|".join(fnmatch.translate(p) for p in patterns)) if patterns else None


def matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``name`` matches one of the shell-style ``patterns`` (case counts)."""
    compiled = _any_of(tuple(patterns))
    return compiled is not None and compiled.match(name) is not None


def is_secret(name: str, withhold: Iterable[str] = ()) -> bool:
    """Whether the variable ``name`` is withheld from tools unless granted."""
    return _SECRET.match(name) is not None or matches(name, withhold)


def granted_items(grants: Mapping[str, Iterable[str]], tool: str, asked: Iterable[str],
                  from_pack: bool) -> list[str]:
    """What ``grants`` (tool name or pattern -> items) give ``tool``: everything under its
    exact name; under a pattern key that matches it, only the items it ``asked`` for (an
    item that is a pattern covers the asked items it matches), and nothing for a pack's tool.
    The rule of every grant: variables here, hosts, paths and the display in the sandbox."""
    asked = set(asked)
    out: list[str] = list(grants.get(tool, ()))
    if not from_pack:
        for key, items in grants.items():
            if key != tool and is_pattern(key) and fnmatch.fnmatchcase(tool, key):
                out += [n for n in items if n in asked or
                        (is_pattern(n) and any(fnmatch.fnmatchcase(a, n) for a in asked))]
    return out


@dataclass(frozen=True)
class EnvAccess:
    """What one tool asked for and what it gets, for ``silica tools list``."""

    asked: tuple[str, ...] = ()
    granted: tuple[str, ...] = ()  # secrets it gets (set in silica's environment)
    denied: tuple[str, ...] = ()  # secrets it asked for and was not granted
    unset: tuple[str, ...] = ()  # granted or asked for, but not set in the environment
    ungranted: tuple[str, ...] = ()  # secrets it asked for and was not granted, set or not

    def to_json(self) -> dict[str, list[str]]:
        return {"asked": list(self.asked), "granted": list(self.granted),
                "not_granted": list(self.denied), "not_set": list(self.unset)}

    def hint(self, tool: str) -> str:
        """For the person running ``tool``: which secrets it asked for and runs without, and
        the config.toml setting that grants them ("" when it asked for none it lacks)."""
        if not self.ungranted:
            return ""
        names = ", ".join(self.ungranted)
        them = "it" if len(self.ungranted) == 1 else "them"
        key = tool if _BARE_KEY.fullmatch(tool) else json.dumps(tool)
        value = "[" + ", ".join(json.dumps(n) for n in self.ungranted) + "]"
        return (f"tool {tool} asked for {names}, not granted to it, so it runs without "
                f"{them}; to grant {them}, put {key} = {value} under [tools.env_grant] in "
                "config.toml")

    def summary(self) -> str:
        """One short line for a table cell ("" when the tool asked for and got nothing)."""
        parts = [f"{n} granted" for n in self.granted]
        parts += [f"{n} not granted" for n in self.denied]
        parts += [f"{n} not set" for n in self.unset]
        return ", ".join(parts)


@dataclass(frozen=True)
class EnvPolicy:
    """The user's rules: patterns withheld on top of the defaults, and grants by tool."""

    withhold: tuple[str, ...] = ()
    grants: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def granted_patterns(self, tool: str, asked: Iterable[str], from_pack: bool) -> list[str]:
        """The variable names or patterns granted to ``tool`` (see the module docstring)."""
        return granted_items(self.grants, tool, asked, from_pack)

    def environment(self, environ: Mapping[str, str],
                    granted: Iterable[str] = ()) -> dict[str, str]:
        """``environ`` without its secrets, except those matching a ``granted`` pattern."""
        granted = tuple(granted)
        return {name: value for name, value in environ.items()
                if not is_secret(name, self.withhold) or matches(name, granted)}

    def access(self, environ: Mapping[str, str], tool: str, asked: Iterable[str],
               from_pack: bool) -> EnvAccess:
        """What ``tool`` asked for and what it would get from ``environ`` now."""
        asked = tuple(dict.fromkeys(asked))
        patterns = self.granted_patterns(tool, asked, from_pack)
        given = self.environment(environ, patterns)
        secrets_given = sorted(n for n in given if is_secret(n, self.withhold))
        named = [p for p in patterns if not is_pattern(p)]
        wanted = list(dict.fromkeys([*asked, *named]))
        return EnvAccess(
            asked=asked,
            granted=tuple(secrets_given),
            denied=tuple(n for n in asked if n in environ and n not in given),
            unset=tuple(n for n in wanted if n not in environ),
            ungranted=tuple(n for n in asked
                            if is_secret(n, self.withhold) and not matches(n, patterns)),
        )
