"""extract_kitty: images out of kitty graphics protocol sequences, the rest of the text kept."""

from __future__ import annotations

import base64
import io
import subprocess
import sys
import zlib

import pytest
from escape_streams import (
    BEL,
    ESC,
    FIXTURES,
    MARKER,
    PROPERTY,
    ST,
    b64,
    fixture,
    is_subsequence,
    png,
    tmux,
    without_markers,
)
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from silica.results.kitty import extract_kitty

PLACEHOLDER = "\U0010eeee"
ROW0, ROW1, COL0, COL1 = "\u0305", "\u030d", "\u0305", "\u030d"  # kitty's first diacritics
def apc(keys: str, payload: str = "", end: str = ST) -> str:
    return f"{ESC}_G{keys}{';' + payload if payload else ''}{end}"


def chunked(data: bytes, first: str, size: int = 8, repeat: str = "") -> list[str]:
    """``data`` cut into raw pieces of ``size`` bytes, each base64'd with its own padding."""
    pieces = [data[i : i + size] for i in range(0, len(data), size)]
    out = []
    for n, piece in enumerate(pieces):
        keys = first if n == 0 else repeat
        more = "m=1" if n < len(pieces) - 1 else "m=0"
        out.append(apc(f"{keys},{more}" if keys else more, b64(piece)))
    return out


def pixels(data: bytes) -> tuple[tuple[int, int], bytes]:
    image = Image.open(io.BytesIO(data))
    return image.size, image.convert("RGBA").tobytes()


# --- the plain cases -------------------------------------------------------------------


def test_a_png_comes_out_and_the_text_around_it_stays():
    data = png()
    result = extract_kitty(f"before\n{apc('a=T,f=100', b64(data))}after\n")
    assert result.text == "before\nafter\n"
    assert [(i.data, i.declared_type, i.source) for i in result.images] == [
        (data, "image/png", "kitty")
    ]


def test_text_without_escapes_comes_back_as_it_is():
    text = "plain output ; \\ _G = m=1 \u00e9\n" * 3
    result = extract_kitty(text)
    assert result.text == text and result.images == []


def test_bel_ends_a_sequence_as_st_does():
    data = png()
    result = extract_kitty(f"x{apc('a=T,f=100', b64(data), end=BEL)}y")
    assert result.text == "xy" and result.images[0].data == data


def test_the_default_action_is_transmit():
    result = extract_kitty(apc("f=100", b64(png())))
    assert len(result.images) == 1 and result.text == ""


def test_other_escape_sequences_stay_char_for_char():
    colours = f"{ESC}[31mred{ESC}[0m {ESC}]8;;https://x.org{ESC}\\link{ESC}]8;;{ESC}\\ "
    iterm = f"{ESC}]1337;File=inline=1:{b64(png())}{BEL}"
    apc_other = f"{ESC}_Xnot graphics{ST}"
    text = colours + iterm + apc_other + f"{ESC}P+q544e{ST}"
    result = extract_kitty(text + apc("a=T,f=100", b64(png())) + text)
    assert result.text == text + text
    assert len(result.images) == 1


# --- chunked transfers --------------------------------------------------------------------


def test_chunks_with_repeated_keys_and_their_own_padding_make_one_image():
    data = png(7, 5)
    parts = chunked(data, "a=T,i=31,f=100,q=2", size=10, repeat="a=T,i=31,f=100,q=2")
    assert sum(p.count("=") for p in parts) > 2 * len(parts)  # padding in the middle chunks
    result = extract_kitty("top\n" + "".join(parts) + "bottom")
    assert result.text == "top\nbottom"
    assert [i.data for i in result.images] == [data]


def test_only_the_first_chunk_defines_the_image():
    data = png(4, 4)
    parts = chunked(data, "a=T,f=100", size=20, repeat="f=24,s=9,v=9,o=z")
    result = extract_kitty("".join(parts))
    assert [i.data for i in result.images] == [data]


