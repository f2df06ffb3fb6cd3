"""extract_iterm2: images out of iTerm2 inline image sequences, the rest of the text kept."""

from __future__ import annotations

import io

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
)
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from silica.results.iterm2 import extract_iterm2


def osc(body: str, end: str = BEL) -> str:
    return f"{ESC}]1337;{body}{end}"


def file(data: bytes, args: str = "inline=1", end: str = BEL) -> str:
    return osc(f"File={args}:{b64(data)}", end)


def multipart(data: bytes, args: str = "inline=1", size: int = 10) -> list[str]:
    text = b64(data)
    parts = [osc(f"FilePart={text[i : i + size]}") for i in range(0, len(text), size)]
    return [osc(f"MultipartFile={args}"), *parts, osc("FileEnd")]


# --- single-sequence files ---------------------------------------------------------------


def test_an_inline_image_comes_out_and_the_text_around_it_stays():
    data = png()
    result = extract_iterm2(f"before\n{file(data)}\nafter")
    assert result.text == "before\n\nafter"
    assert [(i.data, i.declared_type, i.source) for i in result.images] == [
        (data, None, "iterm2")
    ]


def test_st_ends_a_sequence_as_bel_does():
    data = png()
    result = extract_iterm2("a" + file(data, end=ST) + "b")
    assert result.text == "ab" and [i.data for i in result.images] == [data]


def test_all_the_arguments_are_read_and_none_of_them_stays():
    data = png()
    name = b64(b"chart.png")
    args = f"name={name};size={len(data)};width=40%;height=auto;preserveAspectRatio=1;inline=1"
    result = extract_iterm2(file(data, args))
    assert result.text == "" and [i.data for i in result.images] == [data]


def test_a_download_is_kept_only_when_its_bytes_are_an_image():
    data = png()
    name = b64(b"notes.txt")
    stream = (
        "1" + file(data, "size=99") + "2" + file(data, "inline=0") + "3"
        + file(b"just some text\n", f"name={name};inline=0") + "4"
    )
    result = extract_iterm2(stream)
    assert [i.data for i in result.images] == [data, data]
    assert result.text == "123[iterm2 file download notes.txt dropped: not an image, 15 bytes]4"


def test_an_inline_file_is_passed_on_whatever_its_bytes():
    (image,) = extract_iterm2(file(b"%PDF-1.7 ...")).images
    assert image.data == b"%PDF-1.7 ..." and image.declared_type is None


def test_invalid_base64_drops_that_file_and_the_rest_goes_on():
    data = png()
    stream = "a" + osc("File=inline=1:iV*BO**") + "b" + file(data) + "c"
    result = extract_iterm2(stream)
    assert result.text == "a[iterm2 image dropped: invalid base64]bc"
    assert [i.data for i in result.images] == [data]


def test_a_file_with_no_data_is_dropped():
    assert extract_iterm2(osc("File=inline=1:")).text == "[iterm2 image dropped: no data]"
    assert extract_iterm2(osc("File=inline=1")).text == "[iterm2 image dropped: no data]"


def test_a_payload_over_64_mib_of_base64_is_dropped():
    huge = "A" * (64 * 1024 * 1024 + 4)
    result = extract_iterm2("a" + osc(f"File=inline=1:{huge}") + "b")
    assert result.text == "a[iterm2 image dropped: over 64 MiB of base64]b"
    assert result.images == []


# --- multipart -------------------------------------------------------------------------------


def test_a_multipart_file_is_joined_from_its_parts():
    data = png(9, 7)
    parts = multipart(data, size=13)  # 13: parts cut anywhere in the base64
    between = [f"({n})" for n in range(len(parts))]
    stream = "".join(p + t for p, t in zip(parts, between, strict=True))
    result = extract_iterm2(stream)
    assert result.text == "".join(between)
    assert [i.data for i in result.images] == [data]


def test_parts_each_with_their_own_padding():
    data = png(5, 5)
    pieces = [data[i : i + 7] for i in range(0, len(data), 7)]
    stream = (
        osc("MultipartFile=inline=1")
        + "".join(osc(f"FilePart={b64(p)}") for p in pieces)
        + osc("FileEnd")
    )
    assert [i.data for i in extract_iterm2(stream).images] == [data]


