"""Shared output helpers for the CLI: stdout for results, stderr for everything else."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

from rich.console import Console
from rich.text import Text

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False)


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def fail(message: str, code: int = 1) -> NoReturn:
    err.print(Text.assemble(("error: ", "bold red"), message))
    raise SystemExit(code)
