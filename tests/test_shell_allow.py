"""The shell allow-list matched as sh parses a line: no extra stage, operator, substitution or
redirection rides on a pattern's ``*``. End to end through ``ask``, ``chat`` and ``mcp serve
--shell`` (real processes, a file that must not appear), property tests of the matcher, and a
differential test against the real ``/bin/sh``."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_shell_tool import call_over_mcp, last_tool_result, silica, text_of, write_config
from wire import anthropic_server, text, tool_call

from silica.security import shell_syntax
from silica.security.shell_syntax import MAX_LINE, parse
from silica.tools.shell import allowed_by, always_pattern

PIPE = "python plot.py * | head *"
SMUGGLED = [
    "python plot.py x | touch X | head -n 1",  # an extra stage inside the pipe
    "python plot.py x | head -n 1 | false || touch X",  # an extra list operator
    "python plot.py x | head -n 1; touch X",
    "python plot.py x | head -n 1 & touch X",
    "python plot.py x | head -n 1\ntouch X",
    "python plot.py $(touch X) | head -n 1",
    "python plot.py x | head -n 1 > X",
    "python plot.py x | head `touch X`",
]


@pytest.fixture
def python_on_path(tmp_path, monkeypatch) -> None:
    """``python`` is this interpreter, so an allowed ``python plot.py`` really runs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


@pytest.fixture
def pipe_allowed(home, project, python_on_path) -> Path:
    write_config(home, f'[shell]\nenabled = true\nallow = ["{PIPE}"]\n')
    (project / "plot.py").write_text("print('plotted'); print('more')\n")
    return project


@pytest.mark.parametrize("command", SMUGGLED[:2])
def test_ask_runs_no_extra_pipeline_stage(pipe_allowed, command):
    with anthropic_server([tool_call("shell", {"command": command}), text("Ok.")]) as srv:
        done = silica("ask", "plot it", env={**os.environ, **srv.env})
    assert done.returncode == 0, done.stderr
    assert not (pipe_allowed / "X").exists()
    told = last_tool_result(srv.requests[1])
    assert "refused" in told and "[shell] allow" in told


def test_ask_still_runs_the_pipe_the_pattern_allows(pipe_allowed):
    with anthropic_server([tool_call("shell", {"command": "python plot.py x | head -n 1"}),
                           text("Ok.")]) as srv:
        done = silica("ask", "plot it", env={**os.environ, **srv.env})
    assert done.returncode == 0, done.stderr
    told = last_tool_result(srv.requests[1])
    assert "plotted" in told and "more" not in told


def test_mcp_serve_shell_runs_no_extra_pipeline_stage(pipe_allowed):
    for command in SMUGGLED:
        _, result = call_over_mcp("--shell", command=command)
        assert result.is_error and "[shell] allow" in text_of(result), command
        assert not (pipe_allowed / "X").exists(), command
    _, allowed = call_over_mcp("--shell", command="python plot.py x | head -n 1")
    assert allowed.is_error is False and "plotted" in text_of(allowed)


def test_chat_always_for_an_assignment_covers_only_that_program(home, project):
    write_config(home, "[shell]\nenabled = true\n")
    (project / "gone").write_text("")
    script = [tool_call("shell", {"command": "FOO=bar rm -f gone"}), text("Removed."),
              tool_call("shell", {"command": "FOO=bar touch X"}), text("Refused.")]
    with anthropic_server(script) as srv:
        done = silica("chat", env={**os.environ, **srv.env},
                      stdin="remove it\na\nnow touch\nn\n/exit\n")
    assert done.returncode == 0, done.stderr
    assert not (project / "gone").exists()  # approved, ran
    assert not (project / "X").exists()  # asked again, and refused
    assert "[a]lways for `FOO=bar rm *`" in done.stderr
    assert done.stderr.count("[y]es / [n]o") == 2


# -- the matcher, unit by unit ------------------------------------------------------------