def test_text_between_chunks_stays_in_the_text():
    data = png(6, 6)
    parts = chunked(data, "a=T,f=100", size=16)
    between = [f"<{n}>" for n in range(len(parts))]
    result = extract_kitty("".join(p + t for p, t in zip(parts, between, strict=True)))
    assert result.text == "".join(between)
    assert [i.data for i in result.images] == [data]


def test_chunks_cut_anywhere_in_the_base64_still_join():
    data = png(5, 5)
    text = b64(data)
    cuts = [text[i : i + 7] for i in range(0, len(text), 7)]  # 7: not a multiple of 4
    seqs = [apc("a=T,f=100,m=1" if n == 0 else "m=1", c) for n, c in enumerate(cuts[:-1])]
    result = extract_kitty("".join(seqs) + apc("m=0", cuts[-1]))
    assert [i.data for i in result.images] == [data]


def test_a_header_chunk_with_no_payload_and_an_empty_last_chunk():
    data = png()
    stream = apc("a=T,f=100,m=1") + apc("m=1", b64(data)) + apc("m=0")
    assert [i.data for i in extract_kitty(stream).images] == [data]


def test_base64_wrapped_in_lines_as_gnu_base64_prints_it():
    data = png(9, 9)
    wrapped = base64.encodebytes(data).decode()  # a newline every 76 characters
    result = extract_kitty(apc("a=T,f=100", wrapped))
    assert [i.data for i in result.images] == [data]


@pytest.mark.parametrize("decoder", ["binascii", "pybase64"])
def test_the_fast_decoder_and_the_fallback_agree(decoder, monkeypatch):
    from silica.results import escapes

    if decoder == "pybase64":
        monkeypatch.setattr(escapes, "_pybase64", __import__("pybase64"))
    else:
        monkeypatch.setattr(escapes, "_pybase64", None)
    data = png(9, 9)
    wrapped = base64.encodebytes(data).decode()
    stream = (
        "".join(chunked(data, "a=T,f=100", size=10)) + apc("a=T,f=100", wrapped)
        + apc("a=T,f=100", "AB=C") + apc("a=T,f=100", "AAA\u00e9")
    )
    result = extract_kitty(stream)
    assert [i.data for i in result.images] == [data, data]
    assert result.text == "[kitty image dropped: invalid base64]" * 2


def test_a_bel_inside_a_chunk_ends_that_chunk_there():
    data = png(6, 6)
    cuts = [b64(data)[i : i + 16] for i in range(0, len(b64(data)), 16)]
    cut = cuts[3][:8] + BEL + cuts[3][8:]  # the rest of that chunk, and its ST, are text
    keys = ["a=T,f=100,m=1"] + ["m=1"] * (len(cuts) - 2) + ["m=0"]
    pieces = zip(keys, [*cuts[:3], cut, *cuts[4:]], strict=True)
    stream = "".join(apc(k, c) for k, c in pieces)
    result = extract_kitty(f"<{stream}>")
    assert result.text == f"<{cuts[3][8:]}{ST}>"
    taken = "".join(cuts[:3]) + cuts[3][:8] + "".join(cuts[4:])
    assert [i.data for i in result.images] == [base64.b64decode(taken)]


def test_chunks_cut_by_bel_again_and_again_still_take_linear_time(monkeypatch):
    from silica.results import kitty

    decoded_chars = []  # the work: base64 handed to the decoder, summed over the whole run
    real = kitty.strict_decode

    def counting(text):
        decoded_chars.append(len(text))
        return real(text)

    monkeypatch.setattr(kitty, "strict_decode", counting)
    good, cut = apc("m=1", "AAAA"), apc("m=1", f"AA{BEL}A")
    stream = apc("a=T,f=100,m=1", "AAAA") + (good + good + cut) * 4000 + apc("m=0", "AAAA")
    result = extract_kitty(stream)
    assert result.text == f"A{ST}" * 4000
    # Taking the same chunks again after each BEL would decode ~n^2/2 characters.
    assert sum(decoded_chars) <= len(stream)


# --- formats ---------------------------------------------------------------------------


