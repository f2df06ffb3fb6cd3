"""safe_text: whatever comes in, nothing a terminal acts on comes out; clean text is untouched."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from silica.security.text import safe_text

# What must never be printed: C0 but newline and tab, DEL, C1, bidi controls, lone surrogates.
FORBIDDEN = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                       r"\u2066-\u2069\ud800-\udfff]")
ESC, BEL, ST = "\x1b", "\x07", "\x1b\\"

PIECES = [
    f"{ESC}]0;pwned{BEL}", f"{ESC}]2;title{ST}", f"{ESC}[2J", f"{ESC}[?1049h", f"{ESC}[31m",
    f"{ESC}[0m", f"{ESC}[38;2;1;2;3m", f"{ESC}]8;;http://evil.example/{ST}click{ESC}]8;;{ST}",
    f"{ESC}P1$r{ST}", f"{ESC}_Gf=100;AAAA{ST}", f"{ESC}^pm{ST}", f"{ESC}Xsos{ST}", f"{ESC}c",
    f"{ESC}7", f"{ESC}", "\x9b31m", "\x9d0;x\x9c", "\x90dcs\x9c", "\x85", "\u202e", "\u2066",
    "\u200f", "\u061c", "\r", "\r\n", "\n", "\t", "\x00", "\x7f", "\ud83d", "\udc9b",
    "[", "m", "]", ";", "\\",
]
# Text with escapes in it: hostile pieces between arbitrary text.
hostile = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)),
                   max_size=30).map("".join)
# Any code point at all, lone surrogates included.
anything = st.text(st.characters(exclude_categories=()), max_size=200)
clean = st.text(st.characters(exclude_categories=("Cc", "Cs"),
                              exclude_characters="\u061c\u200e\u200f\u202a\u202b\u202c"
                                                 "\u202d\u202e\u2066\u2067\u2068\u2069")
                | st.sampled_from("\n\t"), max_size=200)


@given(st.one_of(hostile, anything))
@example(f"{ESC}{ESC}[31m[2J")
@example("\r\x1b[0m\n")
def test_nothing_a_terminal_acts_on_survives(text):
    cleaned = safe_text(text)
    assert not FORBIDDEN.search(cleaned), ascii(cleaned)
    assert ESC not in cleaned and "\r" not in cleaned
    assert safe_text(cleaned) == cleaned  # idempotent
    cleaned.encode("utf-8")  # no lone surrogate: always printable as UTF-8


@given(clean)
@example("emoji 👩‍👩‍👧 CJK 漢字 combining e\u0301 zero width\u200b joiner\u200d")
def test_clean_text_comes_back_unchanged(text):
    assert safe_text(text) is text


@given(hostile, hostile)
def test_visible_words_stay_in_order(before, after):
    # Only SGR is dropped: the words around any sequence are all still there.
    assert "hello" in safe_text(f"{before}hello{after}")


@pytest.mark.parametrize(("raw", "shown"), [
    (f"{ESC}]0;pwned{BEL}", "␛]0;pwned␇"),
    (f"{ESC}[2J", "␛[2J"),
    (f"{ESC}]8;;http://evil.example/{ST}click{ESC}]8;;{ST}",
     "␛]8;;http://evil.example/␛\\click␛]8;;␛\\"),
    (f"{ESC}[1;31mred{ESC}[0m plain", "red plain"),
    (f"{ESC}[38:2::1:2:3mrgb{ESC}[m", "rgb"),
    ("\x9b31mred", "<U+009B>31mred"),
    ("abc\u202edef", "abc<U+202E>def"),
    ("a\r\nb\rc\r", "a\nb␍c␍"),
    ("nul\x00 del\x7f tab\t", "nul␀ del␡ tab\t"),
    ("name\udc9b.py", "name<U+DC9B>.py"),
])
def test_rendering_rules(raw, shown):
    assert safe_text(raw) == shown


def test_four_mebibytes_of_escapes_are_cleaned_in_one_pass():
    # Linear work: no backtracking on long parameter runs or unterminated sequences.
    chunk = f"ab{ESC}]0;x{BEL}{ESC}[31m{ESC}[" + "1;" * 20 + "\x9b\u202e\r\n"
    text = chunk * (4 * 1024 * 1024 // len(chunk))
    text += f"{ESC}[" + "1" * 100_000  # an SGR-looking run that never ends
    cleaned = safe_text(text)
    assert not FORBIDDEN.search(cleaned)
    assert cleaned.count("ab") == text.count("ab")
