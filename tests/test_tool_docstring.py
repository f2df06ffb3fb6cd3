"""A tool file's docstring (where its ``Metadata:`` block lives) is read from its first
logical line only, and means exactly what Python's own parser says it is, for any source."""

from __future__ import annotations

import ast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from silica.tools.metadata import module_docstring, parse_metadata

# generated sources hold invalid escapes, which Python's own parser warns about too
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30)


def python_says(source: str) -> str:
    try:
        return ast.get_docstring(ast.parse(source)) or ""
    except (SyntaxError, ValueError):
        return ""


@st.composite
def heads(draw) -> str:
    """The start of a file: comments and blank lines, then a first statement that is, or
    looks like, a docstring (quoted any way, split, parenthesised, prefixed, followed by
    more), then some body."""
    lines = draw(st.lists(st.sampled_from(["", "# a comment", "#!/usr/bin/env python"]),
                          max_size=3))
    parts = draw(st.lists(TEXT.map(repr), min_size=0, max_size=3))
    quote = draw(st.sampled_from(['"', "'", '"""', "'''"]))
    if draw(st.booleans()):
        parts.append(quote + draw(st.text("abc \\n'\"", max_size=12)) + quote)
    prefix = draw(st.sampled_from(["", "b", "f", "r", "u"]))
    first = " ".join(prefix + p if i == 0 else p for i, p in enumerate(parts))
    if draw(st.booleans()):
        first = "(" + first.replace(" ", "\n ", 1) + ")"
    first += draw(st.sampled_from(["", " + x", "; x = 1", ".upper()", " if x else 'b'", ","]))
    body = draw(st.sampled_from(["", "x = 1\n", "def f():\n    '''not this'''\n"]))
    return "\n".join([*lines, first, body])


@given(heads())
def test_the_docstring_is_what_python_says(source):
    assert module_docstring(source) == python_says(source)


@given(TEXT)
def test_any_text_gives_a_docstring_or_nothing_and_never_raises(source):
    assert isinstance(module_docstring(source), str)
    if python_says(source):
        assert module_docstring(source) == python_says(source)


def test_a_file_that_does_not_parse_further_down_keeps_its_docstring():
    # such a tool fails when it runs; its listing still shows what its docstring says
    assert module_docstring('"""A tool."""\n  bad indent\n') == "A tool."


def test_a_metadata_block_is_read_from_a_file_whose_body_is_long():
    source = ('"""A tool.\n\nMetadata:\n    category: web\n    timeout: 5\n"""\n'
              + "x = 1\n" * 50_000)
    meta = parse_metadata(source)
    assert (meta.category, meta.timeout) == ("web", 5.0)
