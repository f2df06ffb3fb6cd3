"""An MCP server that lists too many tools costs silica only what it keeps.

The server is ``mcp_fixtures/many_tools_server.py`` (hand-written, so it costs little
itself): 100,000 tools in one ``tools/list`` answer (about 30 MB on one line), or in pages.
``silica tools list`` runs as a real process that reports its own peak memory (``VmHWM``);
no test asserts a time. The reader of a server's lines (``silica.mcp.bounded``) gets
property tests of its own.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from conftest import OFF, wait_for_port
from hypothesis import given, settings
from hypothesis import strategies as st

from silica.mcp import bounded
from silica.mcp.bounded import BoundedBody, BoundedLines, cut_note, id_in_tail, page_prefix

MANY = Path(__file__).parent / "mcp_fixtures" / "many_tools_server.py"

# ``silica tools list`` as the command line runs it, then its own peak memory (KiB) last.
MEASURE = """
import atexit, runpy, sys
def peak():
    with open("/proc/self/status") as status:
        print("VmHWM", status.read().split("VmHWM:")[1].split()[0], file=sys.stderr)
atexit.register(peak)  # registered first, so it runs last: after the servers are stopped
sys.argv = ["silica", "tools", "list", "--json", "--refresh"]
runpy.run_module("silica", run_name="__main__")
"""


def list_with(home: Path, *args: str, url: str = "") -> tuple[dict[str, dict], int]:
    """The rows of ``silica tools list`` with the many-tools server given ``args`` (or the
    one at ``url``), and the process's peak memory in KiB."""
    home.mkdir(parents=True, exist_ok=True)
    argv = json.dumps([str(MANY), *args])
    how = f"url = {json.dumps(url)}" if url else \
        f"command = {json.dumps(sys.executable)}\nargs = {argv}"
    # the server notes the cursors it was asked for in a file outside: unconfined
    (home / "config.toml").write_text(f"{OFF}[mcp.servers.many]\n{how}\nstartup_timeout = 120\n")
    done = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    peak = int(done.stderr.split("VmHWM")[-1].split()[0])
    return {row["name"]: row for row in json.loads(done.stdout)}, peak


def test_one_answer_of_100k_tools_is_cut_while_read(home):
    rows, peak = list_with(home, "100000")
    assert peak < 200 * 1024, f"silica tools list peaked at {peak // 1024} MB"
    assert len([n for n in rows if n.startswith("many__t")]) == 1000
    assert rows["many__t999"]["status"] == "ok"
    reason = rows["many__*"]["reason"]
    assert reason.startswith("the MCP server 'many' offers more than 1000 tools in one answer of")
    assert "silica read only the first 1000" in reason


def test_an_answer_whose_id_comes_after_its_100k_tools_is_cut_all_the_same(home):
    rows, peak = list_with(home, "100000", "--id-last")
    assert peak < 200 * 1024, f"silica tools list peaked at {peak // 1024} MB"
    assert len([n for n in rows if n.startswith("many__t")]) == 1000
    assert "offers more than 1000 tools in one answer" in rows["many__*"]["reason"]


