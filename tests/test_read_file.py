"""read_file: what a model gets back for the files it asks to read, and what it is refused."""

from __future__ import annotations

import asyncio
import io
import os
import re
import threading

from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from silica.config import ReadFileSettings, Settings
from silica.tools.builtin import ToolContext
from silica.tools.read_file import READ_FILE, read_file
from silica.tools.toolbox import Toolbox


def png_bytes(size=(40, 30), color=(200, 30, 60), fmt="PNG") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format=fmt)
    return buf.getvalue()


def lines_file(folder, name="notes.txt", count=10):
    path = folder / name
    path.write_text("".join(f"line {i}\n" for i in range(1, count + 1)))
    return path


def refused_quickly(call):
    """Run ``call`` in a thread: a FIFO or a device must never block it."""
    box: list = []
    worker = threading.Thread(target=lambda: box.append(call()), daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "read_file blocked"
    [result] = box
    assert result.is_error
    return result.text


# -- text --------------------------------------------------------------------------------


def test_lines_are_numbered_like_cat_n(project):
    (project / "a.txt").write_text("first\n\tindented\nlast")
    result = read_file("a.txt", project)
    assert not result.is_error
    assert result.text == "     1\tfirst\n     2\t\tindented\n     3\tlast"


def test_offset_and_limit_with_a_hint_to_read_on(project):
    lines_file(project, count=10)
    text = read_file("notes.txt", project, offset=3, limit=4).text
    assert text.splitlines() == ["     3\tline 3", "     4\tline 4", "     5\tline 5",
                                 "     6\tline 6",
                                 '[... 4 more lines: read_file("notes.txt", offset=7)]']
    last = read_file("notes.txt", project, offset=7, limit=4).text
    assert last.splitlines()[-1] == "    10\tline 10"  # the end: no hint


def test_offset_past_the_end_says_how_long_the_file_is(project):
    lines_file(project, count=3)
    result = read_file("notes.txt", project, offset=9)
    assert result.is_error and "has 3 lines" in result.text and "from 1 to 3" in result.text


def test_output_is_capped_in_bytes_with_the_read_on_hint(project):
    lines_file(project, count=1000)
    cap = ReadFileSettings(max_text_bytes=300)
    text = read_file("notes.txt", project, cap).text
    assert len(text.encode()) <= 300
    hint = re.fullmatch(r'\[\.\.\. (\d+) more lines: read_file\("notes.txt", offset=(\d+)\)\]',
                        text.splitlines()[-1])
    assert hint, text
    shown = text.splitlines()[:-1]
    assert shown[-1] == f"{int(hint[2]) - 1:>6}\tline {int(hint[2]) - 1}"
    assert int(hint[1]) == 1000 - len(shown)


def test_a_line_longer_than_the_cap_shows_its_start_and_reads_on_after_it(project):
    (project / "min.js").write_text("x" * 5000 + "\nnext\n")
    text = read_file("min.js", project, ReadFileSettings(max_text_bytes=1000)).text
    assert len(text.encode()) <= 1000
    assert text.startswith("     1\txxxx") and "line 1 is longer than" in text
    assert text.endswith('[... 1 more line: read_file("min.js", offset=2)]')


def test_undecodable_bytes_are_replaced_and_utf16_is_read(project):
    (project / "latin.txt").write_bytes(b"caf\xe9 ok\n")
    assert read_file("latin.txt", project).text == "     1\tcaf\ufffd ok"
    (project / "wide.txt").write_text("héllo\nwörld\n", encoding="utf-16")
    assert read_file("wide.txt", project).text == "     1\théllo\n     2\twörld"


def test_empty_and_binary_files_are_described(project):
    (project / "empty.txt").write_bytes(b"")
    assert "is empty" in read_file("empty.txt", project).text
    (project / "prog.bin").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(3000))
    result = read_file("prog.bin", project)
    assert not result.is_error and not result.images
    assert "binary file (3,008 bytes)" in result.text and "not shown" in result.text


