"""Packs never lose an install: commands at the same time, a command killed midway, a server
that trickles or lies. Real processes, real ``kill -9``, a real local HTTP server."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from test_packs import make_pack, tar_of
from test_packs_cli import silica

from silica import packs
from silica.packs.lock import LOCK_NAME
from silica.packs.safety import MAX_DOWNLOAD_BYTES


def lock_names(home: Path) -> list[str]:
    return sorted(json.loads((home / "packs" / LOCK_NAME).read_text())["packs"])


def leftovers(home: Path) -> list[str]:
    return sorted(n for n in os.listdir(home / "packs") if n.startswith((".staging-", ".lock-")))


def listed(home: Path) -> list[dict]:
    done = silica("packs", "list", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# -- commands at the same time -----------------------------------------------------------


def test_four_installs_at_once_all_stay_installed(tmp_path, home):
    names = ["alpha", "bravo", "charlie", "delta"]
    sources = [make_pack(tmp_path / n, name=n, bodies={f"{n}_tool": "print(1)"}) for n in names]
    env = {**os.environ, "COLUMNS": "500"}

    running = [subprocess.Popen([sys.executable, "-m", "silica", "packs", "install", str(s)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env) for s in sources]
    done = [(p.communicate(timeout=300), p.returncode) for p in running]

    for (out, err), code in done:
        assert code == 0 and out.startswith("Installed "), err
    assert [row["name"] for row in listed(home)] == names
    assert lock_names(home) == names
    assert leftovers(home) == []


# -- a command killed midway -------------------------------------------------------------

# Runs ``silica ARGS...`` with one step replaced by a pause; the test kills it there.
CRASHING = """
import os, sys, time
from pathlib import Path
import silica.packs.journal as journal

marker = Path(sys.argv[1])

def pause(*args, **kwargs):
    marker.write_text("paused")
    time.sleep(600)  # until the test kills this process with SIGKILL

{patch}

