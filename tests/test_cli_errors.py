"""The ``silica`` command has one handler for errors a user can act on: any ``SilicaError`` a
command lets out ends it with one "error: " line on stderr and the error's exit status."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def silica(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def test_no_command_catches_silica_error_only_to_fail():
    # the one handler is silica.cli.main: a command module re-printing errors is a copy
    pattern = re.compile(r"except (SilicaError|TrustError|ConfigError)[^:]*:\n\s*fail\(")
    copies = [p.name for p in (ROOT / "silica" / "cli").glob("*.py")
              if pattern.search(p.read_text(encoding="utf-8"))]
    assert copies == []


def test_an_error_from_a_library_call_is_one_line_and_exit_1(home, tmp_path):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("[tools]\ntimeout = 'soon'\n")
    for args in (["tools", "list"], ["exec", "--", "true"], ["sandbox"],
                 ["packs", "install", "https://example.invalid/nope.zip"]):
        done = silica(*args)
        assert done.returncode == 1, (args, done.stderr)
        assert done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1, args
        assert "Traceback" not in done.stderr


def test_a_usage_error_from_a_library_call_exits_2(tmp_path):
    done = silica("mcp", "serve", "--http", "--token-file", str(tmp_path / "missing"))
    assert done.returncode == 2
    assert done.stderr.startswith("error: cannot read the token from ")
    assert len(done.stderr.splitlines()) == 1


def test_mcp_serve_refuses_a_port_out_of_range_in_one_line():
    done = silica("mcp", "serve", "--http", "--port", "99999", "--no-token")
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --port must be 0-65535, not 99999"