def test_patterns_match_stage_by_stage():
    assert allowed_by("python plot.py x | head -n 1", [PIPE]) == PIPE
    for command in SMUGGLED:
        assert allowed_by(command, [PIPE]) is None, command
    assert allowed_by("FOO=bar rm x", ["rm *"]) is None
    assert allowed_by("chafa x 2>&1", ["chafa *"]) is None
    assert allowed_by("chafa x 2>&1", ["chafa * 2>&1"]) is not None
    assert allowed_by("chafa $HOME/a.png", ["chafa *"]) is not None  # a variable is data
    assert allowed_by("chafa ${x:-$(id)}", ["chafa *"]) is None
    assert allowed_by("date +%s", ["date +%s"]) is not None
    assert allowed_by("./tools/run x", ["./tools/* *"]) is not None
    assert allowed_by("./tools/../evil x", ["./tools/* *"]) is None  # no climbing out
    assert allowed_by("cat logs/a/../../secrets", ["cat logs/*"]) is None
    assert allowed_by("cat ../up", ["cat ../*"]) is not None  # the pattern's own ".."
    assert allowed_by("echo $(date)", ["echo $(date)"]) is not None  # the very text
    assert allowed_by("cat <<EOF\nhi\nEOF", ["cat *"]) is None


@pytest.mark.parametrize("command", [
    "echo $'\\' ; touch X ; echo ' # '",  # bash: one word and a comment; sh: three commands
    "echo x\r#; touch X",  # the grammar skips CR as a blank; sh reads x<CR>#
    "echo x\f#; touch X",
    "echo x\u00a0#; touch X",
    "echo {\r{#| touch X",  # the grammar: a word and a comment; sh: {<CR>{# | touch X
    "echo a{#| touch X",  # "#" inside a word starts no comment in sh
    "echo 'a\rb'",  # a control anywhere: never vouched for, quoted or not
    "echo touch\\\n#x; touch X",  # sh joins the lines: the word touch#x, then ; touch X
    "echo x\n\\\ntouch X",  # the grammar reads "echo x touch X"; sh runs touch X
    'echo $"x"',
    "echo x |& touch X",
    "echo x &> X",
    "echo x >&X",
    "echo x <<< X",
    "echo <(touch X)",
    "(touch X)",
    "{ touch X; }",
    "echo 'unterminated",
    "echo x &&",
])
def test_what_sh_may_read_differently_is_never_allowed(command):
    assert allowed_by(command, ["echo *", "echo * *"]) is None
    assert allowed_by(command, ["*"]) == "*"


def test_thousands_of_stages_or_a_huge_line_are_judged_not_crashed():
    deep = " && ".join(["echo x"] * 3000)
    assert allowed_by(deep, [" && ".join(["echo *"] * 3000)]) is None  # too deep: asked
    assert allowed_by(deep, ["*"]) == "*"
    assert always_pattern(deep) is None
    long = "echo " + "x" * MAX_LINE  # longer than Linux passes to sh -c: not even read
    assert allowed_by(long, ["echo *"]) is None and allowed_by(long, ["*"]) == "*"


def test_always_keeps_what_the_person_saw():
    assert always_pattern("FOO=bar rm -rf x") == "FOO=bar rm *"
    assert allowed_by("FOO=bar touch X", [always_pattern("FOO=bar rm -rf x")]) is None
    assert allowed_by("touch X", ["FOO=bar rm *"]) is None
    assert always_pattern("python plot.py 3 | head -n 1") == "python * | head *"
    assert always_pattern("a* -x") == "'a[*]' *"
    assert allowed_by("ab -x", ["'a[*]' *"]) is None
    for command in ("echo $(id)", "ls > out", "cat <<EOF\nx\nEOF", "(ls)", "echo $'x'"):
        assert always_pattern(command) is None, command


# -- properties ---------------------------------------------------------------------------

SAFE = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-._/,:+%@", min_size=1,
               max_size=8)
