"""From a model's JSON input to the argv a tool's cyclopts CLI accepts.

Every value is passed as ``--name=value`` (one token), so negative numbers and strings that
begin with ``-`` are never mistaken for options. Booleans become ``--flag`` / ``--no-flag``,
lists repeat their option once per item (an empty list is ``--empty-name``), objects (and
objects inside lists) are passed as JSON, and ``null`` leaves the parameter out so the
tool's default applies. Parameter and subcommand names are spelled as cyclopts spells
them: lower case, ``_`` as ``-``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from silica.errors import InvalidInput
from silica.tools._silica_toolspec import cli_name
from silica.tools.model import ToolSpec


def subcommand_for(spec: ToolSpec, path: Path, multi: bool) -> str | None:
    """The subcommand that runs ``spec`` in a multi-tool file (``None`` for a single tool).

    ``_subcommand`` in the spec is used as given; otherwise, as in the original protocol,
    the tool name without the file's stem prefix (``gmail_search`` in gmail.py: ``search``).
    """
    if spec.subcommand:
        return spec.subcommand
    if not multi or spec.name == path.stem:
        return None
    name = spec.name
    if name.startswith(path.stem + "_"):
        name = name[len(path.stem) + 1:]
    return cli_name(name)


def build_arguments(spec: ToolSpec, arguments: Any) -> list[str]:
    """The option tokens for ``arguments``; raises ``InvalidInput`` saying what is wrong."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise InvalidInput(f"the input for {spec.name} must be a JSON object, "
                           f"not {type(arguments).__name__}")
    props: dict[str, Any] = spec.input_schema.get("properties", {})
    unknown = [k for k in arguments if k not in props]
    if unknown:
        known = ", ".join(props) or "none"
        raise InvalidInput(f"{spec.name} has no parameter {unknown[0]!r} (parameters: {known})")
    missing = [r for r in spec.input_schema.get("required", [])
               if arguments.get(r) is None]
    if missing:
        raise InvalidInput(f"{spec.name} needs the parameter {missing[0]!r}")
    tokens: list[str] = []
    for key, value in arguments.items():
        tokens.extend(_option(cli_name(key), value))
    return tokens


def _option(flag: str, value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, bool):
        return [f"--{flag}" if value else f"--no-{flag}"]
    if isinstance(value, list | tuple):
        if not value:
            return [f"--empty-{flag}"]
        return [f"--{flag}={_scalar(item)}" for item in value]
    return [f"--{flag}={_scalar(value)}"]


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, float) and value.is_integer():
        return str(int(value)) if abs(value) < 1e15 else repr(value)
    return str(value)
