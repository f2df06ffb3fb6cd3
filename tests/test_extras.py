"""Features whose dependencies are extras: without the extra, the command says in one line
which pip command installs it, and exits non-zero (never a traceback).

The extra is made missing in the real ``silica`` process: a ``sitecustomize`` on its
``PYTHONPATH`` blocks the modules (``sys.modules[name] = None``), as if not installed."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from silica.extras import EXTRAS, installed, missing

SILICA = str(Path(sys.executable).with_name("silica"))
ROOT = Path(__file__).resolve().parent.parent

BLOCKER = """\
import os, sys
for name in os.environ.get("SILICA_TEST_BLOCK", "").split(","):
    if name:
        sys.modules[name] = None
"""


def run_without(tmp_path: Path, blocked: list[str], *args: str) -> subprocess.CompletedProcess:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": str(site), "SILICA_TEST_BLOCK": ",".join(blocked),
           "GEMINI_API_KEY": "test-key"}
    return subprocess.run([SILICA, *args], env=env, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, stdin=subprocess.DEVNULL)


def one_line_error(result: subprocess.CompletedProcess, command: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert command in lines[0]


@pytest.mark.parametrize("blocked", [["starlette"], ["uvicorn"], ["socketio"],
                                     ["python_multipart"]])
def test_serve_without_the_serve_extra_names_the_pip_command(tmp_path, blocked):
    result = run_without(tmp_path, blocked, "serve", "--port", "0")
    one_line_error(result, "pip install 'silica[serve]'")
    assert result.stdout == ""  # it never started listening


def test_serve_with_redis_without_the_redis_extra_names_the_pip_command(tmp_path):
    result = run_without(tmp_path, ["redis"], "serve", "--port", "0",
                         "--redis", "redis://127.0.0.1:1/0")
    one_line_error(result, "pip install 'silica[redis]'")
    assert result.stdout == ""


def test_gemini_provider_without_the_gemini_extra_names_the_pip_command(tmp_path):
    result = run_without(tmp_path, ["google.genai"], "ask", "--provider", "gemini", "hello")
    one_line_error(result, "pip install 'silica[gemini]'")


def test_other_commands_need_no_extra(tmp_path):
    blocked = [module for _, modules in EXTRAS.values() for module in modules]
    result = run_without(tmp_path, blocked, "tools", "list")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_extras_match_pyproject():
    """Every feature extra of pyproject.toml is known to silica.extras, and ``all`` and
    ``dev`` bring them all (README's set-up command installs ``.[dev]``)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert set(extras) - {"all", "dev"} == set(EXTRAS)
    assert extras["all"] == [f"silica[{','.join(sorted(EXTRAS, key=list(extras).index))}]"]
    assert "silica[all]" in extras["dev"]


def test_installed_handles_missing_parents_and_blocked_modules(monkeypatch):
    assert installed("json")
    assert not installed("no_such_package_here.sub")
    monkeypatch.setitem(sys.modules, "starlette", None)
    assert not installed("starlette")
    assert missing("serve") == ["starlette"]


def test_serve_without_the_scale_out_extras_starts_and_answers(tmp_path):
    from serve_daemon import start_daemon

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    blocked = [m for extra in ("redis", "postgres", "s3") for m in EXTRAS[extra][1]]
    env = {"PYTHONPATH": str(site), "SILICA_TEST_BLOCK": ",".join(blocked)}
    with start_daemon(tmp_path / "home", env=env, cwd=tmp_path) as daemon, \
            daemon.client() as http:
        made = http.post("/sessions", json={})
        listed = http.get("/sessions")
    assert made.status_code == 201 and listed.status_code == 200
    assert "Traceback" not in daemon.stderr()