def test_svg_and_pdf_are_not_images_the_model_can_see(project):
    (project / "logo.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"></svg>\n')
    svg = read_file("logo.svg", project)
    assert not svg.images and "not an image the model can see" in svg.text
    assert "     1\t<svg" in svg.text  # its source is text the model can read
    (project / "paper.pdf").write_bytes(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n" + bytes(100))
    pdf = read_file("paper.pdf", project)
    assert not pdf.images and "not an image the model can see" in pdf.text


def test_text_that_starts_like_a_weak_image_magic_is_still_text(project):
    (project / "cars.txt").write_text("BMW and Audi\nP1 is the first priority\n")
    (project / "p1.txt").write_text("P1 is the first priority\n")
    assert read_file("cars.txt", project).text.startswith("     1\tBMW and Audi")
    assert read_file("p1.txt", project).text == "     1\tP1 is the first priority"


@settings(max_examples=80, deadline=None)
@given(lines=st.lists(st.text(st.characters(blacklist_categories=["Cs"],
                                            blacklist_characters="\n\r\x00"),
                              max_size=30).map("> {}".format),  # no magic bytes at the start
                      max_size=60),
       limit=st.integers(1, 15), cap=st.integers(300, 1500))
def test_following_the_hints_reads_every_line_once(tmp_path_factory, lines, limit, cap):
    folder = tmp_path_factory.mktemp("pages")
    (folder / "f.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    got: list[str] = []
    offset = 1
    while True:
        page = read_file("f.txt", folder, ReadFileSettings(max_text_bytes=cap), offset=offset,
                         limit=limit).text
        assert len(page.encode()) <= cap
        if not lines:
            assert "is empty" in page
            break
        *entries, last = page.split("\n")
        hint = re.fullmatch(r'\[\.\.\. (\d+) more lines?: read_file\("f.txt", offset=(\d+)\)\]',
                            last)
        entries = entries if hint else [*entries, last]
        assert 1 <= len(entries) <= limit
        for entry in entries:
            number, _, text = entry.partition("\t")
            assert int(number) == len(got) + 1
            got.append(text)
        if not hint:
            break
        assert (int(hint[1]), int(hint[2])) == (len(lines) - len(got), len(got) + 1)
        offset = int(hint[2])
    assert got == lines


# -- images ------------------------------------------------------------------------------


def test_an_image_is_known_by_its_bytes_not_its_name(project):
    (project / "photo.txt").write_bytes(png_bytes())
    result = Toolbox().call("read_file", {"path": "photo.txt"})
    assert not result.is_error, result.text
    [image] = result.images
    assert (image.media_type, image.width, image.height) == ("image/png", 40, 30)
    assert "PNG image" in result.text
    (project / "notes.png").write_text("just text\n")
    text = Toolbox().call("read_file", {"path": "notes.png"})
    assert not text.images and text.text == "     1\tjust text"


def test_a_bmp_comes_back_converted_through_the_prepare_image_hook(project):
    (project / "scan.bmp").write_bytes(png_bytes((64, 48), fmt="BMP"))
    [image] = Toolbox().call("read_file", {"path": "scan.bmp"}).images
    assert image.media_type == "image/png" and (image.width, image.height) == (64, 48)
    with Image.open(io.BytesIO(image.data)) as img:
        assert img.convert("RGB").getpixel((10, 10)) == (200, 30, 60)  # palette or not


def test_a_large_image_is_fitted_to_the_toolbox_limits(project):
    (project / "wide.png").write_bytes(png_bytes((3000, 1000)))
    [image] = Toolbox().call("read_file", {"path": "wide.png"}).images
    assert (image.width, image.height) == (1568, 522)


def test_an_image_over_max_image_bytes_is_refused(project):
    path = project / "huge.png"
    path.write_bytes(png_bytes())
    with open(path, "r+b") as f:
        f.truncate(25 * 1024 * 1024)  # a PNG header, then 25 MiB: sparse, cheap
    result = Toolbox().call("read_file", {"path": "huge.png"})
    assert result.is_error and not result.images
    assert "26,214,400 bytes" in result.text and "read_file.max_image_bytes" in result.text


def test_the_unit_result_holds_the_raw_bytes(project):
    data = png_bytes(fmt="GIF")
    (project / "anim").write_bytes(data)
    result = read_file("anim", project)
    assert [(i.media_type, i.data) for i in result.images] == [("image/gif", data)]


# -- what is refused ---------------------------------------------------------------------


def test_missing_file_and_bad_arguments(project):
    missing = read_file("nope.txt", project)
    assert missing.is_error and "nope.txt does not exist" in missing.text
    box = Toolbox()
    assert "needs the parameter 'path'" in box.call("read_file", {}).text
    assert "no parameter 'colour'" in box.call("read_file", {"path": "x", "colour": 1}).text
    bad = box.call("read_file", {"path": "x", "offset": 0})
    assert bad.is_error and "'offset' must be a whole number" in bad.text


def test_a_directory_is_refused(project):
    (project / "src").mkdir()
    result = read_file("src", project)
    assert result.is_error and "src is a directory" in result.text


def test_a_fifo_is_refused_without_hanging(project):
    os.mkfifo(project / "pipe")
    text = refused_quickly(lambda: Toolbox().call("read_file", {"path": "pipe"}))
    assert "FIFO" in text


def test_a_device_is_refused_without_hanging(project):
    allow = ReadFileSettings(allow_outside_workspace=True)
    text = refused_quickly(lambda: read_file("/dev/zero", project, allow))
    assert "character device" in text
    (project / "null").symlink_to("/dev/null")
    assert "character device" in refused_quickly(lambda: read_file("null", project, allow))


def test_a_symlink_out_of_the_workspace_is_refused(project, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("password\n")
    (project / "link.txt").symlink_to(secret)
    result = Toolbox().call("read_file", {"path": "link.txt"})
    assert result.is_error and "password" not in result.text
    assert f"resolves to {secret}" in result.text
    assert "read_file.allowed_paths" in result.text
    assert "read_file.allow_outside_workspace" in result.text


def test_dot_dot_and_absolute_paths_out_of_the_workspace_are_refused(project, tmp_path):
    (tmp_path / "other.txt").write_text("elsewhere\n")
    assert read_file("../other.txt", project).is_error
    assert read_file(str(tmp_path / "other.txt"), project).is_error
    (project / "inside.txt").write_text("here\n")
    assert read_file(str(project / "sub" / ".." / "inside.txt"), project).text == \
        "     1\there"


def test_outside_reads_allowed_by_the_settings(project, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "doc.txt").write_text("shared doc\n")
    (tmp_path / "private.txt").write_text("private\n")
    anywhere = Settings(read_file=ReadFileSettings(allow_outside_workspace=True))
    box = Toolbox(settings=anywhere)
    assert box.call("read_file", {"path": "../private.txt"}).text == "     1\tprivate"
    listed = Toolbox(settings=Settings(read_file=ReadFileSettings(allowed_paths=[shared])))
    assert listed.call("read_file", {"path": "../shared/doc.txt"}).text == "     1\tshared doc"
    assert listed.call("read_file", {"path": "../private.txt"}).is_error


def test_the_builtin_run_reads_in_the_context_workdir(project, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.txt").write_text("from other\n")
    context = ToolContext(workdir=other)
    result = asyncio.run(READ_FILE.run({"path": "a.txt"}, context))
    assert result.text == "     1\tfrom other"


# -- bounded work ------------------------------------------------------------------------


def test_lines_left_are_counted_only_when_cheap(project, monkeypatch):
    from silica.tools import read_file as module

    lines_file(project, count=1000)
    monkeypatch.setattr(module, "COUNT_BYTES", 100)  # the rest of the file is "too big"
    text = read_file("notes.txt", project, offset=3, limit=4).text
    assert text.splitlines()[-1] == '[... more lines follow: read_file("notes.txt", offset=7)]'
    # Near the end the rest fits the budget again, and the total comes back.
    text = read_file("notes.txt", project, offset=990, limit=4).text
    assert text.splitlines()[-1] == '[... 7 more lines: read_file("notes.txt", offset=994)]'


def test_hints_without_totals_still_read_every_line_once(project, monkeypatch):
    from silica.tools import read_file as module

    monkeypatch.setattr(module, "COUNT_BYTES", 50)
    lines = [f"line {i} " + "x" * (i % 7 * 40) for i in range(1, 120)]
    lines[40] = "y" * 2000  # over the cap: its start only, then on to the next line
    (project / "f.txt").write_text("".join(line + "\n" for line in lines))
    got: list[str] = []
    offset = 1
    while True:
        page = read_file("f.txt", project, ReadFileSettings(max_text_bytes=600),
                         offset=offset, limit=9).text
        assert len(page.encode()) <= 600
        *entries, last = page.split("\n")
        hint = re.fullmatch(r'\[\.\.\. (?:more lines (?:may )?follow|\d+ more lines?): '
                            r'read_file\("f.txt", offset=(\d+)\)\]', last)
        for entry in entries if hint else [*entries, last]:
            if entry and entry[0] != "[":
                number, _, text = entry.partition("\t")
                assert int(number) == len(got) + 1
                got.append(text)
        if not hint:
            break
        offset = int(hint[1])
    assert got[:40] == lines[:40] and got[41:] == lines[41:]
    assert lines[40].startswith(got[40]) and len(got[40]) < 600


def test_an_offset_too_far_into_a_big_file_suggests_a_shell_tool(project, monkeypatch):
    from silica.tools import read_file as module

    lines_file(project, count=1000)
    monkeypatch.setattr(module, "SKIP_BYTES", 1000)  # reached after about 110 lines
    assert read_file("notes.txt", project, offset=100).text.startswith("   100\tline 100")
    far = read_file("notes.txt", project, offset=500)
    assert far.is_error and "past the first" in far.text and "tail -n +500" in far.text
