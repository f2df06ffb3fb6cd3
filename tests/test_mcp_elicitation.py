"""Elicitation: an MCP server's tool asks for values, and silica answers for the person.

End to end through ``silica ask`` and ``silica chat`` (in a pseudo-terminal) against
``mcp_fixtures/elicit_server.py``, a real SDK server over stdio whose tool ``fill`` asks
with a given schema and logs what came back. The checks on the request and the answer
(``silica.mcp.elicit``) get property tests.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_chat_pty import RAW_CONTROL, Terminal
from wire import anthropic_server, text, tool_call

from silica.cli.elicit import _chosen
from silica.config import McpServerSettings
from silica.elicitation import Answer, Elicitation
from silica.mcp.asking import MAX_ASKS
from silica.mcp.connections import connections
from silica.mcp.elicit import (
    MAX_FIELDS,
    ElicitationError,
    check_answer,
    check_request,
    choices,
    defaults,
    kind,
)

SERVER = Path(__file__).parent / "mcp_fixtures" / "elicit_server.py"
FORM = {  # a string without a default, a titled enum and an integer with defaults, a boolean
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Your name", "minLength": 1},
        "colour": {"type": "string", "title": "Colour", "default": "g",
                   "oneOf": [{"const": "r", "title": "Red"}, {"const": "g", "title": "Green"},
                             {"const": "b", "title": "Blue"}]},
        "count": {"type": "integer", "title": "How many", "minimum": 1, "maximum": 9,
                  "default": 3},
        "agree": {"type": "boolean", "title": "Agree", "default": False},
        "extras": {"type": "array", "title": "Extras", "items": {"anyOf": [
            {"const": "nuts", "title": "Nuts"}, {"const": "salt", "title": "Salt"},
            {"const": "ice", "title": "Ice"}]}},
    },
    "required": ["name", "colour"],
}
DEFAULTED = {"type": "object", "properties": {
    "count": {"type": "integer", "default": 3},
    "colour": {"type": "string", "enum": ["r", "g"], "enumNames": ["Red", "Green"],
               "default": "r"},
    "tags": {"type": "array", "items": {"type": "string", "enum": ["x", "y", "z"]},
             "default": ["x", "z"]}},
    "required": ["count"]}


def configure(home: Path, log: Path, *extra: str, mcp: str = "", other: bool = False) -> None:
    home.mkdir(parents=True, exist_ok=True)
    args = json.dumps([str(SERVER), "--log", str(log), *extra])
    config = (f'[sandbox]\nmode = "off"\n[mcp]\n{mcp}\n[mcp.servers.asker]\n'
              f'command = "{sys.executable}"\nargs = {args}\nstartup_timeout = 60\n')
    if other:
        config += (f'[mcp.servers.other]\ncommand = "{sys.executable}"\n'
                   f'args = {json.dumps([str(SERVER)])}\nstartup_timeout = 60\n')
    (home / "config.toml").write_text(config, encoding="utf-8")


def fill(schema: dict, times: int = 1, message: str = "Please fill in the form") -> dict:
    return {"schema": json.dumps(schema), "times": times, "message": message}


def ask(srv, project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "silica", "ask", "go", *args],
                          capture_output=True, text=True, cwd=project,
                          env={**os.environ, **srv.env}, timeout=300)


def tool_results(srv) -> list[str]:
    """The text of every tool result the model was sent in the last request."""
    found = []
    for message in srv.requests[-1]["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("type") == "tool_result":
                found.append("\n".join(c.get("text", "") for c in block["content"]))
    return found


def logged(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


# -- ask ---------------------------------------------------------------------------------

@pytest.mark.parametrize("era", [[], ["--legacy"]], ids=["2026-07-28", "2025-11-25"])
def test_ask_declines_a_request_for_input_and_says_so(era, home, project, tmp_path):
    log = tmp_path / "log"
    configure(home, log, *era)
    with anthropic_server([tool_call("asker__fill", fill(DEFAULTED)), text("Done.")]) as srv:
        done = ask(srv, project)
    assert done.returncode == 0, done.stderr
    assert logged(log) == ["decline"]
    assert "asked for input (Please fill in the form); declined" in done.stderr
    assert "--yes" in done.stderr
    assert "silica ask asks nobody" in tool_results(srv)[0]


@pytest.mark.parametrize("era", [[], ["--legacy"]], ids=["2026-07-28", "2025-11-25"])
def test_ask_yes_accepts_the_forms_defaults(era, home, project, tmp_path):
    log = tmp_path / "log"
    configure(home, log, *era)
    with anthropic_server([tool_call("asker__fill", fill(DEFAULTED)), text("Done.")]) as srv:
        done = ask(srv, project, "--yes")
    assert done.returncode == 0, done.stderr
    assert logged(log) == ['accept {"colour": "r", "count": 3, "tags": ["x", "z"]}']
    assert "accepted its defaults" in done.stderr


def test_ask_yes_declines_when_a_required_field_has_no_default(home, project, tmp_path):
    log = tmp_path / "log"
    configure(home, log)
    with anthropic_server([tool_call("asker__fill", fill(FORM)), text("Done.")]) as srv:
        done = ask(srv, project, "--yes")
    assert done.returncode == 0, done.stderr
    assert logged(log) == ["decline"]
    assert "a required field has no default" in done.stderr


def test_the_config_key_makes_ask_accept_defaults(home, project, tmp_path):
    log = tmp_path / "log"
    configure(home, log, mcp='elicitation = "defaults"')
    with anthropic_server([tool_call("asker__fill", fill(DEFAULTED)), text("Done.")]) as srv:
        done = ask(srv, project)
    assert done.returncode == 0, done.stderr
    assert logged(log) == ['accept {"colour": "r", "count": 3, "tags": ["x", "z"]}']


@pytest.mark.parametrize("mode", ["", 'elicitation = "defaults"'], ids=["decline", "defaults"])
def test_tools_run_declines_or_takes_the_defaults_as_the_config_says(mode, home, project,
                                                                      tmp_path):
    log = tmp_path / "log"
    configure(home, log, mcp=mode)
    done = subprocess.run([sys.executable, "-m", "silica", "tools", "run", "asker__fill",
                           "--input", json.dumps(fill(DEFAULTED)), "--json"],
                          capture_output=True, text=True, cwd=project, timeout=300)
    assert done.returncode == 0, done.stderr
    if mode:
        assert logged(log) == ['accept {"colour": "r", "count": 3, "tags": ["x", "z"]}']
        assert "accepted its defaults" in done.stderr
    else:
        assert logged(log) == ["decline"]
        assert "silica tools run asks nobody" in done.stdout


def test_an_invalid_schema_is_an_error_to_the_server_and_nobody_is_asked(home, project,
                                                                          tmp_path):
    log = tmp_path / "log"
    configure(home, log, "--legacy")
    nested = {"type": "object", "properties": {"where": {"type": "object",
                                                         "properties": {}}}}
    script = [tool_call("asker__fill", fill(nested)), tool_call("asker__ping", {}),
              text("Done.")]
    with anthropic_server(script) as srv:
        done = ask(srv, project, "--yes")
    assert done.returncode == 0, done.stderr
    [line] = logged(log)
    assert line.startswith("error -32602 silica cannot ask for this: field 'where'"), line
    assert "asked for input" not in done.stderr  # the person (here: --yes) never saw it
    first, second = tool_results(srv)
    assert "refused a form silica cannot show (field 'where'" in first
    assert second == "pong"  # the session goes on


def test_an_invalid_schema_in_a_2026_call_fails_the_call_with_the_reason(home, project,
                                                                         tmp_path):
    log = tmp_path / "log"
    configure(home, log)
    bad = {"type": "object", "properties": {"n": {"type": "integer", "default": "three"}}}
    script = [tool_call("asker__fill", fill(bad)), tool_call("asker__ping", {}),
              text("Done.")]
    with anthropic_server(script) as srv:
        done = ask(srv, project, "--yes")
    assert done.returncode == 0, done.stderr
    first, second = tool_results(srv)
    assert "silica cannot ask for this: field 'n': the default is not valid" in first
    assert second == "pong"
    assert "asked for input" not in done.stderr


@pytest.mark.parametrize("era", [[], ["--legacy"]], ids=["2026-07-28", "2025-11-25"])
def test_a_thousand_requests_in_one_call_are_bounded_and_nothing_else_suffers(
        era, home, project, tmp_path):
    log = tmp_path / "log"
    configure(home, log, *era, other=True)
    script = [tool_call("asker__fill", fill(DEFAULTED, times=1000)),
              tool_call("asker__ping", {}), tool_call("other__ping", {}), text("Done.")]
    with anthropic_server(script) as srv:
        done = ask(srv, project, "--yes")
    assert done.returncode == 0, done.stderr
    lines = logged(log)
    assert len(lines) == 1000
    assert sum(line.startswith("accept") for line in lines) == MAX_ASKS
    assert lines.count("decline") == 1000 - MAX_ASKS
    assert done.stderr.count("asked for input") == MAX_ASKS  # the person saw 20, not 1,000
    results = tool_results(srv)
    assert f"more than {MAX_ASKS} requests for input in one call ({1000 - MAX_ASKS} times)" \
        in results[0]
    assert results[1:] == ["pong", "pong"]


# -- the connection, from a library caller --------------------------------------------------

def test_an_answer_that_does_not_fit_is_declined_and_a_slow_one_times_out(tmp_path,
                                                                         monkeypatch):
    # The server writes its log to tmp_path: unconfined, whatever sandbox an earlier test's
    # discovery left on this process's connections (a confined server's /tmp is its own).
    monkeypatch.setattr(connections(), "sandbox", None)
    server = McpServerSettings(command=sys.executable,
                               args=[str(SERVER), "--legacy", "--log", str(tmp_path / "log")])
    schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 5}}}
    asked: list[Elicitation] = []

    async def wrong(request: Elicitation) -> Answer:
        asked.append(request)
        return Answer("accept", {"n": "seven"})

    async def slow(request: Elicitation) -> Answer:
        await asyncio.sleep(600)
        return Answer("accept", {"n": 1})

    async def calls():
        manager = connections()
        first = await manager.call_tool("asker", server, "fill", fill(schema), 60, elicit=wrong)
        second = await manager.call_tool("asker", server, "fill", fill(schema), 60,
                                         elicit=slow, elicit_timeout=1)
        third = await manager.call_tool("asker", server, "ping", {}, 60)
        return first, second, third

    first, second, third = asyncio.run(calls())
    assert "the answer did not fit the form ('n' must be a whole number)" in first.text
    assert "no answer within 1 s" in second.text
    assert third.text == "pong"
    assert asked and asked[0].source == "asker"
    assert logged(tmp_path / "log") == ["decline", "decline"]


# -- chat, in a pseudo-terminal ---------------------------------------------------------------

def chat(srv, project: Path) -> Terminal:
    env = {**os.environ, **srv.env, "TERM": "xterm-256color", "COLUMNS": "200"}
    return Terminal([sys.executable, "-m", "silica", "chat"], env, project)


def test_chat_asks_the_person_with_a_form_and_the_tool_gets_the_values(home, project,
                                                                        tmp_path):
    log = tmp_path / "log"
    configure(home, log, "--legacy")
    hostile = "Fill \x1b]0;pwned\x07 in\x1b[2J"
    script = [tool_call("asker__fill", fill(FORM, message=hostile)), text("Thanks.")]
    with anthropic_server(script) as srv:
        term = chat(srv, project)
        try:
            term.read_until(b"you> ")
            term.type("order")
            term.read_until(b"asks: ")
            term.type("")  # required, no default: asked again
            term.read_until(b"required")
            term.type("Ann")
            term.read_until(b"3) Blue")
            term.type("")  # Enter keeps the default (Green)
            term.read_until(b"How many")
            term.type("twelve")  # not a number: said, and asked again
            term.read_until(b"must be a whole number")
            term.type("12")  # above the maximum
            term.read_until(b"must be at most 9")
            term.type("7")
            term.read_until(b"Agree")
            term.type("y")
            term.read_until(b"3) Ice")
            term.type("1, 3")
            term.read_until(b"[a]ccept")
            term.type("a")
            term.read_until(b"you> ", since=len(term.seen) - 10)
            term.type("/exit")
            code = term.finish()
        finally:
            term.close()
    assert code == 0, term.seen[-2000:]
    assert logged(log) == ['accept {"agree": true, "colour": "g", "count": 7, '
                           '"extras": ["nuts", "ice"], "name": "Ann"}']
    shown = term.seen.decode("utf-8", "replace")
    assert "1) Red" in shown and "2) Green" in shown and "[2]" in shown and "[3]" in shown
    assert "Fill ␛]0;pwned␇ in␛[2J" in shown  # the server's message, made visible
    rest = term.seen.replace(b"\x1b[", b"")  # silica's own colours aside
    assert b"\x1b]" not in rest and RAW_CONTROL.search(term.seen.replace(b"\x1b", b"")) is None


def test_ctrl_c_cancels_the_form_and_the_chat_goes_on(home, project, tmp_path):
    log = tmp_path / "log"
    configure(home, log, "--legacy")
    script = [tool_call("asker__fill", fill(FORM)), text("Cancelled, fine.")]
    with anthropic_server(script) as srv:
        term = chat(srv, project)
        try:
            term.read_until(b"you> ")
            term.type("order")
            term.read_until(b"asks: Please fill in the form")
            # Ctrl-C as a terminal sends it (tests/test_chat_pty.py says why not typed)
            os.killpg(term.proc.pid, signal.SIGINT)
            term.read_until(b"cancelled")
            term.read_until(b"Cancelled, fine.")
            term.read_until(b"you> ", since=len(term.seen) - 10)
            term.type("/exit")
            code = term.finish()
        finally:
            term.close()
    assert code == 0, term.seen[-2000:]
    assert logged(log) == ["cancel"]


def test_chat_declines_when_the_person_does_not_answer_in_time(home, project, tmp_path):
    log = tmp_path / "log"
    configure(home, log, "--legacy", mcp="elicitation_timeout = 2")
    script = [tool_call("asker__fill", fill(FORM)), text("No answer then.")]
    with anthropic_server(script) as srv:
        term = chat(srv, project)
        try:
            term.read_until(b"you> ")
            term.type("order")
            term.read_until(b"asks: ")
            term.read_until(b"declined")
            term.read_until(b"No answer then.")
            term.type("/exit")
            code = term.finish()
        finally:
            term.close()
    assert code == 0, term.seen[-2000:]
    assert logged(log) == ["decline"]
    assert b"no answer within 2 s" in term.seen


# -- the checks, as properties ------------------------------------------------------------------

texts = st.text(max_size=40)
options = st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=6, unique=True)


@st.composite
def fields(draw) -> dict:
    which = draw(st.sampled_from(["string", "number", "integer", "boolean", "enum", "titled",
                                  "multi"]))
    prop: dict = {"title": draw(texts), "description": draw(texts)}
    if which == "string":
        low = draw(st.integers(0, 5))
        prop.update(type="string", minLength=low, maxLength=draw(st.integers(low, 50)))
        if draw(st.booleans()):
            prop["default"] = "x" * (low + 1) if low + 1 <= prop["maxLength"] else "x" * low
    elif which in ("number", "integer"):
        low = draw(st.integers(-100, 100))
        prop.update(type=which, minimum=low, maximum=low + draw(st.integers(0, 100)))
        if draw(st.booleans()):
            prop["default"] = low
    elif which == "boolean":
        prop.update(type="boolean")
        if draw(st.booleans()):
            prop["default"] = draw(st.booleans())
    elif which == "enum":
        values = draw(options)
        prop.update(type="string", enum=values, enumNames=[v.upper() for v in values])
        if draw(st.booleans()):
            prop["default"] = draw(st.sampled_from(values))
    elif which == "titled":
        values = draw(options)
        prop.update(type="string", oneOf=[{"const": v, "title": draw(texts)} for v in values])
    else:
        values = draw(options)
        prop.update(type="array", items={"type": "string", "enum": values})
        if draw(st.booleans()):
            prop["default"] = draw(st.lists(st.sampled_from(values), unique=True))
    return prop


@st.composite
def schemas(draw) -> dict:
    props = draw(st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True),
                                 fields(), max_size=6))
    required = draw(st.lists(st.sampled_from(sorted(props)), unique=True)) if props else []
    return {"type": "object", "properties": props, "required": required}


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | texts,
                           lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(texts, inner, max_size=4), max_leaves=20)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(schemas(), texts)
def test_every_valid_schema_is_taken_with_every_shown_text_safe(schema, message):
    request = check_request("srv\x1b]0;x\x07", message, schema)
    assert set(request.schema["properties"]) == set(schema["properties"])
    shown = [request.message, request.source]
    for prop in request.schema["properties"].values():
        shown += [prop.get("title", ""), prop.get("description", "")]
        shown += [label for _, label in choices(prop)]
        assert kind(prop) in ("string", "number", "integer", "boolean", "enum", "multi")
    assert all(RAW_CONTROL.search(s.encode()) is None and "\x1b" not in s for s in shown)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(schemas())
def test_defaults_are_an_answer_the_schema_accepts_unless_a_required_field_lacks_one(schema):
    request = check_request("s", "m", schema)
    values = defaults(request)
    lacking = [n for n in schema["required"] if "default" not in schema["properties"][n]]
    if lacking:
        assert values is None
    else:
        assert values is not None
        assert check_answer(request, values) == values


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(schemas(), st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True),
                                  json_values | st.text(max_size=12), max_size=6))
def test_an_answer_is_valid_or_a_clear_error_and_a_valid_one_is_stable(schema, content):
    request = check_request("s", "m", schema)
    try:
        values = check_answer(request, content)
    except ElicitationError as exc:
        assert str(exc)
        return
    assert check_answer(request, values) == values
    assert set(values) <= set(schema["properties"])
    assert set(schema["required"]) <= set(values)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(json_values, json_values)
def test_any_json_as_a_schema_is_taken_or_a_clear_error(schema, message):
    try:
        check_request("s", message, schema)
    except ElicitationError as exc:
        assert str(exc)


@given(st.integers(-10**6, 10**6), st.booleans())
def test_form_text_becomes_the_schemas_type(number, flag):
    request = check_request("s", "m", {"type": "object", "properties": {
        "n": {"type": "integer"}, "x": {"type": "number"}, "b": {"type": "boolean"}}})
    assert check_answer(request, {"n": str(number), "x": f" {number + 0.5!r} ",
                                  "b": "yes" if flag else "no"}) == \
        {"n": number, "x": number + 0.5, "b": flag}


def test_bounds_and_shapes_are_refused_with_the_field_named():
    many = {"type": "object", "properties": {f"f{i}": {"type": "string"}
                                             for i in range(MAX_FIELDS + 1)}}
    cases = [
        (many, f"more than {MAX_FIELDS} fields"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]},
         "required field 'b' is not a property"),
        ({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}},
         "field 'a': an array's items must be a string enum"),
        ({"type": "object", "properties": {"a": {"type": "string", "format": "ipv4"}}},
         "field 'a': format must be one of"),
        ({"type": "object", "properties": {"a": {"type": "number", "minimum": 5,
                                                 "maximum": 1}}}, "minimum is above maximum"),
        ({"type": "array"}, "is not {\"type\": \"object\""),
    ]
    for schema, said in cases:
        with pytest.raises(ElicitationError, match=None) as caught:
            check_request("s", "m", schema)
        assert said in str(caught.value), (said, str(caught.value))
    with pytest.raises(ElicitationError, match="longer than"):
        check_request("s", "m" * 5000, {"type": "object", "properties": {}})
    request = check_request("s", "m", {"type": "object", "properties": {
        "mail": {"type": "string", "format": "email"},
        "day": {"type": "string", "format": "date"}}})
    with pytest.raises(ElicitationError, match="'mail' must be an email address"):
        check_answer(request, {"mail": "nobody"})
    with pytest.raises(ElicitationError, match="'zzz' is not a field"):
        check_answer(request, {"zzz": "1"})
    assert check_answer(request, {"mail": "a@b.org", "day": "2025-01-31"}) == \
        {"mail": "a@b.org", "day": "2025-01-31"}


@given(options, st.data())
def test_typed_numbers_pick_those_choices_and_other_words_pass_through(values, data):
    pairs = [(v, v.upper()) for v in values]
    picked = data.draw(st.lists(st.integers(1, len(values)), unique=True))
    typed = data.draw(st.sampled_from([", ", " ", ","])).join(map(str, picked))
    assert _chosen(typed, "multi", pairs) == [values[i - 1] for i in picked]
    assert _chosen(str(picked[0]) if picked else "1", "enum", pairs) == \
        values[(picked[0] if picked else 1) - 1]
    word = data.draw(st.text(min_size=1, max_size=8).filter(lambda w: not w.isdigit()
                                                             and w.strip() == w))
    assert _chosen(word, "enum", pairs) == word
