"""``silica tools new``: a working tool file to start from."""

from __future__ import annotations

import re
from pathlib import Path

from silica.errors import SilicaError
from silica.tools.helper import ensure_helper

_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_]{0,63}$")

TEMPLATE = '''\
# /// script
# requires-python = ">=3.11"
# dependencies = ["cyclopts>=3"]
# ///
"""{name}: say what this tool does in one line; the model reads the function's docstring.

Metadata:
    category: general
    tags: new
    long_running: false
"""

import json
import sys
from pathlib import Path

import cyclopts

sys.path.insert(0, str(Path(__file__).parent))
from _silica_toolspec import generate_schema  # noqa: E402

app = cyclopts.App()


@app.default
def {name}(text: str, repeat: int = 1):
    """Repeat a piece of text (replace this with what your tool does).

    Args:
        text: The text to repeat.
        repeat: How many times to repeat it.
    """
    print(json.dumps({{"result": " ".join([text] * repeat)}}))


if __name__ == "__main__":
    # Answer --toolspec before cyclopts parses, so required parameters need no value here.
    if "--toolspec" in sys.argv:
        print(json.dumps(generate_schema({name})))
    else:
        app()
'''


def new_tool(folder: Path, name: str) -> Path:
    """Write ``<folder>/<name>.py`` from the template (and the helper beside it).

    Raises ``SilicaError`` if the name is not a valid tool name or the file exists.
    """
    if not _NAME.match(name):
        raise SilicaError(f"{name!r} is not a valid tool name: use letters, digits and '_', "
                          "starting with a letter")
    path = folder / f"{name}.py"
    if path.exists():
        raise SilicaError(f"{path} already exists; choose another name or edit that file")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(TEMPLATE.format(name=name), encoding="utf-8")
    except OSError as exc:
        raise SilicaError(f"cannot write {path}: {exc.strerror or exc}") from exc
    ensure_helper(folder)
    return path