@pytest.mark.parametrize("fmt, mode", [("24", "RGB"), ("32", "RGBA")])
def test_raw_pixels_come_out_as_a_png_of_the_same_pixels(fmt, mode):
    source = Image.open(io.BytesIO(png(5, 3, mode)))
    raw = source.tobytes()
    result = extract_kitty(apc(f"a=T,f={fmt},s=5,v=3", b64(raw)))
    (image,) = result.images
    assert image.data.startswith(b"\x89PNG\r\n\x1a\n") and image.declared_type == "image/png"
    decoded = Image.open(io.BytesIO(image.data))
    assert decoded.mode == mode and decoded.size == (5, 3)
    assert decoded.tobytes() == raw


def test_raw_pixels_default_to_rgba():
    raw = bytes(range(2 * 2 * 4))
    (image,) = extract_kitty(apc("a=T,s=2,v=2", b64(raw))).images
    assert Image.open(io.BytesIO(image.data)).tobytes() == raw


def test_raw_pixels_of_the_wrong_size_are_not_an_image():
    result = extract_kitty("a" + apc("a=T,f=24,s=4,v=4", b64(bytes(47))) + "b")
    assert result.images == []
    assert result.text == "a[kitty image dropped: 47 bytes of f=24 pixels do not make s=4 v=4]b"


def test_raw_pixels_without_a_size_are_not_an_image():
    result = extract_kitty(apc("a=T,f=32", b64(bytes(16))))
    assert result.images == [] and MARKER.fullmatch(result.text)
    assert "without a width and height" in result.text


def test_an_unknown_format_is_dropped_with_a_marker():
    result = extract_kitty(apc("a=T,f=7", b64(bytes(4))))
    assert result.text == "[kitty image dropped: unknown format f=7]"


@pytest.mark.parametrize("fmt", ["100", "32"])
def test_zlib_compressed_payloads_are_inflated(fmt):
    raw = png() if fmt == "100" else bytes(range(48))
    keys = f"a=T,f={fmt},o=z" + (",s=4,v=3" if fmt == "32" else "")
    squeezed = zlib.compress(raw)
    parts = chunked(squeezed, keys, size=11)
    (image,) = extract_kitty("".join(parts)).images
    if fmt == "100":
        assert image.data == raw
    else:
        assert Image.open(io.BytesIO(image.data)).tobytes() == raw


def test_bad_zlib_data_is_dropped_with_a_marker():
    result = extract_kitty(apc("a=T,f=100,o=z", b64(b"not zlib at all")))
    assert result.images == [] and result.text == "[kitty image dropped: bad zlib data (o=z)]"


def test_invalid_base64_drops_that_image_and_the_rest_goes_on():
    good = png()
    text = "1" + apc("a=T,f=100", "iVBO*&^%") + "2" + apc("a=T,f=100", b64(good)) + "3"
    result = extract_kitty(text)
    assert result.text == "1[kitty image dropped: invalid base64]23"
    assert [i.data for i in result.images] == [good]


def test_invalid_base64_in_a_middle_chunk_drops_the_whole_transfer_once():
    parts = chunked(png(6, 6), "a=T,f=100", size=12)
    parts[1] = apc("m=1", "!!!!")
    result = extract_kitty("<" + "".join(parts) + ">")
    assert result.text == "<[kitty image dropped: invalid base64]>" and result.images == []


def test_a_payload_over_64_mib_of_base64_is_dropped():
    huge = "A" * (64 * 1024 * 1024 + 4)
    result = extract_kitty("a" + apc("a=T,f=100", huge) + "b" + apc("a=T,f=100", b64(png())))
    assert result.text == "a[kitty image dropped: over 64 MiB of base64]b"
    assert len(result.images) == 1


def test_an_empty_transmission_is_dropped_as_no_data():
    assert extract_kitty(f"{ESC}_G{BEL}").text == "[kitty image dropped: no data]"


def test_past_a_hundred_markers_drops_are_counted_in_one():
    result = extract_kitty("x" + apc("a=T,f=100", "!!!!") * 250 + "y")
    assert result.text.count("[kitty image dropped: invalid base64]") == 100
    assert result.text.endswith("y[kitty: 150 more dropped, not marked one by one]")


