"""``silica resident status|stop``: see and end the resident process (``silica.resident``)."""

from __future__ import annotations

import datetime

from cyclopts import App

from silica.cli.output import JsonFlag, print_json, say
from silica.paths import silica_home

app = App(name="resident",
          help="The warm process silica ask, chat and tools run/list hand their runs to.")


@app.command
def status(*, json_: JsonFlag = False):
    """Whether a resident runs for this silica home: its pid, socket and runs."""
    from silica import resident

    reply = resident.request(silica_home(), {"op": "status"})
    if json_:
        print_json({"running": reply is not None, **(reply or {})})
        return
    if reply is None:
        say("no resident runs (silica ask, chat, tools run or tools list starts one)")
        return
    started = datetime.datetime.fromtimestamp(reply["started"]).isoformat(timespec="seconds")
    say(f"resident pid {reply['pid']}, started {started}, {reply['served']} runs served, "
        f"{reply['runs']} running; exits after {reply['idle_exit']:g} s idle\n"
        f"socket {reply['socket']}")


@app.command
def stop():
    """End the resident (runs it started finish first); the next ask, chat, tools run or
    tools list starts one."""
    from silica import resident

    reply = resident.request(silica_home(), {"op": "stop"})
    say(f"resident {reply['pid']} stopping" if reply else "no resident runs")
