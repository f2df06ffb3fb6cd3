"""Images are taken out of a tool's output bytes: the text left is what decoding first gave.

The terminal image processors read ``draft.output`` (the bytes the tool wrote) and decode
only what is left once the images are out. For any output, that gives the same blocks as
decoding it first (UTF-8, bad bytes replaced) and reading the text: these tests hold the
byte path to that, on recorded emitters' output and on hostile bytes.
"""

from __future__ import annotations

import base64
import io
import os
import zlib

import pytest
from conftest import script_tool, simple_spec, traced_peak
from escape_streams import BEL, ESC, FIXTURES, ST, png, tmux
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from silica.blocks import ImageBlock
from silica.hookspecs import hookimpl
from silica.plugins import build_plugin_manager
from silica.results import escapes
from silica.results.escapes import seal
from silica.results.kitty import cut_kitty, extract_kitty
from silica.results.pipeline import ResultDraft, build_result, result_processors
from silica.tools.model import RawOutput
from silica.tools.toolbox import Toolbox

SOME = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
PLACEHOLDER = "\U0010eeee"


@pytest.fixture(params=["simd", "stdlib"])
def search(request, monkeypatch) -> str:
    """Both ways sequences are found: the SIMD search when it is installed, and the hops
    over ``bytes.find`` that silica falls back to without it."""
    if request.param == "stdlib":
        monkeypatch.setattr(escapes, "_stringzilla", None)
    return request.param


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kitty(data: bytes, keys: str = "a=T,f=100", size: int = 0) -> bytes:
    """``data`` as kitty graphics: one sequence, or chunks of ``size`` base64 characters."""
    text = b64(data)
    if not size:
        return f"{ESC}_G{keys};{text}{ST}".encode()
    cuts = [text[i : i + size] for i in range(0, len(text), size)]
    return "".join(
        f"{ESC}_G{keys + ',' if n == 0 else ''}m={int(n < len(cuts) - 1)};{cut}{ST}"
        for n, cut in enumerate(cuts)
    ).encode()


def iterm2(data: bytes) -> bytes:
    return f"{ESC}]1337;File=inline=1:{b64(data)}{BEL}".encode()


SIXEL = f'{ESC}Pq"1;1;4;6#1;2;100;0;0#1~~~~{ST}'.encode()  # 4x6 red


def processed(draft: ResultDraft) -> tuple[str, list[bytes]]:
    """The default processors over ``draft``: the text left and the images' bytes."""
    for proc in result_processors(build_plugin_manager()):
        proc.process(draft)
    return draft.text, [i.data for i in draft.images]


def from_bytes(stdout: bytes) -> tuple[str, list[bytes]]:
    return processed(ResultDraft(output=stdout))


def decoded_first(stdout: bytes) -> tuple[str, list[bytes]]:
    """What the processors give for the output decoded to text before they run."""
    return processed(ResultDraft(text=stdout.decode("utf-8", errors="replace")))


def blocks(stdout: bytes) -> tuple[str, list[tuple[int, int]]]:
    """What reaches a model: the result's text and its images' sizes."""
    result = build_result(RawOutput(stdout, b"", 0, 0.1), build_plugin_manager())
    return result.text, [(b.width, b.height) for b in result.blocks if isinstance(b, ImageBlock)]


# --- recorded emitters ---------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.out")))
def test_recorded_emitters_give_the_same_blocks_from_bytes(name):
    stdout = (FIXTURES / name).read_bytes()
    text, images = from_bytes(stdout)
    assert (text, images) == decoded_first(stdout)
    assert len(images) == 1 and "_G" not in text and "1337;" not in text
    tool = next(t for t in ("chafa", "timg", "term-image", "textual-image") if name.startswith(t))
    assert text.startswith(f"before {tool}\n") and text.endswith(f"after {tool}\n")


def test_recorded_emitters_one_after_another_with_bad_bytes_between():
    outputs = [(FIXTURES / p).read_bytes() for p in sorted(os.listdir(FIXTURES))
               if p.endswith(".out")]
    stdout = b"\xe2\x82".join(outputs) + b"\xf0\x9f"
    text, images = from_bytes(stdout)
    assert (text, images) == decoded_first(stdout)
    assert len(images) == len(outputs)
    assert text.count("\ufffd") == len(outputs)  # each cut-short character, once