def test_a_multipart_file_unfinished_at_the_end_is_dropped_where_it_began():
    parts = multipart(png())
    result = extract_iterm2("x" + "".join(parts[:-1]) + "y")
    assert result.images == []
    assert result.text == "x[iterm2 image dropped: transfer not finished at the end of the output]y"


def test_parts_without_a_start_leave_one_marker():
    stream = "a" + osc("FilePart=AAAA") + osc("FilePart=AAAA") + osc("FileEnd") + "b"
    result = extract_iterm2(stream)
    assert result.text == "a[iterm2 image dropped: file part without its start]b"


def test_a_new_multipart_file_interrupts_the_unfinished_one():
    data = png()
    first = multipart(png(4, 4))
    stream = "".join(first[:2]) + "|" + "".join(multipart(data))
    result = extract_iterm2(stream)
    assert [i.data for i in result.images] == [data]
    assert result.text == "[iterm2 image dropped: interrupted by another file]|"


def test_a_download_in_parts_that_is_not_an_image():
    stream = "".join(multipart(b"a,b\n1,2\n", f"name={b64(b'data.csv')};inline=0"))
    result = extract_iterm2(stream)
    assert result.text == "[iterm2 file download data.csv dropped: not an image, 8 bytes]"


# --- cut off ---------------------------------------------------------------------------------


def test_a_sequence_cut_off_at_the_end_keeps_the_text_after_its_base64():
    result = extract_iterm2(f"before {ESC}]1337;File=inline=1:{b64(png())}\nnext line\n")
    assert result.images == []
    assert result.text == "before [iterm2 image dropped: escape sequence cut off]\nnext line\n"


def test_a_sequence_cut_off_by_another_escape_keeps_that_escape():
    result = extract_iterm2(f"{ESC}]1337;File=inline=1:iVBORw0K{ESC}[1mbold")
    assert result.text == f"[iterm2 image dropped: escape sequence cut off]{ESC}[1mbold"


def test_a_cut_off_file_end_still_ends_the_file():
    data = png()
    parts = multipart(data)
    stream = "".join(parts[:-1]) + f"{ESC}]1337;FileEnd\nmore"
    result = extract_iterm2(stream)
    assert result.text == "\nmore" and [i.data for i in result.images] == [data]


# --- what is not ours ------------------------------------------------------------------------


def test_other_osc_1337_commands_and_kitty_sequences_are_left_alone():
    text = (
        f"{ESC}]1337;SetUserVar=foo=YmFy{BEL}{ESC}]1337;CurrentDir=/tmp{ST}"
        f"{ESC}]1337;SetMark{BEL}{ESC}_Ga=T,f=100;{b64(png())}{ST}{ESC}[4mu{ESC}[0m"
    )
    result = extract_iterm2(text + file(png()) + text)
    assert result.text == text + text and len(result.images) == 1


def test_tmux_passthrough_is_unwrapped():
    data = png(7, 7)
    stream = "in tmux\n" + "".join(tmux(p) for p in multipart(data)) + tmux(file(data)) + "!"
    result = extract_iterm2(stream)
    assert result.text == "in tmux\n!" and [i.data for i in result.images] == [data, data]


def test_tmux_passthrough_of_something_else_is_left_alone():
    wrapped = tmux(f"{ESC}]1337;SetMark{BEL}")
    assert extract_iterm2(f"a{wrapped}b").text == f"a{wrapped}b"


def test_gnu_screen_passthrough_is_unwrapped():
    data = png(10, 10)
    inner = file(data, end=ST)
    packets = "".join(f"{ESC}P{inner[i : i + 200]}{ST}" for i in range(0, len(inner), 200))
    result = extract_iterm2("screen " + packets + " done")
    assert result.text == "screen  done" and [i.data for i in result.images] == [data]


def test_files_far_into_long_coloured_output():
    coloured = "".join(f"{ESC}[3{n % 8}m{n:05d}{ESC}[0m ok\n" for n in range(3000))
    data = [png(3, 3), png(4, 3)]
    stream = (
        coloured + file(data[0]) + coloured + "".join(tmux(p) for p in multipart(data[1]))
        + coloured + osc("SetMark")
    )
    result = extract_iterm2(stream)
    assert result.text == coloured * 3 + osc("SetMark")
    assert [i.data for i in result.images] == data


# --- real emitters, recorded (see tests/data/escapes/README.txt) --------------------------------