# --- actions -----------------------------------------------------------------------------


def test_queries_placements_and_deletes_are_removed_and_are_not_images():
    stream = (
        "q" + apc("i=31,s=1,v=1,a=q,t=d,f=24", "AAAA") + "p" + apc("a=p,i=31,c=4,r=2")
        + "d" + apc("a=d,d=A") + "f" + apc("a=a,i=31,s=3") + "end"
    )
    result = extract_kitty(stream)
    assert result.text == "qpdfend" and result.images == []


def test_a_transfer_deleted_before_its_end_is_not_an_image():
    parts = chunked(png(6, 6), "a=t,i=9,f=100", size=12)
    stream = parts[0] + parts[1] + "mid" + apc("a=d,d=I,i=9") + "after"
    result = extract_kitty(stream)
    assert result.images == []
    assert result.text == "[kitty image dropped: deleted before its transfer finished]midafter"


def test_deleting_another_id_does_not_stop_a_transfer():
    data = png(6, 6)
    parts = chunked(data, "a=t,i=9,f=100", size=12)
    parts.insert(1, apc("a=d,d=i,i=10"))
    assert [i.data for i in extract_kitty("".join(parts)).images] == [data]


def test_the_same_id_sent_twice_unchanged_is_one_image():
    data = png()
    one = apc("a=T,i=5,f=100", b64(data))
    result = extract_kitty(f"a{one}b{one}c")
    assert result.text == "abc" and [i.data for i in result.images] == [data]


def test_the_same_id_sent_again_changed_keeps_the_later():
    first, second, other = png(3, 2), png(4, 2), png(5, 2)
    stream = (
        "a" + apc("a=T,i=5,f=100", b64(first)) + "b" + apc("a=T,f=100", b64(other))
        + "c" + apc("a=T,i=5,f=100", b64(second)) + "d"
    )
    result = extract_kitty(stream)
    assert [i.data for i in result.images] == [other, second]
    assert result.text == "a[kitty image i=5 dropped: sent again, changed]bcd"


@pytest.mark.parametrize("medium", ["f", "t", "s"])
def test_images_not_sent_inline_leave_a_marker_and_no_file_is_read(medium, tmp_path):
    path = tmp_path / "picture.png"
    path.write_bytes(png())
    stream = "see " + apc(f"a=T,f=100,t={medium}", b64(str(path).encode())) + " here"
    result = extract_kitty(stream)
    assert result.images == []
    assert result.text == f"see [image not transferred inline (kitty t={medium}): not shown] here"


def test_animation_frames_are_not_images():
    stream = apc("a=T,i=3,f=100", b64(png())) + apc("a=f,i=3,f=100", b64(png(4, 4)))
    result = extract_kitty(stream)
    assert len(result.images) == 1
    assert result.text == "[kitty animation frame: not shown]"


# --- cut off and unfinished ----------------------------------------------------------------


def test_a_sequence_cut_off_at_the_end_keeps_the_text_after_its_base64():
    data = b64(png())
    result = extract_kitty(f"before {ESC}_Ga=T,f=100;{data}\nthe next line\n")
    assert result.images == []
    assert result.text == "before [kitty image dropped: escape sequence cut off]\nthe next line\n"


def test_a_sequence_cut_off_by_another_escape_keeps_that_escape():
    result = extract_kitty(f"{ESC}_Ga=T,f=100;iVBORw0K{ESC}[1mbold{ESC}[0m")
    assert result.text == f"[kitty image dropped: escape sequence cut off]{ESC}[1mbold{ESC}[0m"


def test_a_bare_header_at_the_very_end():
    cut = extract_kitty(f"text{ESC}_G").text
    assert cut == "text[kitty image dropped: escape sequence cut off]"
    assert extract_kitty(f"text{ESC}_Ga=q,i=1").text == "text"


