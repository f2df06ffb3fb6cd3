"""The ``Metadata:`` block in a tool file's module docstring, read without running it.

    Metadata:
        category: web
        tags: api, weather
        long_running: false
        requires_auth: true
        timeout: 120
        env: OPENWEATHER_KEY, GITHUB_TOKEN
        network: api.openweathermap.org
        write: ~/Pictures/charts
        display: false
        title: Weather forecast
        read_only: true
        destructive: false
        idempotent: true
        open_world: true
        icon: https://example.org/weather.svg

``env`` names the secret variables the tool needs; ``network`` the hosts it must reach,
``write`` the paths outside the workspace it must write and ``display`` whether it needs the
X display. The user grants each in config (see ``silica.security.env`` and
``silica.security.sandbox``); asking alone gives nothing.

``title`` is a name for people; ``read_only``, ``destructive``, ``idempotent`` and
``open_world`` say what the tool does to the world (MCP's annotations; unsaid when left
out or not a yes/no); ``icon`` is an ``https:`` or ``data:image/`` URL.
"""

from __future__ import annotations

import ast
import inspect
import io
import re
import tokenize

from silica.tools.model import ToolMetadata

_BLOCK = re.compile(r"^Metadata:[ \t]*\n((?:[ \t]+[\w-]+[ \t]*:.*(?:\n|$))*)", re.M | re.I)
_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}
_HINTS = ("read_only", "destructive", "idempotent", "open_world")
_ICON = re.compile(r"^(https://\S+|data:image/[\w.+-]+(;[\w-]+=[^;,\s]*)*(;base64)?,\S+)$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


_SKIP = {tokenize.ENCODING, tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT}


def module_docstring(source: str) -> str:
    """The module's docstring, as ``ast.get_docstring`` gives it, read from the first
    logical line only: discovery reads every tool file at every listing, and parsing each
    whole file was most of a warm listing's work."""
    strings: list[str] = []
    opened = closed = 0  # parentheses around the strings: ("a" "b") is a docstring too
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in _SKIP:
                continue
            if tok.type == tokenize.STRING and not closed:
                strings.append(tok.string)
            elif tok.exact_type == tokenize.LPAR and not strings:
                opened += 1
            elif tok.exact_type == tokenize.RPAR and strings and closed < opened:
                closed += 1
            elif (tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER)
                  or tok.exact_type == tokenize.SEMI) and strings and closed == opened:
                break
            else:
                return ""  # the first statement is not a lone string
        doc = ast.literal_eval(" ".join(strings))
    except (SyntaxError, ValueError, tokenize.TokenError, MemoryError, RecursionError):
        return ""
    return inspect.cleandoc(doc) if isinstance(doc, str) else ""


def parse_metadata(source: str) -> ToolMetadata:
    """The metadata of a tool file's source; defaults for anything missing or malformed."""
    doc = module_docstring(source)
    match = _BLOCK.search(doc)
    if not match:
        return ToolMetadata()
    meta = ToolMetadata()
    for line in match.group(1).splitlines():
        key, _, value = line.strip().partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "category" and value:
            meta.category = value
        elif key == "tags":
            meta.tags = [t.strip() for t in value.split(",") if t.strip()]
        elif key in ("long_running", "requires_auth", "display") or (
                key in _HINTS and value.lower() in _TRUE | _FALSE):
            setattr(meta, key, value.lower() in _TRUE)
        elif key == "title" and value.isprintable():
            meta.title = value[:200]
        elif key == "icon" and _ICON.match(value):
            meta.icon = value
        elif key == "env":
            meta.env = [n for n in (v.strip() for v in value.split(",")) if _ENV_NAME.match(n)]
        elif key in ("network", "write"):
            setattr(meta, key, [v for v in (v.strip() for v in value.split(","))
                                if v and len(v) <= 253 and v.isprintable()])
        elif key == "timeout":
            try:
                seconds = float(value.rstrip("s").strip())
            except ValueError:
                continue
            if seconds > 0:
                meta.timeout = seconds
        elif key:
            meta.extra[key] = value
    return meta
