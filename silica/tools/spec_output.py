"""What a ``--toolspec`` run printed, read with bounds: the JSON spec, or why there is none.

Stray lines before or after the JSON are tolerated; JSON nested deeper than
``MAX_SPEC_DEPTH`` is refused (it would crash a recursive parser); a command-line parser that
refused the flag before the tool could answer gets a reason that says how to fix the tool.
"""

from __future__ import annotations

import json
import re
from typing import Any

from silica.jsonsafe import deeper_than

MAX_SPEC_DEPTH = 64  # a real schema nests a handful of levels; deep JSON is an attack
# A command-line parser that refused --toolspec before the tool could answer it.
_REFUSED = re.compile(r"requires an argument|requires \d+ positional arguments|flag required"
                      r"|Missing required|Unknown option|the following arguments are required"
                      r"|unrecognized arguments")
_REFUSED_HINT = (
    "; the tool's command line refused --toolspec before the tool could answer it. Fix the "
    "tool: import the helper before it calls its cyclopts App (sys.path.insert(0, "
    "str(Path(__file__).parent)); import _silica_toolspec) and the helper answers "
    "--toolspec for it; with argparse, or app.parse_args(), answer it before parsing: "
    "if \"--toolspec\" in sys.argv: print(json.dumps(generate_schema(FUNCTION))); "
    "sys.exit(0)")


def refusal_hint(stderr_tail: str, stdout: bytes) -> str:
    """How to fix a tool whose command line refused ``--toolspec`` ("" if it did not)."""
    said = stderr_tail + stdout[-2000:].decode("utf-8", errors="replace")  # cyclopts 3: stdout
    return _REFUSED_HINT if _REFUSED.search(said) else ""


def parse_toolspec_output(stdout: bytes) -> Any:
    """The JSON object or array a ``--toolspec`` run printed.

    Stray lines before or after the JSON (a library's warning, say) are tolerated.
    Raises ``ValueError`` with a message that says what was printed instead.
    """
    text = stdout.decode("utf-8", errors="replace").strip()
    if not text:
        raise ValueError("--toolspec printed nothing; it must print the tool's spec as JSON")
    try:
        return _spec_json(json.loads(text))
    except RecursionError:
        raise ValueError(_TOO_DEEP) from None
    except ValueError as exc:
        if _TOO_DEEP in str(exc):
            raise
    decoder = json.JSONDecoder()
    for line_start in [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]:
        if text[line_start:line_start + 1] in ("{", "["):
            try:
                return _spec_json(decoder.raw_decode(text, line_start)[0])
            except RecursionError:
                raise ValueError(_TOO_DEEP) from None
            except ValueError as exc:
                if _TOO_DEEP in str(exc):
                    raise
                continue
    head = text[:120].replace("\n", " ")
    raise ValueError(f"--toolspec printed no JSON spec (it began: {head!r})")


_TOO_DEEP = (f"--toolspec printed JSON nested more than {MAX_SPEC_DEPTH} levels deep; "
             "print a plain spec")


def _spec_json(value: Any) -> Any:
    if not isinstance(value, dict | list):
        raise ValueError("--toolspec must print a JSON object or an array of objects")
    if deeper_than(value, MAX_SPEC_DEPTH):
        raise ValueError(_TOO_DEEP)
    return value