from silica.cli import main
sys.argv = ["silica", *sys.argv[2:]]
main()
"""

PAUSES = {
    "before the lock is written": "journal.write_lock = pause",
    "between the two renames": textwrap.dedent("""
        real_replace = os.replace
        def replace(src, dst, *args, **kwargs):
            if Path(src).name == journal.STAGED:  # the old version is already moved aside
                pause()
            return real_replace(src, dst, *args, **kwargs)
        os.replace = replace
        """),
}


def kill_when_paused(tmp_path: Path, pause: str, *args: str) -> None:
    """Run ``silica ARGS`` until it reaches ``pause``, then ``kill -9`` it."""
    marker = tmp_path / "paused"
    script = CRASHING.format(patch=PAUSES[pause])
    child = subprocess.Popen([sys.executable, "-c", script, str(marker), *args],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(6000):  # polls; the test never waits on a clock to decide anything
            if marker.exists() or child.poll() is not None:
                break
            time.sleep(0.05)
        assert marker.exists(), child.communicate()
    finally:
        child.kill()  # SIGKILL: no finally block, no cleanup runs in the child
        child.communicate()


@pytest.mark.parametrize(("command", "pause", "version", "then"), [
    ("install", "before the lock is written", "0.1.0", "team 0.1.0: up to date"),
    ("update", "before the lock is written", "0.2.0", "team 0.2.0: up to date"),
    ("update", "between the two renames", "0.1.0", "team 0.1.0 -> 0.2.0: changed greet"),
    ("remove", "before the lock is written", None, None),
])
def test_a_command_killed_midway_is_finished_or_undone_by_the_next(tmp_path, home, command,
                                                                   pause, version, then):
    src = make_pack(tmp_path / "src", bodies={"greet": "print('v1')"})
    if command != "install":
        packs.install(str(src))
    make_pack(src, version="0.2.0" if command == "update" else "0.1.0",
              bodies={"greet": "print('v2')" if command == "update" else "print('v1')"})
    args = {"install": ("install", str(src)), "update": ("update", "team"),
            "remove": ("remove", "team")}[command]

    kill_when_paused(tmp_path, pause, "packs", *args)
    assert [n for n in os.listdir(home / "packs") if n.startswith(".staging-")], \
        "the killed command left its work folder"

    rows = listed(home)
    if version is None:
        assert rows == [] and lock_names(home) == []
        assert not (home / "packs" / "team").exists()
    else:
        [row] = rows
        assert (row["name"], row["version"], row["edited"], row["problem"]) == \
            ("team", version, False, "")
        assert lock_names(home) == ["team"]
        done = silica("packs", "update", "team")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(then) and "edited" not in done.stderr
    assert leftovers(home) == []


def test_a_download_killed_midway_leaves_nothing_after_the_next_command(tmp_path, home,
                                                                         liar):
    packs.install(str(make_pack(tmp_path / "good", name="good")))
    child = subprocess.Popen([sys.executable, "-m", "silica", "packs", "install",
                              f"{liar.url}/trickle.tgz"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(6000):
            partial = list((home / "packs").glob(".staging-*/fetch/download"))
            if partial or child.poll() is not None:  # the download has begun
                break
            time.sleep(0.05)
        assert partial, child.communicate()
    finally:
        child.kill()
        child.communicate()

    assert [row["name"] for row in listed(home)] == ["good"]
    assert leftovers(home) == []


# -- servers that trickle or lie ---------------------------------------------------------


class Liar(http.server.BaseHTTPRequestHandler):
    """Serves ``server.archive`` under a path that says how to misbehave."""

    LENGTHS = {"words": ["lots"], "negative": ["-5"], "huge": [str(MAX_DOWNLOAD_BYTES + 1)],
               "two": ["10", "11"]}

    def log_message(self, *args):
        pass

    def do_GET(self):
        body = self.server.archive
        how = self.path.strip("/").split(".")[0]
        lengths = self.LENGTHS.get(how, [str(len(body) + (100 if how == "short" else 0))])
        try:
            self.send_response(200)
            for length in lengths:
                self.send_header("Content-Length", length)
            self.end_headers()
            if how == "trickle":
                for i in range(300):  # a byte every 0.1 s, for 30 s at most
                    self.wfile.write(body[i:i + 1])
                    self.wfile.flush()
                    time.sleep(0.1)
            else:
                self.wfile.write(body)
        except OSError:
            pass  # the client gave up: that is the point


@pytest.fixture
def liar(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Liar)
    server.archive = tar_of(make_pack(tmp_path / "served"), tmp_path / "served.tgz") \
        .read_bytes()
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("how", "reason"), [
    ("trickle", r"did not finish within 1 s \(the limit\); check your connection"),
    ("words", r"sent a bad Content-Length \('lots'\)"),
    ("negative", r"sent a bad Content-Length \('-5'\)"),
    ("two", r"sent a bad Content-Length \('10', '11'\)"),
    ("huge", r"is larger than 50 MiB \(the download limit\)"),
    ("short", r"ended after \d[\d,]* bytes, but the server announced \d[\d,]* "
              r"\(Content-Length\); try again"),
])
def test_a_server_that_trickles_or_lies_is_cut_off(tmp_path, home, liar, monkeypatch, how,
                                                   reason):
    monkeypatch.setattr("silica.packs.download.DOWNLOAD_DEADLINE", 1.0)
    with pytest.raises(packs.PackError, match=reason):
        packs.install(f"{liar.url}/{how}.tgz")
    assert not (home / "packs").exists()


def test_an_honest_server_still_works(tmp_path, home, liar):
    change = packs.install(f"{liar.url}/honest.tgz")
    assert change.entry.name == "team"


@pytest.mark.parametrize("how", ["trickle", "words"])
def test_the_command_says_so_without_a_traceback(tmp_path, home, liar, how):
    script = ("import sys, silica.packs.download as d; d.DOWNLOAD_DEADLINE = 1.0\n"
              "from silica.cli import main; sys.argv = ['silica', *sys.argv[1:]]; main()")
    env = {**os.environ, "COLUMNS": "500"}
    done = subprocess.run([sys.executable, "-c", script, "packs", "install",
                           f"{liar.url}/{how}.tgz"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr
    assert ("did not finish within 1 s" if how == "trickle" else "bad Content-Length") \
        in done.stderr
    assert not (home / "packs").exists()
