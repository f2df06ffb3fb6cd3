"""What the daemon keeps of a session's finished requests (elicitations, shell approvals):
one JSON object a line in a file of the session's folder, removed with the session.

    kept = Records(home, "approvals.jsonl", finished=lambda item: item.get("decision"))
    kept.add(session_id, {"id": ..., ...})      # never raises: a lost note is logged
    kept.read(session_id)                       # the last ``MAX_SAVED``, oldest first
    kept.ids(session_id)                        # their ids

The file is cut to its last ``MAX_SAVED`` lines once it passes ``MAX_FILE`` bytes; a line
that is damaged or not finished is skipped when read.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from pathlib import Path

from silica.agent.sessions import SessionError, session_folder

log = logging.getLogger("silica.serve")

MAX_SAVED = 50             # finished requests a session's history shows
MAX_FILE = 1024 * 1024     # bytes of the file before it is cut to MAX_SAVED lines


class Records:
    """One kind of finished request, kept per session (see the module docstring)."""

    def __init__(self, home: Path, name: str, *, finished: Callable[[dict], object]) -> None:
        self.home, self.name, self.finished = home, name, finished

    def file(self, session_id: str) -> Path | None:
        try:
            return session_folder(session_id, self.home) / self.name
        except SessionError:
            return None

    def add(self, session_id: str, record: dict) -> None:
        path = self.file(session_id)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as out:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
            if path.stat().st_size > MAX_FILE:
                lines = path.read_text(encoding="utf-8").splitlines()[-MAX_SAVED:]
                path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        except OSError as exc:  # the answer still reaches the tool; only the note is lost
            log.warning("could not save a finished request (%s) of session %s: %s",
                        self.name, session_id, exc)

    def read(self, session_id: str) -> list[dict]:
        path = self.file(session_id)
        if path is None:
            return []
        try:
            with path.open(encoding="utf-8", errors="replace") as lines:
                tail = list(lines)[-MAX_SAVED:]
        except OSError:
            return []
        out = []
        for line in tail:
            with contextlib.suppress(ValueError):
                item = json.loads(line)
                if isinstance(item, dict) and self.finished(item):
                    out.append(item)
        return out

    def ids(self, session_id: str) -> set[str]:
        return {str(item.get("id")) for item in self.read(session_id)}