def test_one_json_answer_of_100k_tools_over_http_is_cut_while_read(home, free_port):
    port = free_port
    server = subprocess.Popen([sys.executable, str(MANY), "100000", "--http", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        rows, peak = list_with(home, url=f"http://127.0.0.1:{port}/mcp")
    finally:
        server.kill()
        server.wait()
    assert peak < 200 * 1024, f"silica tools list peaked at {peak // 1024} MB"
    assert len([n for n in rows if n.startswith("many__t")]) == 1000
    assert rows["many__*"]["reason"].startswith(
        "the MCP server 'many' offers more than 1000 tools in one answer of 30.6 MB")


def test_pages_stop_being_asked_for_at_the_cut(home, tmp_path):
    log = tmp_path / "cursors"
    rows, peak = list_with(home, "100000", "--page", "100", "--log", str(log))
    assert log.read_text().split() == ["None", *(str(n) for n in range(100, 1000, 100))]
    assert len([n for n in rows if n.startswith("many__t")]) == 1000
    assert rows["many__*"]["reason"] == ("the MCP server 'many' offers more than 1000 tools; "
                                         "silica offers only its first 1000")
    assert peak < 200 * 1024


def test_a_listing_under_the_cut_is_whole(home):
    rows, _ = list_with(home, "1000")
    assert len([n for n in rows if n.startswith("many__t")]) == 1000
    assert "many__*" not in rows


# -- the reader's parts ---------------------------------------------------------------------

tools_st = st.lists(st.fixed_dictionaries(
    {"name": st.text(min_size=1, max_size=8)},
    optional={"description": st.text(max_size=20),
              "inputSchema": st.dictionaries(st.text(max_size=5), st.integers(), max_size=3)}),
    max_size=12)
ids_st = st.one_of(st.integers(-5, 10**6), st.text(max_size=6))


@st.composite
def answers(draw) -> tuple[dict, str]:
    """A ``tools/list`` answer, its keys in any order, dumped with any spacing."""
    tools, rid = draw(tools_st), draw(ids_st)
    result = {"tools": tools}
    if draw(st.booleans()):
        result["nextCursor"] = draw(st.text(max_size=4))
    if draw(st.booleans()):
        result["_meta"] = {"k": draw(st.integers())}
    message = {"jsonrpc": "2.0", "id": rid, "result": result}
    keys = draw(st.permutations(list(message)))
    inner = draw(st.permutations(list(result)))
    message = {k: ({i: result[i] for i in inner} if k == "result" else message[k]) for k in keys}
    indent = draw(st.sampled_from([None, 0, 1, 2]))
    return message, json.dumps(message, indent=indent, ensure_ascii=draw(st.booleans()))


@settings(max_examples=300, deadline=None)
@given(answers(), st.integers(0, 15))
def test_a_whole_answer_gives_its_id_and_first_tools(answer, limit):
    message, text = answer
    found = page_prefix(text, limit)
    assert found.has_id or found.more  # an id after more tools than read stays unknown
    assert found.id == (message["id"] if found.has_id else None)
    tools = message["result"]["tools"]
    assert found.tools == tools[:limit]
    assert found.more == (len(tools) > limit)


@settings(max_examples=300, deadline=None)
@given(answers(), st.data())
def test_any_start_of_an_answer_gives_only_what_it_holds(answer, data):
    message, text = answer
    cut = data.draw(st.integers(0, len(text)))
    found = page_prefix(text[:cut])
    if found.has_id:
        assert found.id == message["id"]
    if found.tools is not None:
        tools = message["result"]["tools"]
        assert found.tools == tools[:len(found.tools)]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_text_that_is_no_answer_never_breaks_the_reader(text):
    found = page_prefix(text)
    assert found.tools is None or isinstance(found.tools, list)


def run_lines(data: bytes, cuts: list[int]) -> bytes:
    reader = BoundedLines(None)
    out = bytearray()
    pos = 0
    for size in [*cuts, len(data)]:
        reader.feed(data[pos:pos + size])
        pos += size
        out += reader._ready
        reader._ready.clear()
    return bytes(out)


def small_bounds(max_message: int = 2000):
    """Bounds small enough for hypothesis' examples, in the same proportions."""
    return mock.patch.multiple(bounded, MAX_TOOLS=3, PAGE_BYTES=200, PAGE_HOLD=400,
                               MAX_MESSAGE=max_message)


@settings(max_examples=200, deadline=None)
@given(st.lists(answers(), max_size=6), st.lists(st.integers(1, 300), max_size=20))
def test_lines_pass_whole_or_are_cut_to_a_page(answers_, cuts):
    data = b"".join(text.replace("\n", " ").encode() + b"\n" for _, text in answers_)
    with small_bounds(max_message=10**6):
        out = run_lines(data, cuts)
    lines = out.split(b"\n")
    assert lines[-1] == b"" and len(lines) - 1 == len(answers_)
    for (message, text), line in zip(answers_, lines, strict=False):
        size = len(text.replace("\n", " ").encode()) + 1
        got = json.loads(line)
        tools = message["result"]["tools"]
        if size <= 200:  # PAGE_BYTES within small_bounds
            assert got == message
            continue
        assert got["id"] == message["id"]  # before or after the tools
        cut = got["result"].get("_meta", {}).get(bounded.CUT_KEY)
        if cut is None:  # no more tools than the cut, ended before PAGE_HOLD was read
            assert got == message and len(tools) <= 3
            continue
        kept = got["result"]["tools"]
        assert kept == tools[:len(kept)] and len(kept) <= 3
        assert cut == {"kept": len(kept), "more": len(tools) > len(kept), "bytes": size}
        assert "nextCursor" not in got["result"]
        assert cut_note("s", got["result"]["_meta"]).startswith("the MCP server 's' offers")


@settings(max_examples=300, deadline=None)
@given(answers(), st.data())
def test_an_id_is_found_in_the_end_of_an_answer_only_when_it_is_the_answers_own(answer, data):
    message, text = answer
    tail = text[data.draw(st.integers(0, len(text))):]
    found, rid = id_in_tail(tail)
    if found:
        assert rid == message["id"]
    keys = list(message)
    if keys.index("id") > keys.index("result") and len(tail) >= len(text) - text.index('"id"') + 4:
        assert found


@settings(max_examples=200, deadline=None)
@given(st.lists(st.fixed_dictionaries({"id": ids_st, "x": st.integers()}), min_size=1,
                max_size=5), st.integers(0, 10**6))
def test_ids_inside_the_tools_are_never_taken_for_the_answers(nested, rid):
    text = json.dumps({"jsonrpc": "2.0", "result": {"tools": nested}, "id": rid})
    for start in range(len(text)):
        found, got = id_in_tail(text[start:])
        assert not found or got == rid


@settings(max_examples=100, deadline=None)
@given(ids_st, st.integers(2001, 6000), st.lists(st.integers(1, 700), max_size=12))
def test_a_message_past_the_bound_is_refused_with_its_id(rid, size, cuts):
    head = json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"content": [
        {"type": "text", "text": ""}]}})[:-5]
    line = (head + "x" * size + '"}]}}\n').encode()
    after = b'{"jsonrpc":"2.0","id":99,"result":{}}\n'
    with small_bounds():
        out = run_lines(line + after, cuts).split(b"\n")
    refused = json.loads(out[0])
    assert refused["id"] == rid and "silica refused it" in refused["error"]["message"]
    assert f"{len(line):,} bytes" in refused["error"]["message"]
    assert json.loads(out[1]) == json.loads(after)


