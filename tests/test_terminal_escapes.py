"""Text from outside never drives the terminal: hostile tool files, tool output, packs and MCP
servers, shown by the real ``silica`` command, leave no escape sequence on stdout or stderr.

Each test writes the hostile input where silica reads it, runs the command as a user would,
and checks the bytes printed: no ESC, no other C0 control but newline and tab, no DEL, no C1
control, no bidi control, no byte that is not UTF-8; the words around the sequences remain.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
from conftest import script_tool, simple_spec, write_tool
from test_packs import make_pack

ESC, BEL, ST = "\x1b", "\x07", "\x1b\\"
HOSTILE = (f"Title {ESC}]0;pwned{BEL} wipe {ESC}[2J link {ESC}]8;;http://evil.example/{ST}"
           f"click{ESC}]8;;{ST} flip \u202e end \x9b31m red {ESC}[1;31mcoloured{ESC}[0m")
WORDS = ("Title", "pwned", "wipe", "http://evil.example/", "click", "flip", "end", "red",
         "coloured")
FORBIDDEN = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                       r"\u2066-\u2069\ud800-\udfff]")
SGR = re.compile(r"\x1b\[[0-9;]*m")


def silica(*args: str, color: bool = False, **env_vars: str) -> tuple[int, str, str]:
    """Run ``silica ARGS``; the exit code, stdout and stderr, every byte checked inert.

    With ``color`` rich is made to style its output: silica's own SGR sequences are then
    allowed (and removed before the check), nothing else is.
    """
    env = {k: v for k, v in os.environ.items()
           if k not in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    env["COLUMNS"] = "1000"  # one row a line, so the words are not folded apart
    if color:
        env["FORCE_COLOR"] = "1"
    env.update(env_vars)
    done = subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          input=b"", env=env, timeout=300)
    streams = []
    for raw in (done.stdout, done.stderr):
        text = raw.decode("utf-8", errors="surrogateescape")  # a non-UTF-8 byte shows
        if color:
            text = SGR.sub("", text)
        bad = FORBIDDEN.search(text)
        assert bad is None, f"{args}: {bad.group()!r} printed in {text[:2000]!r}"
        streams.append(text)
    return done.returncode, streams[0], streams[1]


def assert_words(text: str, words: tuple[str, ...] = WORDS) -> None:
    for word in words:
        assert word in text, (word, text[:2000])


# -- tool files -------------------------------------------------------------------------


def test_a_tool_description_in_tools_list_and_tools_check(user_tools):
    spec = simple_spec("hostile")
    spec["description"] = HOSTILE
    script_tool(user_tools, "hostile.py", spec)

    code, out, _ = silica("tools", "list")
    assert code == 0
    assert_words(out)
    assert "␛]0;pwned␇" in out and "<U+202E>" in out and "<U+009B>31m" in out
    assert "[1;31m" not in out  # colour is dropped silently, the word kept

    code, out, err = silica("tools", "check")
    assert code == 0, err
    assert_words(out)

    code, out, _ = silica("tools", "list", color=True)  # silica's own colours stay
    assert code == 0
    assert_words(out)


def test_json_output_keeps_the_data_and_escapes_every_control(user_tools):
    spec = simple_spec("hostile")
    spec["description"] = HOSTILE
    script_tool(user_tools, "hostile.py", spec)

    code, out, _ = silica("tools", "list", "--json")
    assert code == 0
    [row] = [r for r in json.loads(out) if r["name"] == "hostile"]
    assert row["description"] == HOSTILE
    code, out, _ = silica("tools", "spec", "hostile")
    assert code == 0 and json.loads(out)["description"] == HOSTILE  # the model sees it all


def test_a_hostile_file_name_and_spec_name(user_tools):
    script_tool(user_tools, f"odd{ESC}]0;pwned{BEL}.py", simple_spec("odd"))
    script_tool(user_tools, "badname.py", simple_spec(f"bad{ESC}]0;pwned{BEL}"))
    script_tool(user_tools, b"raw\x9b31m.py".decode("utf-8", "surrogateescape"),
                simple_spec("raw"))

    code, out, _ = silica("tools", "list")
    assert code == 0
    assert "odd␛]0;pwned␇.py" in out and "bad␛]0;pwned␇" in out
    assert "raw<U+DC9B>31m.py" in out  # a byte that is not UTF-8, shown as what it is

    code, _, err = silica("tools", "spec", f"bad{ESC}]0;pwned{BEL}")
    assert code == 1 and "error: bad␛]0;pwned␇ has no valid spec" in err


def test_a_tool_whose_toolspec_fails_with_hostile_stderr(user_tools):
    write_tool(user_tools, "crashy.py",
               f"import sys\nsys.stderr.write({HOSTILE!r})\nsys.exit(3)\n", deps="")

    code, out, _ = silica("tools", "list")
    assert code == 0
    assert "--toolspec exited with code 3" in out
    assert_words(out)

    code, _, err = silica("tools", "spec", "crashy")
    assert code == 1 and "error: crashy has no valid spec" in err
    assert_words(err)


def test_a_failing_tool_whose_stderr_carries_escapes(user_tools):
    script_tool(user_tools, "failing.py", simple_spec("failing"),
                body=f"sys.stderr.write({HOSTILE!r})\nsys.exit(1)")
    code, out, err = silica("tools", "run", "failing")
    assert code == 1
    assert_words(err)


def test_a_tool_whose_result_carries_escapes(user_tools):
    script_tool(user_tools, "talker.py", simple_spec("talker"),
                body=f"sys.stdout.write({HOSTILE!r} + '\\r\\nsecond line\\r')")
    code, out, err = silica("tools", "run", "talker")
    assert code == 0, err
    assert_words(out, (*WORDS, "second line"))
    assert "second line␍" in out


def test_warnings_quoting_a_hostile_folder_name(tmp_path):
    folder = tmp_path / f"tools{ESC}]0;pwned{BEL}"
    folder.write_text("not a folder")
    said = "tools␛]0;pwned␇ is not a folder; no tools were read from it"
    code, _, err = silica("tools", "list", SILICA_TOOLS_DIR=str(folder))
    assert code == 0 and said in err
    assert said in served_stderr(tmp_path, SILICA_TOOLS_DIR=str(folder))


def served_stderr(tmp_path, **env: str) -> str:
    """What ``silica mcp serve`` printed on stderr while a real client listed its tools."""
    import asyncio

    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "silica", "mcp", "serve"],
                                   env={**os.environ, **env}, cwd=os.getcwd())
    log = tmp_path / "serve.err"

    async def act():
        with open(log, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                await session.list_tools()

    asyncio.run(asyncio.wait_for(act(), 120))
    return log.read_text()


# -- packs ------------------------------------------------------------------------------


def test_a_pack_manifest_and_tool_file_names(tmp_path, home):
    pack = make_pack(tmp_path / "pack", description=HOSTILE, version=f"1.0{ESC}[2J",
                     bodies={"greet": "print('hi')", f"x{ESC}]0;pwned{BEL}": "print(1)"})

    code, out, err = silica("packs", "check", str(pack))
    assert_words(out + err, ("greet",))

    code, out, err = silica("packs", "install", str(pack))
    assert code == 0, err
    assert "Installed team 1.0␛[2J from" in out and "x␛]0;pwned␇" in out

    code, out, _ = silica("packs", "list")
    assert code == 0
    assert_words(out)

    code, out, _ = silica("packs", "show", "team")
    assert code == 0
    assert_words(out)
    assert "team 1.0␛[2J" in out

    code, out, _ = silica("packs", "list", "--json")
    assert code == 0 and json.loads(out)[0]["description"] == HOSTILE

    code, out, err = silica("packs", "update", "team")
    assert "team" in out + err


def test_errors_quoting_a_hostile_folder_name(tmp_path):
    pack = make_pack(tmp_path / f"pack{ESC}]0;pwned{BEL}")
    (pack / "silica-pack.toml").unlink()
    code, out, err = silica("packs", "install", str(pack))
    assert code == 1 and out == ""
    assert "error: " in err and "pack␛]0;pwned␇ has no silica-pack.toml" in err


# -- MCP servers ------------------------------------------------------------------------


SERVER = """\
import sys
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent

HOSTILE = {hostile!r}
server = MCPServer("evil")


@server.tool(description=HOSTILE)
def say() -> str:
    return HOSTILE


@server.tool(description="fails")
def fail() -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=HOSTILE)], is_error=True)


if __name__ == "__main__":
    server.run()
"""


@pytest.fixture
def evil_server(tmp_path, home) -> None:
    script = tmp_path / "evil_server.py"
    script.write_text(SERVER.format(hostile=HOSTILE), encoding="utf-8")
    junk = f"print({HOSTILE!r}, flush=True); import sys; sys.stderr.write({HOSTILE!r})"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(textwrap.dedent(f"""\
        [mcp]
        timeout = 20
        [mcp.servers.evil]
        command = {json.dumps(sys.executable)}
        args = [{json.dumps(str(script))}]
        [mcp.servers.junk]
        command = {json.dumps(sys.executable)}
        args = ["-c", {json.dumps(junk)}]
        """), encoding="utf-8")


def test_an_mcp_servers_descriptions_results_and_errors(evil_server):
    code, out, err = silica("tools", "list")
    assert code == 0, err
    [row] = [line for line in out.splitlines() if line.startswith("evil__say")]
    assert_words(row)
    [junk] = [line for line in out.splitlines() if line.startswith("junk__*")]
    assert "stopped before it was ready" in junk
    assert_words(out[out.index("its stderr ends:"):])  # the server's stderr, in the table

    code, out, err = silica("tools", "run", "evil__say")
    assert code == 0, err
    assert_words(out)

    code, out, err = silica("tools", "run", "evil__fail")
    assert code == 1
    assert_words(err)


def test_what_libraries_log_is_made_safe_too():
    # The MCP and provider SDKs log with no handler set up: Python's last-resort handler.
    code = ("import logging, silica.cli.output\n"
            f"logging.getLogger('mcp.client').warning({HOSTILE!r})\n"
            "try:\n    raise ValueError('\\x1b[2J in a traceback')\n"
            "except ValueError:\n    logging.getLogger('httpx').exception('failed')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    err = done.stderr.decode("utf-8", errors="surrogateescape")
    assert done.returncode == 0 and not FORBIDDEN.search(err), err
    assert_words(err, (*WORDS, "␛[2J in a traceback"))