# The grammar refuses some program words, "a% x", "a@ x", "a+: x" (refused, so never
# unsafe): not drawn as programs.
PROGRAM = SAFE.filter(lambda w: w[0].isalpha() and not {"%", "@"} & set(w)
                      and w not in RESERVED and parse(f"{w} x") is not None)
RESERVED = {"if", "then", "else", "elif", "fi", "do", "done", "case", "esac", "while",
            "until", "for", "in", "function", "select", "time", "coproc", "declare",
            "typeset", "export", "readonly", "local", "unset"}
# Quoted text of any character but those that make a line never vouched for, quoted or not
# (controls, Unicode blanks: shell_syntax's "unusual" ones, and characters past U+FFFF).
UNUSUAL = "".join(c for c in map(chr, range(0x3001)) if shell_syntax._UNUSUAL.match(c)) + "\ufeff"
QUOTED = st.text(alphabet=st.characters(max_codepoint=0xFFFF,
                                        blacklist_categories=("Cs", "Cc"),
                                        blacklist_characters=UNUSUAL), max_size=10)
ARGUMENT = st.one_of(SAFE, QUOTED.map(shlex.quote))
OPERATORS = st.sampled_from([";", "&&", "||"])


@st.composite
def patterns(draw) -> list[list[tuple[str, list[str], bool]]]:
    """Pipelines of stages (program, literal arguments, ends in *) and operators."""
    lines = []
    for _ in range(draw(st.integers(1, 3))):
        stages = [(draw(PROGRAM), draw(st.lists(SAFE, max_size=2)), draw(st.booleans()))
                  for _ in range(draw(st.integers(1, 3)))]
        lines.append(stages)
    return lines, [draw(OPERATORS) for _ in range(len(lines) - 1)]


def render(shape, fill=None) -> str:
    lines, operators = shape
    out = []
    for i, stages in enumerate(lines):
        shown = []
        for j, (program, literal, star) in enumerate(stages):
            words = [program, *literal]
            if star:
                words += fill[(i, j)] if fill else ["*"]
            shown.append(" ".join(words))
        out.append(" | ".join(shown))
        if i < len(operators):
            out.append(operators[i])
    return " ".join(out)


@st.composite
def instances(draw, argument=ARGUMENT):
    shape = draw(patterns())
    lines, _ = shape
    fill = {(i, j): draw(st.lists(argument, min_size=1, max_size=3))
            for i, stages in enumerate(lines) for j, (_, _, star) in enumerate(stages) if star}
    return render(shape), render(shape, fill)


@given(instances())
def test_an_instance_of_a_pattern_is_allowed(pair):
    """(Quoted arguments hold no control or Unicode blank: see QUOTED.)"""
    pattern, command = pair
    assert allowed_by(command, [pattern]) == pattern


EXTRA = st.sampled_from([
    "| touch X", "; touch X", "&& touch X", "|| touch X", "& touch X", "\ntouch X", "&",
    "> X", "2> X", ">> X", "< X", "2>&1", "$(touch X)", "`touch X`", '"$(touch X)"',
    "${x:-$(touch X)}", "$((x))", "<(touch X)", "<<EOF\nx\nEOF", "<<< X", "&> X", "|& cat",
])


@given(instances(SAFE), st.data())
def test_an_instance_with_anything_more_is_not_allowed(pair, data):
    pattern, command = pair
    words = command.split(" ")  # unquoted words only: each space is between two words
    at = data.draw(st.integers(1, len(words)))  # never before the first program word
    extra = data.draw(EXTRA)
    smuggled = " ".join([*words[:at], extra, *words[at:]])
    assert allowed_by(smuggled, [pattern]) is None, smuggled


@given(st.lists(st.tuples(SAFE, st.lists(ARGUMENT, max_size=3)), min_size=1, max_size=3),
       st.lists(OPERATORS, min_size=2, max_size=2),
       st.lists(st.tuples(st.sampled_from(["FOO", "X_1"]), SAFE), max_size=2))