# --- hostile bytes ---------------------------------------------------------------------------

CUTS = {
    "kitty": kitty(png()),
    "kitty chunked": kitty(png(7, 5), size=8),
    "kitty in tmux": tmux(kitty(png()).decode()).encode(),
    "iterm2": iterm2(png()),
    "sixel": SIXEL,
    "sixel 8-bit": '\x90q"1;1;4;6#1;2;100;0;0#1~~~~\x9c'.encode(),
    "placeholder": f"{PLACEHOLDER}\u0305\u030d".encode(),
}


@pytest.mark.parametrize("what", sorted(CUTS))
def test_bytes_on_either_side_of_a_cut_never_join_into_a_character(what):
    # "\xe2\x82" + "\xac" would be a euro sign if what was between them just went away.
    colour = b"\x1b[0m" if what == "placeholder" else b""  # placeholders go where ESC is
    stdout = b"price: \xe2\x82" + CUTS[what] + b"\xac!" + colour
    text, images = from_bytes(stdout)
    assert (text, images) == decoded_first(stdout)
    assert "\u20ac" not in text
    assert text.startswith("price: \ufffd") and "\ufffd!" in text
    assert len(images) == (0 if what == "placeholder" else 1)


def test_bytes_cut_short_that_decode_to_several_replacements_stay_several():
    # ED AC looks like the start of a character, but no character starts so: two U+FFFD.
    stdout = b"\x1b[0m\xed\xac" + kitty(png()) + b"\x80"
    text, images = from_bytes(stdout)
    assert text == "\x1b[0m\ufffd\ufffd\ufffd" and images == [png()]
    assert (text, images) == decoded_first(stdout)


def test_a_character_cut_by_the_chunks_of_an_image_stays_cut():
    st_ = ST.encode()
    chunks = kitty(png(6, 6), size=12).split(st_)
    stdout = b"caf\xc3" + st_.join(chunks[:2]) + st_ + b"\xa9 " + st_.join(chunks[2:])
    text, images = from_bytes(stdout)
    assert text == "caf\ufffd\ufffd " and images == [png(6, 6)]
    assert (text, images) == decoded_first(stdout)


def test_text_between_chunks_stays_even_when_it_ends_like_a_chunk():
    # Chunks are taken one after another only where the next really begins at the ST.
    first, *rest = kitty(png(6, 6), size=12).split(b"\x1b\\")
    stdout = first + b"\x1b\\x\x1b\\3_Gm=1;AAAA\x1b\\" + b"\x1b\\".join(rest)
    text, images = from_bytes(stdout)
    assert text == "x\x1b\\3_Gm=1;AAAA\x1b\\" and images == [png(6, 6)]
    assert (text, images) == decoded_first(stdout)


def test_a_chunk_cut_off_by_another_escape_mid_transfer_keeps_that_escape():
    first = kitty(png(), size=8).split(ST.encode())[0] + ST.encode()
    stdout = first + f"{ESC}_Gm=1;AAAA{ESC}{ESC}]0;title{BEL}".encode()
    text, images = from_bytes(stdout)
    assert text == f"[kitty image dropped: escape sequence cut off]{ESC}{ESC}]0;title{BEL}"
    assert images == [] and (text, images) == decoded_first(stdout)


@pytest.mark.parametrize("ends", ["ST BEL", "BEL ST", "ST ST BEL", "BEL BEL ST"])
def test_chunks_ended_by_bel_and_st_in_turn_make_one_image(ends):
    data = png(7, 7)
    chunks = kitty(data, size=8).split(ST.encode())[:-1]
    terminators = [{"ST": ST, "BEL": BEL}[t].encode() for t in ends.split()]
    stdout = b"<" + b"".join(
        chunk + terminators[n % len(terminators)] for n, chunk in enumerate(chunks)) + b">"
    text, images = from_bytes(stdout)
    assert text == "<>" and images == [data]
    assert (text, images) == decoded_first(stdout)


