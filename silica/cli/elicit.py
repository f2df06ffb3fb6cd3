"""The terminal's answers to a tool's request for values (``silica.elicitation``).

- ``terminal_asker(timeout)``: ``chat`` asks the person, field by field on stderr, then
  ``[a]ccept / [d]ecline / [c]ancel``. Each field shows its title, description, whether it
  is required (``*``), its default (Enter keeps it) and its choices (numbered: type the
  number or the value). A value that does not fit is said and asked again. Ctrl-C, or the
  end of input, cancels; no answer within ``timeout`` seconds declines.
- ``unattended_asker(mode)``: ``ask`` asks nobody: it declines (``"decline"``) or accepts
  the form's defaults (``"defaults"``: ``--yes`` or ``[mcp] elicitation``), declining when
  a required field has none; either way one line on stderr says what it did.

Everything the server wrote (its message, titles, descriptions, choices) was made safe by
``silica.mcp.elicit.check_request`` and is printed through ``plain`` once more.
"""

from __future__ import annotations

import contextlib
import select
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from rich.text import Text

from silica.cli.output import err, plain
from silica.elicitation import Answer, Asker, Elicitation
from silica.mcp.elicit import ElicitationError, check_answer, check_value, choices, defaults, kind


class _Timeout(Exception):
    pass


def terminal_asker(timeout: float) -> Asker:
    """An ``Asker`` that puts each request to the person at the terminal (see the module)."""

    async def ask(request: Elicitation) -> Answer:
        deadline = time.monotonic() + timeout
        try:
            with _interruptible():
                err.print(Text.assemble(("\n  ? ", "yellow"), plain(request.source, "bold"),
                                        " asks: ", plain(request.message)))
                return _fill(request, deadline)
        except KeyboardInterrupt:
            err.print(Text("\n  cancelled", style="dim"))
            return Answer("cancel")
        except EOFError:
            err.print(Text("\n  cancelled (end of input)", style="dim"))
            return Answer("cancel")
        except _Timeout:
            err.print(Text(f"\n  no answer within {timeout:g} s: declined", style="dim"))
            return Answer("decline", reason=f"no answer within {timeout:g} s")

    return ask


def _fill(request: Elicitation, deadline: float) -> Answer:
    properties: dict[str, Any] = request.schema.get("properties", {})
    required = set(request.schema.get("required", []))
    values: dict[str, Any] = {}
    for name, prop in properties.items():
        value = _field(request, name, prop, name in required, deadline)
        if value is not None:
            values[name] = value
    while True:
        choice = _line(Text.assemble("  ", ("[a]ccept", "bold"), " / [d]ecline / [c]ancel: "),
                       deadline).strip().lower()
        if choice in ("a", "accept"):
            try:
                return Answer("accept", check_answer(request, values))
            except ElicitationError as exc:  # each field was checked: only a bug gets here
                err.print(Text.assemble(("  ! ", "red"), plain(exc)))
                return Answer("decline", reason=str(exc))
        if choice in ("d", "decline"):
            return Answer("decline")
        if choice in ("c", "cancel"):
            return Answer("cancel")


def _field(request: Elicitation, name: str, prop: dict[str, Any], required: bool,
           deadline: float) -> Any:
    """One field's checked value, or None (left out)."""
    k = kind(prop)
    options = choices(prop)
    label = Text.assemble("    ", plain(prop.get("title") or name, "bold"),
                          ("*" if required else "", "red"))
    if prop.get("description"):
        label.append_text(plain(f" ({prop['description']})", "dim"))
    if options:
        err.print(label)
        for n, (_, title) in enumerate(options, 1):
            err.print(Text.assemble(f"      {n}) ", plain(title)))
        label = Text("    " + ("numbers, separated by commas" if k == "multi" else "number"))
    label.append_text(_hint(prop, k, options))
    label.append(": ")
    while True:
        typed = _line(label, deadline).strip()
        if not typed:
            if "default" in prop:
                return prop["default"]
            if not required:
                return None
            err.print(Text("    required", style="red"))
            continue
        try:
            return check_value(request, name, _chosen(typed, k, options))
        except ElicitationError as exc:
            err.print(Text.assemble(("    ! ", "red"), plain(exc)))


def _hint(prop: dict[str, Any], k: str, options: list[tuple[str, str]]) -> Text:
    words = {"boolean": "y/n", "integer": "whole number", "number": "number"}.get(k, "")
    if k in ("integer", "number") and ("minimum" in prop or "maximum" in prop):
        words += f", {prop.get('minimum', '…')} to {prop.get('maximum', '…')}"
    if prop.get("format"):
        words = prop["format"]
    shown = Text(f" ({words})" if words else "", style="dim")
    if "default" in prop:
        default = prop["default"]
        if k == "boolean":
            default = "y" if default else "n"
        elif options:
            picked = default if isinstance(default, list) else [default]
            default = ", ".join(str(i) for i, (v, _) in enumerate(options, 1) if v in picked)
        shown.append_text(plain(f" [{default}]", "cyan"))
    return shown


def _chosen(typed: str, k: str, options: list[tuple[str, str]]) -> Any:
    """What the person typed, as the value: a choice's number becomes its value."""
    def one(word: str) -> str:
        if word.isdigit() and 1 <= int(word) <= len(options):
            return options[int(word) - 1][0]
        return word

    if k == "enum":
        return one(typed)
    if k == "multi":
        return [one(w) for w in typed.replace(",", " ").split()]
    return typed


def _line(prompt: Text, deadline: float) -> str:
    """One line typed by the person; ``_Timeout`` past ``deadline`` (at a terminal),
    ``EOFError`` at the end of input."""
    err.print(prompt, end="")
    err.file.flush()
    if sys.stdin.isatty():
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([sys.stdin], [], [], left)[0]:
            raise _Timeout
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\r\n")


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """Within: Ctrl-C raises ``KeyboardInterrupt`` here (the session's loop would only
    cancel its turn once this form returned)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def unattended_asker(mode: str, command: str = "ask") -> Asker:
    """An ``Asker`` for a run nobody watches (``silica COMMAND``: ``ask``, ``tools run``):
    ``"defaults"`` accepts the form's defaults (declines when a required field has none);
    anything else declines."""

    async def answer(request: Elicitation) -> Answer:
        values = defaults(request) if mode == "defaults" else None
        if values is not None:
            said = "accepted its defaults"
            result = Answer("accept", values, reason=said)
        elif mode == "defaults":
            reason = "declined: a required field has no default"
            said = reason
            result = Answer("decline", reason=reason)
        else:
            how = "--yes, or " if command == "ask" else ""
            reason = (f"declined: silica {command} asks nobody ({how}[mcp] elicitation = "
                      "\"defaults\" accepts a form's defaults)")
            said = reason
            result = Answer("decline", reason=reason)
        err.print(Text.assemble(("  ! ", "yellow"), plain(request.source, "bold"),
                                " asked for input (", plain(_short(request.message)), "); ",
                                plain(said)))
        return result

    return answer


def _short(text: str, most: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= most else line[:most - 1] + "…"
