"""Shared fixtures: an isolated silica home, a project folder, and tool files written to disk.

Every test runs with its own ``SILICA_HOME`` and working directory, so nothing touches the
real ``~/.silica``; tools are real files run by the real ``uv``.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, settings

from silica.config import SandboxSettings, Settings
from silica.tools.uvbin import find_uv

T = TypeVar("T")

# Tests never assert a time, and hypothesis's own clocks are times: an example's deadline and
# the health check on how fast inputs are drawn failed tests on a loaded machine (a strategy
# took 1.7 s to start under a parallel CI run). Every property keeps all its examples.
settings.register_profile("silica", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("silica")

HEADER = """\
# /// script
# requires-python = ">=3.11"
# dependencies = [{deps}]
# ///
"""


def unconfined() -> Settings:
    """Settings that run tools without the sandbox: for tests of one layer below it (the
    reaper, process hardening), which watch the tool's processes from outside by pid."""
    return Settings(sandbox=SandboxSettings(mode="off"))


OFF = '[sandbox]\nmode = "off"\n'
"""config.toml's lines for the tests of ``unconfined``'s kind that start silica as a process."""


@pytest.fixture
def sandbox_off(home) -> None:
    """``[sandbox] mode = "off"`` in config.toml (see ``unconfined``)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(OFF)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    home = tmp_path / "home"
    project = tmp_path / "project"
    project.mkdir()
    (project / ".git").mkdir()  # the project is a repository: discovery stops here
    monkeypatch.setenv("SILICA_HOME", str(home))
    monkeypatch.delenv("SILICA_TOOLS_DIR", raising=False)
    monkeypatch.delenv("SILICA_UV", raising=False)
    monkeypatch.delenv("SILICA_TOOL_ENV_WITHHOLD", raising=False)
    monkeypatch.delenv("SILICA_LOAD_PLUGINS", raising=False)
    monkeypatch.setenv("SILICA_RESIDENT", "0")  # no test starts a resident but its own
    monkeypatch.chdir(project)
    find_uv.cache_clear()
    yield
    find_uv.cache_clear()
    if "silica.agent.sessions" in sys.modules:  # close the test's session databases
        sys.modules["silica.agent.sessions"].forget_stores()


@pytest.fixture(params=["anthropic", "ollama", "openai"])
def kind(request, monkeypatch, tmp_path) -> str:
    """Each bundled provider in turn, with none of the machine's keys, URLs or hosts."""
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL",
                "ANTHROPIC_PROFILE", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OLLAMA_HOST"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return request.param


@pytest.fixture
def home() -> Path:
    import os

    return Path(os.environ["SILICA_HOME"])


@pytest.fixture
def user_tools(home) -> Path:
    folder = home / "tools"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def project(tmp_path) -> Path:
    return tmp_path / "project"


@pytest.fixture
def errlog(tmp_path):
    """A file for the stderr of servers a test starts: shown with a failing test's output."""
    import sys

    with open(tmp_path / "server.err", "w+", encoding="utf-8") as f:
        yield f
        f.seek(0)
        sys.stderr.write(f.read())


@pytest.fixture
def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout: float = 60) -> None:
    """Wait until a server listens on 127.0.0.1:``port``; fail the test after ``timeout``."""
    import socket
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"the server did not listen on port {port}")


def trust(path: Path) -> Path:
    """Trust the project that holds ``path``, as ``silica trust PATH`` does."""
    import os

    from silica.security.trust import TrustStore

    return TrustStore(Path(os.environ["SILICA_HOME"])).add(path)


def write_tool(folder: Path, filename: str, source: str, deps: str = '"cyclopts>=3"') -> Path:
    """Write a tool file: a PEP 723 header with ``deps``, then ``source`` (dedented)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / filename
    path.write_text(HEADER.format(deps=deps) + textwrap.dedent(source), encoding="utf-8")
    return path


def cyclopts_tool(folder: Path, name: str, params: str = "text: str = 'hi'",
                  body: str = "print(text)", doc: str = "Echo some text.",
                  module_doc: str = "", filename: str | None = None) -> Path:
    """A realistic single-command tool built like the original silica tools."""
    source = f'''\
"""{module_doc or name + ' tool.'}"""
import json
import sys
from pathlib import Path

import cyclopts

sys.path.insert(0, str(Path(__file__).parent))
from _silica_toolspec import generate_schema

app = cyclopts.App()


@app.default
def {name}({params}):
    """{doc}"""
{textwrap.indent(textwrap.dedent(body), "    ")}


if __name__ == "__main__":
    if "--toolspec" in sys.argv:
        print(json.dumps(generate_schema({name})))
    else:
        app()
'''
    return write_tool(folder, filename or f"{name}.py", source)


def script_tool(folder: Path, filename: str, spec: dict | list | str | None,
                body: str = "") -> Path:
    """A dependency-free tool: prints ``spec`` (JSON, or raw text) for --toolspec, else
    runs ``body``."""
    printed = spec if isinstance(spec, str) else json.dumps(spec)
    source = f'''\
import sys
if "--toolspec" in sys.argv:
    sys.stdout.write({printed!r})
    sys.exit(0)
{textwrap.dedent(body)}
'''
    return write_tool(folder, filename, source, deps="")


def simple_spec(name: str, **props) -> dict:
    return {"name": name, "description": f"the {name} tool",
            "input_schema": {"type": "object",
                             "properties": {k: {"type": v} for k, v in props.items()}}}


def traced_peak(call: Callable[[], T]) -> tuple[T, int]:
    """What ``call()`` returns, and the peak of Python's allocations while it ran
    (tracemalloc: what existed before it ran is not counted)."""
    import tracemalloc

    tracemalloc.start()
    try:
        result = call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium for the page's tests, one per module: Playwright driving the
    system's ``chromium`` (Playwright's own browser download is not used)."""
    import shutil

    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=shutil.which("chromium"),
                                     args=["--no-sandbox"])
        yield chromium
        chromium.close()
