"""The ``silica`` command as a user runs it: real processes, real tools, real files."""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import script_tool, simple_spec
from PIL import Image

from silica import __version__

REPO = Path(__file__).resolve().parent.parent


def silica(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          text=True, cwd=cwd, env=os.environ.copy(), timeout=300)


@pytest.fixture
def examples(user_tools):
    for name in ("hello.py", "chart.py"):
        shutil.copy(REPO / "user_tools" / name, user_tools / name)
    return user_tools


def test_version():
    done = silica("--version")
    assert done.returncode == 0 and done.stdout.strip() == __version__


def test_list_json_rows(examples):
    script_tool(examples, "broken.py", "not json")
    done = silica("tools", "list", "--json")
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    assert set(rows) == {"hello", "chart", "broken", "read_file"}
    assert rows["read_file"]["origin"] == "builtin"
    assert rows["hello"]["status"] == "ok" and rows["hello"]["reason"] == ""
    assert rows["hello"]["path"] == str(examples / "hello.py")
    assert rows["broken"]["status"] == "error" and "no JSON" in rows["broken"]["reason"]


def test_list_table_shows_description(examples):
    done = silica("tools", "list")
    assert done.returncode == 0
    assert "hello" in done.stdout and "Greet someone by name." in done.stdout


def test_spec_prints_what_the_model_sees(examples):
    done = silica("tools", "spec", "chart")
    spec = json.loads(done.stdout)
    assert spec["name"] == "chart"
    assert spec["input_schema"]["properties"]["values"] == {
        "type": "array", "items": {"type": "number"},
        "description": "The numbers to plot, in order."}
    assert spec["input_schema"]["required"] == ["values"]
    assert spec["input_schema"]["properties"]["kind"]["enum"] == ["bar", "line"]


def test_run_chart_shows_and_saves_a_real_png(examples, tmp_path):
    out = tmp_path / "imgs"
    done = silica("tools", "run", "chart", "--input", '{"values": [3, 1, 4, 1, 5]}',
                  "--save-images", str(out))
    assert done.returncode == 0, done.stderr
    assert "bar chart of 5 values" in done.stdout
    assert "image/png, 640x400 px" in done.stdout and "tokens" in done.stdout
    [saved] = out.iterdir()
    assert str(saved) in done.stdout
    with Image.open(saved) as img:
        assert img.size == (640, 400)
    assert "iVBOR" not in done.stdout  # never base64 as text


def test_run_json_is_a_tool_result_in_anthropic_form(examples):
    done = silica("tools", "run", "chart", "--json", "--input", '{"values": [1, 2]}')
    result = json.loads(done.stdout)
    assert result["is_error"] is False
    text, image = result["content"]
    assert text["type"] == "text" and "bar chart of 2 values" in text["text"]
    assert image["type"] == "image" and image["source"]["type"] == "base64"
    assert image["source"]["media_type"] == "image/png"
    with Image.open(io.BytesIO(base64.b64decode(image["source"]["data"]))) as img:
        img.load()


def test_run_failure_goes_to_stderr_with_non_zero_exit(examples):
    done = silica("tools", "run", "chart", "--input", '{"values": []}')
    assert done.returncode == 1
    assert "chart needs at least one value" in done.stderr
    done = silica("tools", "run", "chart", "--json", "--input", '{"values": []}')
    assert done.returncode == 1 and json.loads(done.stdout)["is_error"] is True


def test_run_unknown_tool_and_bad_input(examples):
    done = silica("tools", "run", "helo")
    assert done.returncode != 0 and "did you mean hello" in done.stderr
    done = silica("tools", "run", "hello", "--input", "{oops")
    assert done.returncode == 2 and "--input is not valid JSON" in done.stderr


def test_new_tool_is_immediately_ok_and_runs(user_tools):
    done = silica("tools", "new", "greeter")
    assert done.returncode == 0, done.stderr
    rows = json.loads(silica("tools", "list", "--json").stdout)
    assert [(r["name"], r["status"]) for r in rows if r["origin"] != "builtin"] == [
        ("greeter", "ok")]
    ran = silica("tools", "run", "greeter", "--input", '{"text": "hi", "repeat": 2}')
    assert json.loads(ran.stdout) == {"result": "hi hi"}
    again = silica("tools", "new", "greeter")
    assert again.returncode == 1 and "already exists" in again.stderr


