"""read_file under attack: paths swapped while it opens them, symlinks that lead out, files
too big to scan. Every test runs with the kernel's ``openat2``, with the component walk, and
with the walk's fallback for systems without ``O_PATH``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from silica.config import ReadFileSettings, Settings
from silica.tools import safe_open
from silica.tools.read_file import read_file
from silica.tools.toolbox import Toolbox

MARKER = "OUTSIDE-SECRET-7f3a"
TEN_TB = 10 * 2**40


@pytest.fixture(params=["openat2", "walk", "direct"], autouse=True)
def opener(request, monkeypatch):
    """Each test with the kernel's walk (where it exists), with silica's own, and with the
    final open done as where there is no ``O_PATH`` or ``/proc`` (macOS, BSD)."""
    state = dict(safe_open._state)
    if request.param != "openat2":
        state["openat2"] = False
    if request.param == "direct":
        state["proc"] = False
    monkeypatch.setattr(safe_open, "_state", state)
    return request.param


@pytest.fixture
def outside(tmp_path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text(MARKER + "\n")
    return folder


def in_thread(call, bound: float = 120):
    """``call()`` in a daemon thread: a hang fails the test instead of stalling the run."""
    box: list = []
    worker = threading.Thread(target=lambda: box.append(call()), daemon=True)
    worker.start()
    worker.join(bound)
    assert not worker.is_alive(), "read_file did not finish"
    return box[0]


def reading() -> list[str]:
    """The threads that are inside read_file's code right now."""
    names = {t.ident: t.name for t in threading.enumerate()}
    ours = (str(Path(safe_open.__file__).parent / "read_file.py"), safe_open.__file__)
    found = []
    for ident, frame in sys._current_frames().items():
        while frame is not None:
            if frame.f_code.co_filename in ours:
                found.append(names.get(ident, str(ident)))
                break
            frame = frame.f_back
    return found


def refused(result, *words: str) -> str:
    assert result.is_error, result.text
    assert MARKER not in result.text
    for word in words:
        assert word in result.text, result.text
    return result.text


# -- the swap race -----------------------------------------------------------------------


def test_swapping_a_folder_for_a_symlink_never_reads_outside(project, outside):
    (project / "sub").mkdir()
    (project / "sub" / "secret.txt").write_text("inside\n")
    (project / "link").symlink_to(outside)
    stop = threading.Event()
    swaps = 0

    def swap() -> None:  # sub is the real folder, then the symlink out, then the folder
        nonlocal swaps
        while not stop.is_set():
            os.rename(project / "sub", project / "real")
            os.rename(project / "link", project / "sub")
            os.rename(project / "sub", project / "link")
            os.rename(project / "real", project / "sub")
            swaps += 1

    swapper = threading.Thread(target=swap, daemon=True)
    seen = {"outside": 0, "inside": 0, "refused": 0}
    tries = 0
    swapper.start()
    try:
        stop_at = time.monotonic() + 3  # bounds the run, asserts nothing about speed
        while tries < 20_000 and (tries < 2_000 or time.monotonic() < stop_at):
            text = read_file("sub/secret.txt", project).text
            tries += 1
            key = "outside" if MARKER in text else "inside" if "inside" in text else "refused"
            seen[key] += 1
    finally:
        stop.set()
        swapper.join()
    print(f"{tries} tries, {swaps} swaps: {seen}")
    assert seen["outside"] == 0, seen
    assert swaps > 0 and seen["inside"] > 0  # the race was live: both states were seen


# -- files too big to scan ---------------------------------------------------------------


@pytest.fixture
def sparse(tmp_path) -> Path:
    """A 10 TB sparse file (or the largest this machine takes): 2,000 short lines, then
    zeros; it takes no space. Tried in tmp_path, then the system's temp folders."""
    head = "".join(f"line {i:05d} of a very large file\n" for i in range(1, 2001)).encode()
    made: Path | None = None
    for folder in (tmp_path, Path(tempfile.gettempdir()), Path("/dev/shm")):
        path = Path(tempfile.mkstemp(dir=folder, suffix=".log")[1]) if folder != tmp_path \
            else tmp_path / "huge.log"
        path.write_bytes(head)
        try:
            os.truncate(path, TEN_TB)
            made = path
            break
        except OSError:
            if folder != tmp_path:
                path.unlink()
    if made is None:  # no filesystem here takes 10 TB: the largest tmp_path takes
        made, size = tmp_path / "huge.log", TEN_TB
        while True:
            size //= 2
            try:
                os.truncate(made, size)
                break
            except OSError:
                assert size > 2**30, "no folder takes a sparse file of even 1 GiB"
    yield made
    made.unlink(missing_ok=True)


