"""The session files of earlier versions move into the database once, losing nothing: a real
session folder made by the last silica that kept JSON files (``silica ask`` with a tool's
image, a person's image, a bad file), then read by this one through the real commands."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image
from serve_daemon import picture_tool
from wire import anthropic_server, text, tool_call

REPO = Path(__file__).resolve().parent.parent
FILES_ERA = "24e5602"  # the last revision that kept each session as <home>/sessions/<id>.json


def png(color: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), color).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def files_era(tmp_path_factory) -> Path:
    """The source of the silica of ``FILES_ERA``, to run with ``PYTHONPATH``."""
    tree = tmp_path_factory.mktemp("files-era")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", FILES_ERA, "silica"],
                             capture_output=True)
    if archive.returncode:
        pytest.fail(f"git cannot give revision {FILES_ERA} ({archive.stderr.decode()[:200]}): "
                    "this test runs that silica, so it needs the repository's history (a "
                    "full clone, not a shallow one)")
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def run(*args: str, env: dict[str, str], source: Path | None = None,
        ) -> subprocess.CompletedProcess:
    env = {**env, **({"PYTHONPATH": str(source)} if source else {})}
    if source is None:
        env.pop("PYTHONPATH", None)
    # run where no silica source is: ``-m`` puts the working folder before PYTHONPATH
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          env=env, timeout=300, stdin=subprocess.DEVNULL,
                          cwd=Path(env["SILICA_HOME"]).parent)


@pytest.fixture(scope="module")
def old_home(tmp_path_factory, files_era) -> tuple[Path, dict[str, bytes], dict]:
    """A home whose sessions the files-era silica saved: two ``ask`` runs (a tool's image;
    a person's image), and a file that is not a session. Returns the home, each file's
    bytes, and what the files-era ``sessions list/show --json`` printed."""
    root = tmp_path_factory.mktemp("migration")
    home, work = root / "home", root / "work"
    (work / ".git").mkdir(parents=True)
    picture_tool(home / "tools", png((200, 30, 30)), label="shot")
    (home / "config.toml").write_text('[sandbox]\nmode = "off"\n')
    photo = root / "photo.png"
    photo.write_bytes(png((10, 160, 90)))
    with anthropic_server([tool_call("picture", {"label": "a"}), text("A red box."),
                           text("A green one.")]) as srv:
        env = {**os.environ, **srv.env, "SILICA_HOME": str(home), "SILICA_RESIDENT": "0"}
        for args in (["ask", "draw a box"], ["ask", "and this? ünïcode", "--image", str(photo)]):
            done = subprocess.run([sys.executable, "-m", "silica", *args], cwd=work,
                                  env={**env, "PYTHONPATH": str(files_era)},
                                  capture_output=True, timeout=300)
            assert done.returncode == 0, done.stderr.decode()
    (home / "sessions" / "broken.json").write_text('{"format": "silica-session", "vers')
    files = {p.stem: p.read_bytes() for p in (home / "sessions").glob("*.json")}
    assert len(files) == 3
    listed = json.loads(run("sessions", "list", "--json", env=env, source=files_era).stdout)
    shown = {s["id"]: run("sessions", "show", s["id"], "--json", env=env,
                          source=files_era).stdout for s in listed if not s["problem"]}
    return home, files, {"list": listed, "show": shown, "env": env}


def fresh_copy(old_home, tmp_path) -> tuple[Path, dict[str, str]]:
    home, _files, seen = old_home
    copy = tmp_path / "home"
    shutil.copytree(home, copy)
    return copy, {**seen["env"], "SILICA_HOME": str(copy)}


def without_path(rows: list[dict]) -> dict[str, dict]:
    return {r["id"]: {k: v for k, v in r.items() if k not in ("path", "problem")}
            for r in rows}


def test_the_files_move_into_the_database_and_read_back_the_same(old_home, tmp_path):
    _, files, seen = old_home
    home, env = fresh_copy(old_home, tmp_path)
    first = run("sessions", "list", "--json", env=env)
    assert first.returncode == 0, first.stderr
    said = first.stderr.decode()
    assert "moved 2 session files into the sessions database" in said
    assert str(home / "imported-sessions") in said and "Traceback" not in said
    listed = json.loads(first.stdout)
    assert without_path(listed) == without_path(seen["list"])
    [bad] = [r for r in listed if r["id"] == "broken"]
    assert "not valid JSON" in bad["problem"] and bad["path"] == str(home / "sessions/broken.json")
    # the readable files are kept aside as they were; the bad one stays where it was
    assert sorted(p.name for p in (home / "sessions").glob("*.json")) == ["broken.json"]
    kept = {p.stem: p.read_bytes() for p in (home / "imported-sessions").glob("*.json")}
    assert kept == {k: v for k, v in files.items() if k != "broken"}
    for sid, data in kept.items():
        shown = run("sessions", "show", sid, "--json", env=env)
        assert shown.returncode == 0 and shown.stdout == seen["show"][sid]
        exported = run("sessions", "export", sid, env=env)
        assert exported.returncode == 0 and exported.stdout == data  # byte for byte
        target = tmp_path / f"{sid}.json"
        assert run("sessions", "export", sid, "--output", str(target), env=env).returncode == 0
        assert target.read_bytes() == data
    images = [b for m in json.loads(kept[min(kept)])["conversation"]["messages"]
              for b in m["content"] if b.get("type") == "tool_result"]
    assert images, "the first session holds the tool's image result"


def test_running_again_imports_nothing_twice(old_home, tmp_path):
    _, files, _seen = old_home
    home, env = fresh_copy(old_home, tmp_path)
    assert run("sessions", "list", "--json", env=env).returncode == 0
    before = json.loads(run("sessions", "list", "--json", env=env).stdout)
    again = run("sessions", "list", "--json", env=env)
    assert b"moved" not in again.stderr and json.loads(again.stdout) == before
    # an original put back (as if the move was lost) is not imported over the stored one
    sid = next(r["id"] for r in before if not r["problem"])
    (home / "sessions" / f"{sid}.json").write_bytes(files[sid])
    third = run("sessions", "list", "--json", env=env)
    assert third.returncode == 0
    assert f"already holds session {sid}" in third.stderr.decode()
    assert json.loads(third.stdout) == before
    assert (home / "imported-sessions" / f"{sid}.1.json").read_bytes() == files[sid]


def test_commands_started_at_once_import_each_file_once(old_home, tmp_path):
    _, files, seen = old_home
    home, env = fresh_copy(old_home, tmp_path)
    procs = [subprocess.Popen([sys.executable, "-m", "silica", "sessions", "list", "--json"],
                              env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(4)]
    done = [(p.wait(120), *p.communicate()) for p in procs]
    assert all(code == 0 for code, _, _ in done), [err for _, _, err in done]
    said = b"".join(err for _, _, err in done).decode()
    assert said.count("moved 2 session files") == 1 and "already holds" not in said
    for _, out, _ in done:
        assert without_path(json.loads(out)) == without_path(seen["list"])
    assert len(list((home / "imported-sessions").glob("*.json"))) == 2


def test_a_migration_killed_midway_finishes_on_the_next_run(old_home, tmp_path):
    _, files, seen = old_home
    home, env = fresh_copy(old_home, tmp_path)
    # SIGKILL right after the first session is stored, before its file is moved aside
    killer = ("import os, signal, silica.agent.session_files as f\n"
              "def moved(*a): os.kill(os.getpid(), signal.SIGKILL)\n"
              "f.os.replace = moved\n"
              "from silica.agent.sessions import list_sessions\nlist_sessions()\n")
    env_new = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    killed = subprocess.run([sys.executable, "-c", killer], env=env_new, capture_output=True,
                            timeout=120, cwd=tmp_path)
    assert killed.returncode == -signal.SIGKILL
    assert len(list((home / "sessions").glob("*.json"))) == 3  # nothing moved yet
    done = run("sessions", "list", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert without_path(json.loads(done.stdout)) == without_path(seen["list"])
    assert sorted(p.name for p in (home / "sessions").glob("*.json")) == ["broken.json"]
    kept = sorted(p.name for p in (home / "imported-sessions").glob("*.json"))
    assert kept == sorted(f"{k}.json" for k in files if k != "broken")
    for sid in kept:
        assert run("sessions", "export", sid[:-5], env=env).stdout == files[sid[:-5]]


# -- the schema: Alembic's revisions, checked cheaply -----------------------------------------


def test_the_newest_revision_is_the_one_silica_checks_for():
    from alembic.script import ScriptDirectory

    from silica.storage import schema

    assert ScriptDirectory(str(schema.MIGRATIONS)).get_current_head() == schema.HEAD


OPEN = """
import sys
from silica.agent.sessions import list_sessions
list_sessions()
print(sorted({m.split(".")[0] for m in sys.modules} & {"alembic", "sqlalchemy", "psycopg"}))
"""


def test_a_new_home_never_imports_alembic(tmp_path):
    env = {**os.environ, "SILICA_HOME": str(tmp_path / "home")}
    env.pop("SILICA_DATABASE", None)

    def opened() -> str:
        done = subprocess.run([sys.executable, "-c", OPEN], env=env, capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert opened() == "[]"  # a new home: the schema is made at its newest revision
    assert opened() == "[]"  # then every open is one SELECT


def schema_of(db) -> list[tuple]:
    """Each table and index with its statement, blanks made one space."""
    def plain(sql: str | None) -> str | None:
        return re.sub(r"\( | \)", lambda m: m.group().strip(), " ".join(sql.split())) \
            if sql else sql
    return sorted((t, n, tb, plain(sql))
                  for t, n, tb, sql in db.execute("SELECT type, name, tbl_name, sql "
                                                  "FROM sqlite_master"))


def test_a_new_database_has_the_schema_the_revisions_make(tmp_path):
    import sqlite3

    from silica.storage import schema

    made = sqlite3.connect(tmp_path / "made.db", isolation_level=None)
    schema.create(made.execute)  # what a new home gets
    schema.migrate(lambda: sqlite3.connect(tmp_path / "moved.db"), "sqlite")  # Alembic's
    moved = sqlite3.connect(tmp_path / "moved.db")
    assert schema_of(made) == schema_of(moved)
    assert made.execute(schema.REVISION_QUERY).fetchall() == [(schema.HEAD,)]
    assert moved.execute(schema.REVISION_QUERY).fetchall() == [(schema.HEAD,)]


def test_a_database_from_a_newer_silica_is_one_clear_line(tmp_path):
    import sqlite3

    home = tmp_path / "home"
    env = {**os.environ, "SILICA_HOME": str(home), "SILICA_RESIDENT": "0"}
    env.pop("SILICA_DATABASE", None)
    assert run("sessions", "list", env=env).returncode == 0
    with sqlite3.connect(home / "sessions.db") as db:
        db.execute("UPDATE alembic_version SET version_num = '9999'")
    done = run("sessions", "list", env=env)
    assert done.returncode == 1 and b"Traceback" not in done.stderr
    assert done.stderr.decode().strip() == (
        f"error: the sessions database {home / 'sessions.db'} was made by a newer silica "
        "(schema 9999; this one knows up to 0001); upgrade silica")