def read_body(data: bytes, cuts: list[int]) -> bytes:
    async def chunks():
        pos = 0
        for size in [*cuts, len(data)]:
            yield data[pos:pos + size]
            pos += size

    async def whole() -> bytes:
        return b"".join([part async for part in BoundedBody(chunks())])

    return asyncio.run(whole())


@settings(max_examples=150, deadline=None)
@given(answers(), st.lists(st.integers(1, 300), max_size=20))
def test_a_json_body_passes_whole_or_is_cut_to_a_page(answer, cuts):
    message, text = answer
    data = text.encode()
    with small_bounds(max_message=10**6):
        got = json.loads(read_body(data, cuts))
    tools = message["result"]["tools"]
    if len(data) <= 200 or bounded.CUT_KEY not in got["result"].get("_meta", {}):
        assert got == message and (len(data) <= 200 or len(tools) <= 3)
    else:
        kept = got["result"]["tools"]
        assert got["id"] == message["id"] and kept == tools[:len(kept)] and len(kept) <= 3


def test_a_json_body_past_the_bound_is_refused():
    with small_bounds(), pytest.raises(bounded.TooLong):
        read_body(b'{"jsonrpc":"2.0","id":1,"result":{"x":"' + b"x" * 3000 + b'"}}', [100])


def test_an_answer_past_64_mib_fails_its_call_and_the_connection_goes_on():
    from silica.config import McpServerSettings, McpSettings, Settings
    from silica.tools.toolbox import Toolbox

    server = McpServerSettings(command=sys.executable, args=[str(MANY), "3", "--answer-mb", "70"])
    box = Toolbox(settings=Settings(mcp=McpSettings(servers={"many": server}, timeout=120)))
    big = box.call("many__t0", {"query": "x"})
    assert big.is_error and "more than the 64 MiB silica reads of one message" in big.text
    assert box.call("many__t1", {"query": "x"}).text == "ok t1"