def test_a_transfer_still_open_at_the_end_is_dropped_where_it_began():
    parts = chunked(png(6, 6), "a=T,f=100", size=12)
    result = extract_kitty("head " + parts[0] + parts[1] + " tail")
    assert result.images == []
    assert result.text == (
        "head [kitty image dropped: transfer not finished at the end of the output] tail"
    )


# --- passthrough ---------------------------------------------------------------------------


def screen_split_st(inner: str) -> str:
    """The wrapping of ble.sh and vim-termcwd: each ST inside cut in two."""
    return f"{ESC}P{inner.replace(ST, ESC + ESC + chr(92) + ESC + 'P' + chr(92))}{ST}"


def screen_packets(inner: str, size: int = 200) -> str:
    """chafa's --passthrough screen: 200-byte pieces, each wrapped, cut blindly."""
    return "".join(f"{ESC}P{inner[i : i + size]}{ST}" for i in range(0, len(inner), size))


def test_tmux_passthrough_is_unwrapped():
    data = png(8, 8)
    parts = chunked(data, "a=T,f=100,q=2", size=30)
    stream = "in tmux\n" + "".join(tmux(p) for p in parts) + "done"
    result = extract_kitty(stream)
    assert result.text == "in tmux\ndone" and [i.data for i in result.images] == [data]


def test_one_tmux_wrapper_around_several_sequences_and_text():
    data = png()
    stream = tmux("x" + apc("a=T,f=100", b64(data)) + "y") + "z"
    result = extract_kitty(stream)
    assert result.text == "xyz" and [i.data for i in result.images] == [data]


def test_tmux_passthrough_of_something_else_is_left_alone():
    wrapped = tmux(f"{ESC}]52;c;aGVsbG8={BEL}")
    assert extract_kitty(f"a{wrapped}b").text == f"a{wrapped}b"


@pytest.mark.parametrize("wrap", [screen_split_st, screen_packets])
def test_gnu_screen_passthrough_is_unwrapped(wrap):
    data = png(10, 10)
    parts = chunked(data, "a=T,f=100", size=120)
    stream = "screen:\n" + "".join(wrap(p) for p in parts) + "\nend"
    result = extract_kitty(stream)
    assert result.text == "screen:\n\nend"
    assert [i.data for i in result.images] == [data]


def test_screen_packets_spanning_several_sequences():
    data = png(10, 10)
    stream = screen_packets("".join(chunked(data, "a=T,f=100", size=90)), size=200)
    result = extract_kitty("<" + stream + ">")
    assert result.text == "<>" and [i.data for i in result.images] == [data]


def test_sequences_and_passthrough_far_into_long_output():
    coloured = "".join(f"{ESC}[3{n % 8}m{n:05d}{ESC}[0m ok\n" for n in range(3000))
    snaky = "".join(f"{ESC}[1mrow_{n}_of_many{ESC}[0m\n" for n in range(3000))
    plain = "plain output line\n" * 3000
    other = tmux(f"{ESC}]52;c;aGVsbG8={BEL}")
    data = [png(3, 3), png(4, 3), png(5, 3)]
    stream = (
        coloured + apc("a=T,f=100", b64(data[0])) + plain
        + "".join(tmux(p) for p in chunked(data[1], "a=T,f=100", size=30)) + snaky
        + screen_packets("".join(chunked(data[2], "a=T,f=100", size=90))) + coloured + other
        + plain
    )
    result = extract_kitty(stream)
    assert result.text == coloured + plain + snaky + coloured + other + plain
    assert [i.data for i in result.images] == data
    alike = f"{ESC}_X{ST}_G{ESC}_ {ESC}P{ST}"
    assert extract_kitty(coloured + snaky + alike + other).text == coloured + snaky + alike + other


# --- unicode placeholders ---------------------------------------------------------------------