def test_bad_bytes_inside_sequences_are_read_as_the_text_has_them():
    stdout = (
        kitty(png(), keys="a=T,f=100,X=\xe9\xff")  # odd keys: ignored
        + f"{ESC}_Ga=T,f=100;iVBO\u00e9\u00a0{ST}".encode()  # not base64: dropped
        + b"\x1b_Ga=T,f=100;iV\xffBO\x1b\\"  # a byte that is no UTF-8: dropped
        + b"\x1b]1337;File=name=\xc3;inline=1\x07"  # no data: dropped, its name unread
        + b"\x1bPq#1~\xe2\x82~\x1b\\"  # in a sixel, a character that is no sixel
    )
    text, images = from_bytes(stdout)
    assert (text, images) == decoded_first(stdout)
    assert text == (
        "[kitty image dropped: invalid base64]" * 2
        + "[iterm2 image dropped: no data][sixel image]"
    )
    assert images[0] == png() and len(images) == 2


def test_cut_off_and_unterminated_sequences_around_bad_bytes():
    stdout = (
        b"\xff" + f"{ESC}_Ga=T,f=100;iVBORw0K".encode() + b"\xe2" + f"{ESC}[1mbold{ESC}[0m".encode()
        + b"\xc3" + f"{ESC}]1337;File=inline=1:AAAA".encode() + b"\xc3" + f"{ESC}Pq#1~~".encode()
        + b"\xf0\x9f"
    )
    text, images = from_bytes(stdout)
    assert (text, images) == decoded_first(stdout)
    assert images == []
    assert text == (
        "\ufffd[kitty image dropped: escape sequence cut off]\ufffd\x1b[1mbold\x1b[0m\ufffd"
        "[iterm2 image dropped: escape sequence cut off]\ufffd"
        "[sixel image dropped: unterminated at the end of the output]"
    )


def test_kitty_sixel_iterm2_and_text_interleaved_with_bad_bytes_reach_the_model():
    red = Image.new("RGB", (30, 20), (255, 0, 0))
    out = io.BytesIO()
    red.save(out, "PNG")
    stdout = (
        b"\xe2\x82one " + kitty(out.getvalue(), size=64) + b"\xac two \xff"
        + SIXEL + b" three \xc3" + iterm2(png(12, 7)) + b"\xa9 four\n"
    )
    text, sizes = blocks(stdout)
    assert text.startswith("\ufffdone \ufffd two \ufffd[sixel image] three \ufffd\ufffd four\n")
    assert sizes == [(30, 20), (12, 7), (4, 6)]  # kitty, iTerm2, then sixel


# --- bounds ----------------------------------------------------------------------------------


def test_a_20_mb_unchunked_image_is_decoded_straight_from_the_output_bytes():
    payload = b"\x89PNG\r\n\x1a\n" + os.urandom(20_000_000)
    stdout = b"rendering\n" + kitty(payload) + b"\ndone \xe2\x82\xac\n"
    draft = ResultDraft(output=stdout)
    [process] = [p.process for p in result_processors(build_plugin_manager())
                 if p.name == "kitty-graphics"]
    def run() -> str:
        process(draft)
        return draft.text

    text, peak = traced_peak(run)
    assert text == "rendering\n\ndone \u20ac\n"
    assert [i.data for i in draft.images] == [payload]
    # The image's bytes, and no copy of the 26.7 MB of base64 or of the output as text.
    assert peak < len(payload) + 1_000_000