def test_always_covers_the_command_and_no_other_program(stages, operators, assigns):
    env = " ".join(f"{k}={v}" for k, v in assigns)

    def line(stages) -> str:
        parts = [" ".join([env, program, *args]).strip() for program, args in stages]
        return "".join(p + (f" {operators[i]} " if i < len(parts) - 1 else "")
                       for i, p in enumerate(parts))

    command = line(stages)
    if parse(command) is None:  # a word the grammar reads as a keyword
        return
    pattern = always_pattern(command)
    assert pattern is not None and allowed_by(command, [pattern]) == pattern
    other = line([("zzzother", stages[0][1]), *stages[1:]])
    assert allowed_by(other, [pattern]) is None


@given(st.text(min_size=1, max_size=12), st.booleans())
def test_always_keeps_any_program_word_literally(program, arguments):
    command = shlex.quote(program) + (" -x y" if arguments else "")
    pattern = always_pattern(command)
    if pattern is None:  # e.g. a control character the grammar takes for a blank
        return
    assert allowed_by(command, [pattern]) == pattern
    assert allowed_by("zz" + command, [pattern]) is None
    assert allowed_by(command + " | touch X", [pattern]) is None


@given(st.text(max_size=60), st.text(max_size=30))
def test_any_text_is_judged_without_error(command, pattern):
    allowed_by(command, [pattern])
    always_pattern(command)


# -- against the real /bin/sh -------------------------------------------------------------

TOKENS = ["ok", "evil", " ", " ", "\t", "\n", "\r", "\f", "\u00a0", ";", "&", "|", "&&",
          "||", "'", '"', "\\", "$", "$'", '$"', "`", "(", ")", "{", "}", "#", "<", ">",
          ">&", "&>", "x", "=", "*", "!", "$(evil)", "<<", "EOF", "$x", "${x}", "-", "\\\n",
          "fi", "}"]


@pytest.fixture(scope="module")
def sh_world(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("sh")
    (folder / "bin").mkdir()
    for name, body in (("ok", 'echo ran >> "$OK_LOG"'), ("evil", ': > "$EVIL_MARK"')):
        path = folder / "bin" / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return folder


@settings(max_examples=1500, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(TOKENS), max_size=12))
def test_what_is_allowed_runs_in_sh_as_matched(sh_world, tokens):
    """Whatever ``ok *`` allows, /bin/sh runs as one ``ok`` and nothing else."""
    command = "ok " + "".join(tokens)
    if allowed_by(command, ["ok *"]) is None:
        return
    log, mark = sh_world / "log", sh_world / "mark"
    log.unlink(missing_ok=True)
    env = {"PATH": str(sh_world / "bin"), "OK_LOG": str(log), "EVIL_MARK": str(mark),
           "HOME": str(sh_world)}
    subprocess.run(["/bin/sh", "-c", command], env=env, cwd=sh_world, timeout=30,
                   stdin=subprocess.DEVNULL, capture_output=True)
    assert not mark.exists(), command
    assert log.exists() and log.read_text().count("ran") == 1, command


# -- the native grammar never takes the process down ----------------------------------------

CRASH_LOOP = """
import random
from silica.security.shell_syntax import parse
from silica.tools.shell import allowed_by, always_pattern
rng = random.Random(0)
count = 0
for _ in range(4000):
    c = chr(rng.randrange(0x10000, 0x110000))
    for line in ("{" + c, "echo {" + c + "7", "x {a," + c + "}", c + "{"):
        assert parse(line) is None
        assert allowed_by(line, ["echo *", "*"]) == "*"
        assert allowed_by(line, ["echo *", "x *"]) is None
        always_pattern(line)
        count += 1
print("judged", count)
"""


def test_characters_that_crashed_the_grammar_are_judged_in_a_live_process():
    """A brace then a character outside the Basic Multilingual Plane made the native grammar
    read out of bounds: the process asking (chat, the daemon, mcp serve) died of SIGSEGV.
    Such a line is now asked about, and the process that judged thousands of them lives."""
    proc = subprocess.run([sys.executable, "-c", CRASH_LOOP], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "judged 16000"