def test_a_huge_sparse_file_gives_its_first_lines_without_a_total(sparse):
    text = in_thread(lambda: read_file(str(sparse), sparse.parent, offset=1, limit=10)).text
    lines = text.splitlines()
    assert lines[0] == "     1\tline 00001 of a very large file"
    assert lines[9] == "    10\tline 00010 of a very large file"
    assert lines[10] == f'[... more lines follow: read_file("{sparse}", offset=11)]'
    assert reading() == []  # nothing left counting lines


def test_a_huge_sparse_file_pages_to_its_end_and_stops_scanning(sparse):
    page = in_thread(lambda: read_file(str(sparse), sparse.parent)).text
    assert page.splitlines()[-1] == \
        f'[... more lines follow: read_file("{sparse}", offset=2001)]'
    assert "  2000\tline 02000" in page
    # Line 2001 is terabytes of zeros: its start, and no promise that anything follows.
    long = in_thread(lambda: read_file(str(sparse), sparse.parent, offset=2001)).text
    assert "line 2001 is longer than" in long
    assert long.endswith(f'[... more lines may follow: read_file("{sparse}", offset=2002)]')
    past = in_thread(lambda: read_file(str(sparse), sparse.parent, offset=2002))
    assert past.is_error and "past the first 256 MiB" in past.text
    assert "tail -n +2002" in past.text


def test_a_huge_sparse_file_through_the_toolbox_leaves_no_thread(sparse):
    box = Toolbox(cwd=sparse.parent, timeout=30)
    result = in_thread(lambda: box.call("read_file", {"path": sparse.name, "limit": 5}))
    assert result.text.endswith("offset=6)]") and "more lines follow" in result.text
    assert reading() == []