def test_a_thousand_small_images_come_out_and_the_result_keeps_twenty():
    images = [png(2 + n % 7, 2 + n // 7 % 5) for n in range(1000)]
    stdout = b"".join(f"line {n}\n".encode() + kitty(data, size=16)
                      for n, data in enumerate(images)) + b"end\n"
    text, found = from_bytes(stdout)
    assert found == images and (text, found) == decoded_first(stdout)
    assert text == "".join(f"line {n}\n" for n in range(1000)) + "end\n"
    result = build_result(RawOutput(stdout, b"", 0, 0.1), build_plugin_manager())
    assert len(result.images) == 20
    assert "holds 1000 images, over the limit of 20 per result" in result.text


def test_hostile_sixels_and_a_kitty_bomb_in_bytes_are_notices():
    bomb = kitty(zlib.compress(bytes(4096)), keys="a=T,f=32,s=1,v=67108864,o=z")
    stdout = (
        b"\xe2" + f'{ESC}Pq"1;1;200000;200000#1~{ST}'.encode() + b"\x82"
        + f"{ESC}Pq#1!2147483647~{ST}".encode() + bomb + f"{ESC}Pq#99999;2;0;0;0".encode()
    )
    text, images = from_bytes(stdout)
    assert (text, images) == decoded_first(stdout)
    assert images == []
    assert text.startswith("\ufffd[sixel image dropped: 200000x200000 px is over the decoding "
                           "budget")
    assert "px is over the decoding budget" in text.split("\ufffd")[2]  # the repeat's width
    assert "[kitty image dropped: s=1 v=67108864 (f=32) would take 512 MiB" in text
    assert text.endswith("[sixel image dropped: unterminated at the end of the output]")


# --- any bytes -----------------------------------------------------------------------------

PIECES = [
    ESC, BEL, "_G", ";", "\\", "m=1", "m=0", "a=T,f=100", "a=q", "i=1", "o=z", "AAAA", "iVBO",
    "]1337;File=inline=1:", "]1337;MultipartFile=inline=1", "]1337;FilePart=", "]1337;FileEnd",
    "Pq", "#1~", "\x90q", "\x9c", "P", "tmux;", PLACEHOLDER, "\u0305", "\U000101fd", "\u00a0",
    "x", "\n", b64(png())[:12], kitty(png()).decode(), kitty(png(3, 3), size=8).decode(),
    iterm2(png()).decode(), SIXEL.decode(),
]
BAD = [b"\x80", b"\xc2", b"\xe2\x82", b"\xac", b"\xf4", b"\xf4\x8e\xbb", b"\xed\xa0\x80", b"\xff",
       b"\xed\xac", b"\xf4\x90", b"\xe0\x80"]  # the last: cut short, yet more than one U+FFFD
SOUP = st.lists(
    st.sampled_from([p.encode() for p in PIECES] + BAD) | st.binary(max_size=3), max_size=40,
).map(b"".join)


WHOLE = [kitty(png()), kitty(png(3, 3), size=8), iterm2(png()), SIXEL, CUTS["sixel 8-bit"],
         CUTS["kitty in tmux"], f"{ESC}_Ga=q,i=1;AAAA{ST}".encode(), PLACEHOLDER.encode()]
AROUND = st.lists(st.tuples(st.lists(st.sampled_from(BAD) | st.binary(max_size=2), max_size=3),
                            st.sampled_from(WHOLE)), max_size=6)


@SOME
@given(SOUP)
def test_any_bytes_give_what_decoding_them_first_gives(search, stdout):
    assert from_bytes(stdout) == decoded_first(stdout)


@SOME
@given(AROUND, st.sampled_from(BAD))
def test_whole_sequences_between_any_bytes_give_what_decoding_first_gives(search, pieces, tail):
    stdout = b"\x1b[0m" + b"".join(b"".join(bad) + seq for bad, seq in pieces) + tail
    assert from_bytes(stdout) == decoded_first(stdout)


@SOME
@given(SOUP, st.lists(st.integers(0, 4), max_size=4))
def test_whatever_is_cut_out_the_pieces_left_decode_as_they_did(stdout, cuts):
    # seal keeps a piece decoding as it did in place: its last character was cut short.
    decoded = stdout.decode("utf-8", "replace")
    marks = sorted({min(len(stdout), c * len(stdout) // 4) for c in cuts} | {len(stdout)})
    start, pieces = 0, []
    for mark in marks:
        if mark < len(stdout) and stdout[mark] & 0xC0 == 0x80:
            continue  # not a place a sequence begins: those are ASCII or a first byte
        pieces.append(seal(stdout[start:mark]))
        start = mark
    assert b"".join(pieces).decode("utf-8", "replace") == decoded


def test_sequences_far_into_long_coloured_output_are_found_either_way(search):
    from test_kitty import screen_packets

    coloured = "".join(f"{ESC}[3{n % 8}m{n:05d}{ESC}[0m ok\n" for n in range(3000)).encode()
    snaky = "".join(f"{ESC}[1mrow_{n}_of_many{ESC}[0m\n" for n in range(3000)).encode()
    other = tmux(f"{ESC}]52;c;aGVsbG8={BEL}").encode()
    data = [png(3, 3), png(4, 3), png(5, 3), png(6, 3)]
    chunks = kitty(data[1], size=8).split(ST.encode())[:-1]
    stdout = (
        coloured + kitty(data[0]) + snaky + b"\xe2\x82"
        + b"".join(tmux(chunk.decode() + ST).encode() + b"\xac" for chunk in chunks)
        + coloured + screen_packets(kitty(data[2], size=12).decode()).encode() + other
        + snaky + iterm2(data[3]) + SIXEL + coloured
    )
    text, images = from_bytes(stdout)
    assert images[:4] == data and len(images) == 5
    assert (text, images) == decoded_first(stdout)


# --- the processor contract ----------------------------------------------------------------


class Redact:
    """A processor written for text, before the image processors: still works."""

    @hookimpl
    def silica_result_processors(self, register):
        def process(draft):
            draft.text = draft.text.replace("secret", "[redacted]")
        register("redact", 50, process)


class Count:
    """A processor that works on bytes, after them: sees the output without the images."""

    seen: list[bytes] = []

    @hookimpl
    def silica_result_processors(self, register):
        def process(draft):
            Count.seen.append(bytes(draft.output))
            draft.output = draft.output.replace(b"tick", b"TICK")
        register("count", 150, process)


def test_text_and_byte_processors_of_other_plugins_work_together():
    pm = build_plugin_manager()
    pm.register(Redact())
    pm.register(Count())
    stdout = b"secret \xff tick " + kitty(png(5, 4), size=8) + SIXEL + b" \xc3"
    result = build_result(RawOutput(stdout, b"", 0, 0.1), pm)
    assert Count.seen == ["[redacted] \ufffd tick [sixel image] \ufffd".encode()]
    assert result.text == "[redacted] \ufffd TICK [sixel image] \ufffd"
    assert [(i.width, i.height) for i in result.images] == [(5, 4), (4, 6)]


def test_a_draft_decodes_its_bytes_once_and_only_when_text_is_read():
    draft = ResultDraft(output=b"caf\xc3\xa9 \xff")
    assert draft.output == b"caf\xc3\xa9 \xff"
    text = draft.text
    assert text == "caf\u00e9 \ufffd" and draft.text is text
    draft.text = "lone \udc80"
    assert draft.output == b"lone \xed\xb2\x80" and draft.errors == "surrogatepass"
    draft.output = draft.output.replace(b"lone", b"still")
    assert draft.text == "still \udc80"


def test_extract_kitty_reads_text_and_bytes_alike():
    stdout = b"\xe2\x82" + kitty(png()) + b"\xac"
    from_text = extract_kitty(stdout.decode("utf-8", "replace"))
    from_bytes_ = extract_kitty(stdout)
    assert from_text == from_bytes_ and from_text.text == "\ufffd\ufffd"
    assert extract_kitty(memoryview(stdout)) == from_bytes_
    assert cut_kitty(stdout).data == "\ufffd".encode() + b"\xac"


# --- a real tool ---------------------------------------------------------------------------


def test_a_tool_writing_images_and_bad_bytes_in_small_pieces(user_tools):
    image = Image.new("RGB", (40, 30), (0, 128, 255))
    out = io.BytesIO()
    image.save(out, "PNG")
    stream = (b"\xe2\x82" + kitty(out.getvalue(), size=100) + b"\xac caf\xc3" + iterm2(png(9, 9))
              + b"\xa9\n" + SIXEL + b"done\n")
    body = (
        "import sys, time\n"
        f"data = {stream!r}\n"
        "for i in range(0, len(data), 7):  # small writes, flushed: many pipe reads\n"
        "    sys.stdout.buffer.write(data[i:i + 7]); sys.stdout.buffer.flush()\n"
    )
    script_tool(user_tools, "draw.py", simple_spec("draw"), body=body)
    result = Toolbox().call("draw", {})
    assert not result.is_error
    assert result.text == "\ufffd\ufffd caf\ufffd\ufffd\n[sixel image]done\n"
    assert [(i.width, i.height) for i in result.images] == [(40, 30), (9, 9), (4, 6)]
