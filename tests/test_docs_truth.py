"""The docs name everything there is: every hook, default plugin and CLI command.

A hook added to ``silica/hookspecs.py``, a default plugin added to
``silica.plugins.DEFAULT_PLUGINS`` or a command added to the CLI fails this test until the
page that documents it (docs/plugins.md, docs/cli.md) does too.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from silica import hookspecs
from silica.default_plugins.tool_env import AGENT_GRAPHICS
from silica.plugins import DEFAULT_PLUGINS

DOCS = Path(__file__).parent.parent / "docs"


def hook_names() -> list[str]:
    return [name for name, value in inspect.getmembers(hookspecs, inspect.isfunction)
            if name.startswith("silica_") and hasattr(value, "silica_spec")]


def command_paths() -> list[str]:
    """Every command of the cyclopts app, subcommands by their full path ("tools run")."""
    from silica.cli import app

    found: list[str] = []

    def walk(group, prefix: tuple[str, ...]) -> None:
        for name in group:
            if name.startswith("-"):
                continue
            sub = group[name]
            if any(not n.startswith("-") for n in sub):
                walk(sub, (*prefix, name))
            else:
                found.append(" ".join((*prefix, name)))

    walk(app, ())
    return found


def test_every_hook_is_in_the_plugins_page():
    page = (DOCS / "plugins.md").read_text()
    hooks = hook_names()
    assert len(hooks) >= 8
    assert [h for h in hooks if f"`{h}(" not in page] == []


def test_every_default_plugin_is_in_the_plugins_page():
    page = (DOCS / "plugins.md").read_text()
    short = [name.rsplit(".", 1)[1] for name in DEFAULT_PLUGINS]
    assert [p for p in short if f"| `{p}` |" not in page] == []


def test_every_command_is_in_the_cli_page():
    page = (DOCS / "cli.md").read_text()
    commands = command_paths()
    assert {"tools run", "packs add-tool", "serve", "mcp serve"} <= set(commands)
    missing = [c for c in commands
               if not re.search(rf"`silica {re.escape(c)}(?=[ `\]])", page)]
    assert missing == []


def test_the_docs_give_the_agent_graphics_silica_sets():
    for page in sorted(DOCS.glob("*.md")):
        for value in re.findall(r"AGENT_GRAPHICS=([\w,]+)", page.read_text()):
            assert value == AGENT_GRAPHICS, page.name