def decoded(data: bytes) -> tuple[str | None, tuple[int, int], list]:
    image = Image.open(io.BytesIO(data))
    return image.format, image.size, image.convert("RGB").tobytes()


def source_pixels(name: str) -> list:
    return Image.open(FIXTURES / name).convert("RGB").tobytes()


def test_chafa_iterm_sends_a_tiff():
    result = extract_iterm2(fixture("chafa-iterm.out"))
    assert result.text == "before chafa\n\nafter chafa\n"
    (image,) = result.images
    fmt, size, got = decoded(image.data)
    assert (fmt, size) == ("TIFF", (32, 8))  # chafa scaled 16x8 to its 4x2 cells
    assert tuple(got[:3]) == (255, 0, 0) and tuple(got[-3:]) == (0, 0, 255)


def test_timg_iterm2_png():
    result = extract_iterm2(fixture("timg-iterm2.out"))
    assert result.text == f"before timg\n{ESC}[?25l\n{ESC}[?25hafter timg\n"
    (image,) = result.images
    assert decoded(image.data) == ("PNG", (8, 6), source_pixels("gradient-8x6.png"))


def test_term_image_iterm2_png():
    text = fixture("term-image-iterm2.out")
    result = extract_iterm2(text)
    assert result.text.startswith("before term-image\n")
    assert result.text.endswith("\nafter term-image\n")
    assert result.text == text.replace(text[text.index(f"{ESC}]1337") : text.index(ST) + 2], "")
    (image,) = result.images
    assert decoded(image.data) == ("PNG", (8, 6), source_pixels("gradient-8x6.png"))


# --- properties ------------------------------------------------------------------------------

SOUP = st.lists(
    st.sampled_from([
        ESC, BEL, "]", "1337;", "]1337;", "File=", "MultipartFile=", "FilePart=", "FileEnd",
        "inline=1", "inline=0", "name=", ":", ";", "=", "\\", "P", "tmux;", "AAAA", "AA==",
        "iVBO", "/+", "_G", "x", " ", "\n", "\ufffd",
    ]) | st.text(max_size=4),
    max_size=60,
).map("".join)

PLAIN = st.text(st.characters(blacklist_characters=f"{ESC}{BEL}"), max_size=12)


@PROPERTY
@given(SOUP)
def test_any_text_never_raises_and_only_loses_characters(text):
    result = extract_iterm2(text)
    assert is_subsequence(MARKER.sub("", result.text), text)
    assert all(i.source == "iterm2" and i.declared_type is None for i in result.images)


@st.composite
def transfers(draw) -> tuple[list[str], bytes]:
    data = png(draw(st.integers(1, 6)), draw(st.integers(1, 6)))
    args = draw(st.sampled_from(["inline=1", "", "inline=0;size=9", f"name={b64(b'x.png')}"]))
    end = draw(st.sampled_from([BEL, ST]))
    if draw(st.booleans()):
        parts = [file(data, args, end)]
    else:
        parts = multipart(data, args, draw(st.integers(1, 40)))
    if draw(st.booleans()):
        parts = [tmux(p) for p in parts]
    return parts, data


@PROPERTY
@given(st.lists(st.tuples(PLAIN, transfers(), st.lists(PLAIN, max_size=3)), max_size=4), PLAIN)
def test_plain_text_around_valid_images_comes_back_exactly(pieces, tail):
    stream, plain, expected = [], [], []
    for before, (parts, data), between in pieces:
        stream.append(before)
        plain.append(before)
        for n, part in enumerate(parts):
            stream.append(part)
            if n < len(between):
                stream.append(between[n])
                plain.append(between[n])
        expected.append(data)
    stream.append(tail)
    plain.append(tail)
    result = extract_iterm2("".join(stream))
    assert result.text == "".join(plain)
    assert [i.data for i in result.images] == expected


def test_five_megabytes_of_mixed_output_go_through():
    block = f"{ESC}[32mline of output{ESC}[0m " * 20 + "\n" + file(png(32, 32))
    text = block * (5_000_000 // len(block) + 1)
    result = extract_iterm2(text)
    assert len(result.images) == text.count("File=")
    assert result.text.count("line of output") == text.count("line of output")
    cut = text + f"{ESC}]1337;File=inline=1:" + "A" * 5_000_000
    assert extract_iterm2(cut).text.endswith("[iterm2 image dropped: escape sequence cut off]")
