"""Each running turn's events so far, kept so a client that comes in mid-turn can be given the
turn from its start (the AI SDK UI stream's resume, ``silica.serve.uistream``).

    logs = TurnLogs()
    bus.taps.append(logs.heard)            # every event the daemon's clients get, in order
    turn_log = logs.running(session_id)    # None: no turn of the session runs here
    events = turn_log.snapshot()           # [(event, data), ...] from its ``message`` on

A turn's log begins with its ``message`` event and leaves ``running`` with its ``turn_end``
(a caller holding it still sees the whole turn, ``ended`` true). Text pieces in a row are kept
as one ``text_delta`` (their text joined), so a long reply costs its text, not an entry per
piece. A log holds at most ``MAX_BYTES`` (text, and the JSON size of other events); a turn
that says more is ``overflowed``: it is no longer kept (its live events still reach every
client), and a resume of it is refused.

The bus hands every event to ``heard`` where it hands them to its SSE streams, in the same
order and with nothing awaited in between, so a reader that subscribes to the bus and takes
a ``snapshot`` with no ``await`` between the two sees every event exactly once.
"""

from __future__ import annotations

import json
from typing import Any

from silica.serve.eventlog import Key, parse_id

MAX_BYTES = 8 * 1024 * 1024  # of one turn's events


class TurnLog:
    """One turn's events (see the module docstring)."""

    def __init__(self, session_id: str, turn_id: str) -> None:
        self.session_id, self.turn_id = session_id, turn_id
        self.entries: list[tuple[str, Any]] = []  # a text run: ("text_delta", [pieces])
        self.size = 0
        self.ended = False
        self.overflowed = False
        self.paused_at = 0  # events a client had when its stream paused for an approval
        self.last_key: Key | None = None  # the id of the last event added
        self._open_text = False  # the last entry is a text run that may still grow

    def add(self, event: str, data: Any) -> None:
        key = parse_id(data.get("event_id")) if isinstance(data, dict) else None
        if key is not None:
            self.last_key = key
        if self.overflowed:
            return
        if event == "text_delta":
            piece = str(data.get("text", ""))
            self.size += len(piece)
            if self._open_text:
                self.entries[-1][1].append(piece)
            else:
                self.entries.append((event, [piece]))
                self._open_text = True
        else:
            try:
                self.size += len(json.dumps(data, ensure_ascii=False))
            except (TypeError, ValueError):
                self.size += 1024
            self.entries.append((event, data))
            self._open_text = False
        if self.size > MAX_BYTES:
            self.overflowed = True
            self.entries.clear()

    def snapshot(self) -> list[tuple[str, Any]]:
        """The events so far (a text run as one ``text_delta``). Text that comes later
        starts a new entry, so ``len(snapshot())`` counts the same events in every later
        snapshot."""
        self._open_text = False
        return [(event, {"turn_id": self.turn_id, "text": "".join(data)})
                if event == "text_delta" else (event, data) for event, data in self.entries]

    def after(self, event: str, key: str, value: Any) -> int | None:
        """How many entries there are up to and with the last ``event`` whose ``key`` is
        ``value`` (``None``: there is none)."""
        for index in range(len(self.entries) - 1, -1, -1):
            name, data = self.entries[index]
            if name == event and isinstance(data, dict) and data.get(key) == value:
                return index + 1
        return None


class TurnLogs:
    """The logs of the turns running now, by session (see the module docstring)."""

    def __init__(self) -> None:
        self.logs: dict[str, TurnLog] = {}

    def running(self, session_id: str) -> TurnLog | None:
        return self.logs.get(session_id)

    def start(self, session_id: str, turn_id: str) -> TurnLog:
        """The log of turn ``turn_id`` of the session, begun now if its ``message`` has
        not been heard yet (a bus that delivers later than it publishes)."""
        turn_log = self.logs.get(session_id)
        if turn_log is None or turn_log.turn_id != turn_id:
            turn_log = self.logs[session_id] = TurnLog(session_id, turn_id)
        return turn_log

    def heard(self, session_id: str, event: str, data: Any) -> None:
        """An event of the session, as its clients get it (the form without inline images)."""
        if not isinstance(data, dict):
            return
        turn_id = data.get("turn_id")
        turn_log = self.logs.get(session_id)
        if event == "message" and isinstance(turn_id, str) and (
                turn_log is None or turn_log.turn_id != turn_id):
            turn_log = self.logs[session_id] = TurnLog(session_id, turn_id)
        if turn_log is None or turn_id != turn_log.turn_id:
            return
        turn_log.add(event, data)
        if event == "turn_end":
            turn_log.ended = True
            del self.logs[session_id]