def test_unicode_placeholders_are_removed_with_their_diacritics():
    cells = (
        f"{PLACEHOLDER}{ROW0}{COL0}{PLACEHOLDER}{ROW0}{COL1}\n"
        f"{PLACEHOLDER}{ROW1}{COL0}{PLACEHOLDER}{ROW1}{COL1}\n"
    )
    stream = (
        apc("a=t,i=7,f=100,q=2", b64(png())) + apc("a=p,U=1,i=7,c=2,r=2")
        + f"{ESC}[38;5;7m" + cells + f"{ESC}[39m" + "caf\u00e9 e\u0301"
    )
    result = extract_kitty(stream)
    assert result.text == f"{ESC}[38;5;7m\n\n{ESC}[39mcaf\u00e9 e\u0301"
    assert len(result.images) == 1


def test_placeholders_alone_in_plain_text_are_removed():
    assert extract_kitty(f"a{PLACEHOLDER}{ROW1}{COL1}\u0306b{PLACEHOLDER}").text == "ab"


# --- real emitters, recorded (see tests/data/escapes/README.txt) --------------------------------


def source_pixels(name: str) -> bytes:
    return Image.open(FIXTURES / name).convert("RGBA").tobytes()


def test_chafa_kitty_raw_rgba_in_chunks():
    result = extract_kitty(fixture("chafa-kitty.out"))
    assert result.text == "before chafa\n\nafter chafa\n"
    (image,) = result.images
    decoded = Image.open(io.BytesIO(image.data)).convert("RGB")
    assert decoded.size == (32, 8)  # chafa scaled 16x8 to its 4x2 cells
    assert decoded.getpixel((0, 0)) == (255, 0, 0) and decoded.getpixel((31, 7)) == (0, 0, 255)


@pytest.mark.parametrize("name", ["timg-kitty.out", "timg-kitty-chunked.out"])
def test_timg_kitty_png(name):
    result = extract_kitty(fixture(name))
    assert result.text == f"before timg\n{ESC}[?25l\n{ESC}[?25hafter timg\n"
    (image,) = result.images
    size, got = pixels(image.data)
    if name == "timg-kitty.out":
        assert (size, got) == ((8, 6), source_pixels("gradient-8x6.png"))
    else:
        assert size == (360, 270)  # upscaled to 40x20 cells (-U)


@pytest.mark.parametrize(
    "name, source", [("term-image-kitty.out", "gradient-8x6.png"),
                     ("term-image-kitty-chunked.out", "noise-40x40.png")],
)
def test_term_image_kitty_raw_rgb_compressed(name, source):
    result = extract_kitty(fixture(name))
    assert result.text.startswith("before term-image\n")
    assert result.text.endswith("\nafter term-image\n")
    assert "_G" not in result.text and not MARKER.search(result.text)
    (image,) = result.images
    size, got = pixels(image.data)
    assert got == source_pixels(source)


def test_textual_image_transmit_then_virtual_placement_with_placeholders():
    result = extract_kitty(fixture("textual-image-tgp.out"))
    colour = f"{ESC}[38;2;20;237;223m"
    assert result.text == (
        f"before textual-image\n{colour}{ESC}[0m\n{colour}{ESC}[0m\nafter textual-image\n"
    )
    (image,) = result.images
    assert pixels(image.data) == ((40, 40), source_pixels("noise-40x40.png"))


# --- real emitters, live ---------------------------------------------------


def test_textual_image_live(tmp_path):
    path = tmp_path / "p.png"
    Image.open(FIXTURES / "noise-40x40.png").save(path)
    program = (FIXTURES / "capture.py").read_text()
    script = program.split('TEXTUAL_IMAGE = """', 1)[1].split('"""', 1)[0]
    out = subprocess.run([sys.executable, "-c", script, str(path), "4", "2"],
                         stdin=subprocess.DEVNULL, capture_output=True, check=True).stdout
    result = extract_kitty(out.decode("utf-8", errors="replace"))
    assert result.text.startswith("before textual-image\n")
    assert result.text.endswith("after textual-image\n") and PLACEHOLDER not in result.text
    (found,) = result.images
    assert pixels(found.data) == ((40, 40), source_pixels("noise-40x40.png"))


# --- properties ------------------------------------------------------------------------------

