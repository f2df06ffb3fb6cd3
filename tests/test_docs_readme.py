"""The README's commands are true: every ``silica ...`` it shows names a command that exists,
and its agent example works from a fresh home, set-up step included (installing silica
installs no tools: the example's ``chart`` comes from the bundled pack)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def bash_blocks(text: str) -> dict[str, list[str]]:
    """Each ```bash block's lines (comments dropped), keyed by the heading above it."""
    blocks: dict[str, list[str]] = {}
    heading = ""
    for part in re.split(r"(^#+ [^\n]*$|^```bash\n.*?^```$)", text, flags=re.M | re.S):
        if part.startswith("#"):
            heading = part.lstrip("#").strip()
        elif part.startswith("```bash"):
            lines = [re.sub(r"\s+#\s.*$", "", line).strip() for line in part.splitlines()[1:-1]]
            blocks.setdefault(heading, []).extend(line for line in lines if line)
    return blocks


def silica_commands(line: str) -> list[list[str]]:
    """The words after ``silica`` of each command in a shell line (``a && b``; leading
    ``VAR=value`` assignments skipped)."""
    found = []
    for segment in line.split("&&"):
        words = shlex.split(segment)
        while words and re.match(r"^[A-Z_]+=", words[0]):
            words = words[1:]
        if words[:1] == ["silica"]:
            found.append(words[1:])
    return found


def command_paths(app, path=()) -> set[tuple[str, ...]]:
    paths = set()
    for name in list(app):
        if name in ("--help", "-h", "--version"):
            continue
        sub = app[name]
        if sub is not app:
            paths |= command_paths(sub, (*path, name))
    if app.default_command:
        paths.add(path)
    return paths


def test_every_silica_command_in_the_readme_exists():
    from silica.cli import app

    known = command_paths(app)
    shown = [words for lines in bash_blocks(README).values() for line in lines
             for words in silica_commands(line)]
    assert len(shown) > 15
    unknown = [" ".join(words) for words in shown
               if words != ["--version"] and not any(
                   tuple(words[:n]) in known for n in range(1, len(words) + 1))]
    assert unknown == []


def test_the_agent_example_has_its_tools_on_a_fresh_home(home):
    agent = bash_blocks(README)["The agent"]
    asked = next(line for line in agent if line.startswith('silica ask "plot'))
    setup = [line for line in agent[:agent.index(asked)] if line.startswith("silica ")]
    assert setup, "the README's agent example does not say how to get the bundled tools"
    for line in setup:
        done = subprocess.run([sys.executable, "-m", "silica", *shlex.split(line)[1:]],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (line, done.stderr)
    listed = subprocess.run([sys.executable, "-m", "silica", "tools", "list", "--json"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    tools = {t["name"]: t["status"] for t in json.loads(listed.stdout)}
    assert tools.get("chart") == "ok"