def test_new_project_tool_lands_in_the_project(project):
    done = silica("tools", "new", "local_tool", "--project")
    assert done.returncode == 0, done.stderr
    assert (project / ".silica" / "tools" / "local_tool.py").is_file()
    assert f"'silica trust {project}' lets them" in done.stderr
    rows = json.loads(silica("tools", "list", "--json").stdout)
    assert rows[0]["origin"] == "project" and rows[0]["status"] == "untrusted"
    assert silica("trust").returncode == 0
    rows = json.loads(silica("tools", "list", "--json").stdout)
    assert rows[0]["origin"] == "project" and rows[0]["status"] == "ok"


def test_new_refuses_a_bad_name(user_tools):
    done = silica("tools", "new", "../evil")
    assert done.returncode == 1 and "not a valid tool name" in done.stderr
    assert not any(user_tools.parent.glob("evil*"))


def test_check_fails_when_a_tool_is_broken(examples):
    ok = silica("tools", "check", "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["ok"] is True
    script_tool(examples, "bad.py", json.dumps({"name": "bad", "description": "d",
                                                "input_schema": {"type": "array"}}))
    bad = silica("tools", "check", "--json")
    assert bad.returncode == 1
    report = json.loads(bad.stdout)
    assert report["ok"] is False
    assert [r["name"] for r in report["tools"] if r["status"] != "ok"] == ["bad"]


def test_spec_of_a_broken_tool_says_why(user_tools):
    script_tool(user_tools, "bad.py", simple_spec("bad name"))
    done = silica("tools", "spec", "bad")
    assert done.returncode == 1 and "not json" not in done.stderr.lower()
    assert "name" in done.stderr


@pytest.mark.parametrize("argv", [["--version"], ["tools", "list", "--json"]])
def test_light_commands_import_no_sdk_and_no_pillow(examples, argv):
    code = (f"import sys; sys.argv = ['silica', *{argv!r}]\n"
            "from silica.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in (\n"
            "    'anthropic', 'openai', 'PIL', 'mcp', 'mcp_types', 'uvicorn', 'starlette'))\n"
            "print('HEAVY', heavy, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert "HEAVY []" in done.stderr, done.stderr


def modules_after(argv: list[str]) -> set[str]:
    """Every module ``silica ARGV`` imports (read from ``python -X importtime``)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "silica", *argv],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
            if line.startswith("import time:") and line.count("|") == 2}


def test_tools_list_imports_nothing_to_run_or_call_tools(examples):
    modules_after(["tools", "list", "--json"])  # reads and caches the specs
    modules = modules_after(["tools", "list", "--json"])
    running = {"asyncio", "silica.tools.confined", "silica.tools.runner",
               "silica.results.pipeline", "silica.tools.workers"}
    assert not modules & running, modules & running  # nothing runs: every spec is cached
    assert not {m for m in modules if m.startswith(("silica.providers", "silica.mcp"))}


def test_tools_run_imports_no_sdk_pillow_or_mcp_for_a_text_result(examples):
    modules = modules_after(["tools", "run", "hello", "--input", '{"name": "x"}'])
    heavy = {m.split(".")[0] for m in modules} & {"anthropic", "openai", "PIL", "mcp",
                                                  "uvicorn", "starlette", "httpx"}
    assert not heavy, heavy
    assert not {m for m in modules if m.startswith("silica.mcp")}


def test_run_fits_images_to_the_chosen_provider(user_tools):
    buf = io.BytesIO()
    Image.new("RGB", (3000, 1000), (10, 120, 200)).save(buf, format="WEBP")
    payload = json.dumps({"base64": base64.b64encode(buf.getvalue()).decode()})
    script_tool(user_tools, "wide.py", simple_spec("wide"), body=f"print({payload!r})")

    def image_of(provider):
        done = silica("tools", "run", "wide", "--json", "--provider", provider)
        [image] = [b for b in json.loads(done.stdout)["content"] if b["type"] == "image"]
        with Image.open(io.BytesIO(base64.b64decode(image["source"]["data"]))) as img:
            return image["source"]["media_type"], img.size

    assert image_of("anthropic")[1] == (1568, 522)  # the long side Anthropic would use
    media, size = image_of("ollama")
    assert media == "image/png" and max(size) <= 1568  # Ollama takes PNG and JPEG only
    assert image_of("openai")[1] == (2048, 682)  # 2048 long side first; 682 < 768 short


def test_brackets_in_a_description_are_shown_as_written(user_tools, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")  # one row a line
    spec = simple_spec("odd")
    spec["description"] = "Prints [/] and [bold]not bold[/bold] as text"
    script_tool(user_tools, "odd.py", spec)
    done = silica("tools", "list")
    assert done.returncode == 0, done.stderr
    assert "Prints [/] and [bold]not bold[/bold] as text" in done.stdout