SOUP = st.lists(
    st.sampled_from([
        ESC, BEL, "_G", "_", "G", ";", "\\", "=", ",", "P", "tmux;", "a=T", "a=t", "a=q",
        "a=p", "a=d,d=i,i=1", "a=f", "m=1", "m=0", "f=100", "f=24", "f=32", "s=1", "v=1",
        "o=z", "i=1", "t=f", "U=1", "AAAA", "AAA=", "/w==", "iVBO", "+/", "]1337;File=",
        PLACEHOLDER, ROW0, "x", " ", "\n", "\ufffd",
    ]) | st.text(max_size=4),
    max_size=60,
).map("".join)

PLAIN = st.text(st.characters(blacklist_characters=f"{ESC}{BEL}{PLACEHOLDER}"), max_size=12)


@PROPERTY
@given(SOUP)
def test_any_text_never_raises_and_only_loses_characters(text):
    result = extract_kitty(text)
    assert is_subsequence(without_markers(result.text), text)
    assert all(i.source == "kitty" for i in result.images)


@st.composite
def sequences(draw) -> tuple[list[str], bytes, bool]:
    """One valid image transfer: its sequences, the bytes it carries, whether they are PNG."""
    width, height = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    kind = draw(st.sampled_from(["png", "rgb", "rgba", "zpng"]))
    if kind in ("rgb", "rgba"):
        mode = "RGB" if kind == "rgb" else "RGBA"
        raw = draw(st.binary(min_size=width * height * len(mode),
                             max_size=width * height * len(mode)))
        keys = f"a=T,f={24 if kind == 'rgb' else 32},s={width},v={height}"
        payload, expect = raw, raw
    else:
        data = png(width, height)
        keys = "a=T,f=100" + (",o=z" if kind == "zpng" else "")
        payload, expect = (zlib.compress(data) if kind == "zpng" else data), data
    size = draw(st.integers(3, 60))
    parts = chunked(payload, keys, size=size, repeat=draw(st.sampled_from(["", "a=T,q=2"])))
    end = draw(st.sampled_from([ST, BEL]))
    parts = [p[: -len(ST)] + end for p in parts]
    wrap = draw(st.sampled_from(["none", "tmux", "screen", "packets"]))
    if wrap == "tmux":
        parts = [tmux(p) for p in parts]
    elif wrap == "screen" and end == ST:
        parts = [screen_split_st(p) for p in parts]
    elif wrap == "packets":
        size = draw(st.integers(3, 50))  # the first piece holds ESC _ G whole
        parts = [screen_packets(p, size) for p in parts]
    return parts, expect, kind not in ("rgb", "rgba")


@PROPERTY
@given(st.lists(st.tuples(PLAIN, sequences(), st.lists(PLAIN, max_size=3)), max_size=4), PLAIN)
def test_plain_text_around_valid_images_comes_back_exactly(pieces, tail):
    stream, plain, expected = [], [], []
    for before, (parts, data, is_png), between in pieces:
        stream.append(before)
        plain.append(before)
        for n, part in enumerate(parts):
            stream.append(part)
            if n < len(between):
                stream.append(between[n])
                plain.append(between[n])
        expected.append((data, is_png))
    stream.append(tail)
    plain.append(tail)
    result = extract_kitty("".join(stream))
    assert result.text == "".join(plain)
    assert len(result.images) == len(pieces)
    for image, (data, is_png) in zip(result.images, expected, strict=True):
        if is_png:
            assert image.data == data
        else:
            assert Image.open(io.BytesIO(image.data)).tobytes() == data


def test_five_megabytes_of_mixed_output_go_through():
    data = png(64, 64)
    block = (
        f"{ESC}[32mline of output{ESC}[0m " * 20 + "\n"
        + "".join(chunked(data, "a=T,i=1,f=100", size=3000))
    )
    text = block * (5_000_000 // len(block) + 1)
    result = extract_kitty(text)
    assert len(result.images) == 1  # one id, the same bytes each time
    assert result.text.count("line of output") == text.count("line of output")
    cut = text + f"{ESC}_Ga=T,f=100;" + "A" * 5_000_000
    assert extract_kitty(cut).text.endswith("[kitty image dropped: escape sequence cut off]")