def test_the_process_exits_after_a_timed_out_read_of_a_huge_file(sparse, opener):
    script = textwrap.dedent(f"""
        from pathlib import Path
        from silica.tools import safe_open
        from silica.tools.toolbox import Toolbox
        if {opener != "openat2"}:
            safe_open._state["openat2"] = False
        if {opener == "direct"}:
            safe_open._state["proc"] = False
        box = Toolbox(cwd=Path({str(sparse.parent)!r}), timeout=0.05)
        for arguments in ({{"limit": 5}}, {{"offset": 2001}}, {{"offset": 2002}}, {{}}):
            result = box.call("read_file", {{"path": {sparse.name!r}, **arguments}})
            print(result.text[-120:].replace("\\n", " "))
        print("done")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("done")


# -- what a path may lead to -------------------------------------------------------------


def test_dot_dot_never_climbs_out(project, outside):
    for path in ("../outside/secret.txt", "sub/../../outside/secret.txt",
                 "./../outside/./secret.txt", "../project/../outside/secret.txt"):
        refused(read_file(path, project), "outside the workspace", "read_file.allowed_paths")
    (project / "up").symlink_to("../outside")  # a relative link that climbs out
    refused(read_file("up/secret.txt", project), f"resolves to {outside}/secret.txt")
    (project / "deep").mkdir()
    (project / "deep" / "up").symlink_to("../../outside/secret.txt")
    refused(read_file("deep/up", project), f"resolves to {outside}/secret.txt")


def test_dot_dot_inside_the_workspace_is_fine(project):
    (project / "a" / "b").mkdir(parents=True)
    (project / "top.txt").write_text("top\n")
    (project / "a" / "b" / "up").symlink_to("../../top.txt")
    assert read_file("a/b/../../top.txt", project).text == "     1\ttop"
    assert read_file("a/b/up", project).text == "     1\ttop"
    (project / "a" / "b" / "to_a").symlink_to("..")
    assert read_file("a/b/to_a/../top.txt", project).text == "     1\ttop"


def test_symlinks_inside_the_workspace_still_work(project):
    (project / "docs").mkdir()
    (project / "docs" / "guide.txt").write_text("guide\n")
    (project / "rel").symlink_to("docs/guide.txt")
    (project / "abs").symlink_to(project / "docs" / "guide.txt")  # absolute, but inside
    (project / "dir").symlink_to(project / "docs")
    (project / "chain").symlink_to("rel")
    for path in ("rel", "abs", "dir/guide.txt", "chain", str(project / "abs")):
        assert read_file(path, project).text == "     1\tguide", path
    # The workspace named through a symlink (as /tmp is on macOS) is still the workspace.
    alias = project.parent / "alias"
    alias.symlink_to(project)
    assert read_file(str(alias / "docs" / "guide.txt"), project).text == "     1\tguide"
    assert read_file("rel", alias).text == "     1\tguide"


def test_absolute_symlinks_out_are_refused(project, outside):
    (project / "abs").symlink_to(outside / "secret.txt")
    refused(read_file("abs", project), f"abs (which resolves to {outside}/secret.txt)")
    (project / "absdir").symlink_to(outside)
    refused(read_file("absdir/secret.txt", project), f"resolves to {outside}/secret.txt")
    (project / "passwd").symlink_to("/etc/passwd")
    text = refused(read_file("passwd", project), "resolves to /etc/passwd",
                   "read_file.allow_outside_workspace")
    assert "root:" not in text


def test_symlink_loops_end_with_an_error(project):
    (project / "a").symlink_to("b")
    (project / "b").symlink_to("a")
    (project / "self").symlink_to("self")
    (project / "spin").symlink_to(".")
    for path in ("a", "self", "a/x.txt", "spin/" * 50 + "a"):
        result = in_thread(lambda p=path: read_file(p, project))
        assert result.is_error and re.search(r"symbolic links", result.text), result.text


def test_forty_links_are_followed_and_forty_one_are_not(project):
    (project / "end.txt").write_text("end\n")
    (project / "l0").symlink_to("end.txt")
    for i in range(1, 41):
        (project / f"l{i}").symlink_to(f"l{i - 1}")
    assert read_file("l39", project).text == "     1\tend"  # 40 links
    assert "symbolic links" in read_file("l40", project).text


def test_a_fifo_a_directory_and_the_workspace_itself_are_refused(project):
    os.mkfifo(project / "pipe")
    (project / "via").symlink_to("pipe")
    (project / "src").mkdir()
    (project / "srclink").symlink_to("src")
    assert "FIFO" in refused(in_thread(lambda: read_file("pipe", project)))
    assert "FIFO" in refused(in_thread(lambda: read_file("via", project)))
    for path in ("src", "srclink", ".", "src/..", str(project)):
        refused(read_file(path, project), "is a directory")


def test_a_file_in_the_middle_of_a_path_says_so(project):
    (project / "a.txt").write_text("a\n")
    refused(read_file("a.txt/b.txt", project), "a part of the path is a file")
    refused(read_file("missing/b.txt", project), "does not exist")


def test_allowed_roots_are_reached_through_links_and_nothing_else(project, tmp_path, outside):
    shared = tmp_path / "shared"
    (shared / "docs").mkdir(parents=True)
    (shared / "docs" / "doc.txt").write_text("shared doc\n")
    (shared / "out").symlink_to(outside / "secret.txt")
    (shared / "back").symlink_to(project / "here.txt")
    (project / "here.txt").write_text("here\n")
    (project / "notes").symlink_to(shared / "docs")
    allowed = ReadFileSettings(allowed_paths=[Path("../shared")])
    assert read_file("notes/doc.txt", project, allowed).text == "     1\tshared doc"
    assert read_file(str(shared / "docs" / "doc.txt"), project, allowed).text == \
        "     1\tshared doc"
    assert read_file("../shared/back", project, allowed).text == "     1\there"
    refused(read_file("../shared/out", project, allowed), "outside the workspace")
    refused(read_file("../shared/../outside/secret.txt", project, allowed))
    # One file may be allowed by itself; its neighbours are not.
    (shared / "docs" / "other.txt").write_text(MARKER + "\n")
    one = ReadFileSettings(allowed_paths=[shared / "docs" / "doc.txt"])
    assert read_file(str(shared / "docs" / "doc.txt"), project, one).text == \
        "     1\tshared doc"
    refused(read_file(str(shared / "docs" / "other.txt"), project, one))
    refused(read_file("../shared/docs/doc.txt/../other.txt", project, one))
    # A path through a folder that is not allowed may still lead into the workspace.
    assert read_file(str(shared / "back"), project).text == "     1\there"


def test_allow_outside_workspace_reads_through_any_link(project, outside):
    (project / "abs").symlink_to(outside / "secret.txt")
    anywhere = Toolbox(settings=Settings(read_file=ReadFileSettings(
        allow_outside_workspace=True)))
    assert anywhere.call("read_file", {"path": "abs"}).text == f"     1\t{MARKER}"
    assert anywhere.call("read_file", {"path": "../outside/secret.txt"}).text == \
        f"     1\t{MARKER}"
