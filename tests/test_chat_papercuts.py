"""``silica ask`` and ``silica chat`` as a newcomer meets them: their help, the line after a
tool call, chat through a pipe, and a resumed chat's earlier turns. Through the real
commands, against a local Anthropic API."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import subprocess
import sys

from conftest import script_tool, simple_spec
from PIL import Image
from wire import anthropic_server, text, tool_call


def silica(*args: str, env: dict | None = None, stdin: str = "", cwd=None
           ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "silica", *args], input=stdin,
                          capture_output=True, text=True, cwd=cwd, timeout=180,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


def png() -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def test_ask_help_has_no_empty_image_flag():
    shown = silica("ask", "--help").stdout
    assert "--image" in shown
    assert "--empty-image" not in shown


def test_a_json_result_with_an_image_is_summed_up_not_shown_as_a_brace(
        user_tools, sandbox_off, project):
    chart = json.dumps({"title": "sales", "base64": png(), "media_type": "image/png",
                        "points": list(range(300))}, indent=2)
    script_tool(user_tools, "chart.py", simple_spec("chart"), f"print({chart!r})")
    script_tool(user_tools, "blank.py", simple_spec("blank"), "print('\\n{\\n}\\n')")
    with anthropic_server([tool_call("chart", {}) + tool_call("blank", {}),
                           text("Done.")]) as srv:
        done = silica("ask", "draw", env=srv.env, cwd=project)
    assert done.returncode == 0, done.stderr
    lines = {line.split(":", 1)[0].strip("← "): line for line in done.stderr.splitlines()
             if "←" in line}
    assert re.search(r"← chart: 1 image, \d+\.\d kB of JSON$", lines["chart"]), lines
    assert lines["blank"].endswith("blank: { }"), lines  # short JSON: whole, on one line


def test_chat_through_a_pipe_labels_each_message_and_its_reply(sandbox_off, project):
    with anthropic_server([text("Hello!"), text("Again.")]) as srv:
        done = silica("chat", env=srv.env, stdin="hi\nthere\n", cwd=project)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["you> hi", "Hello!", "you> there", "Again."]


def test_chat_resume_shows_the_earlier_turns_first(sandbox_off, project):
    with anthropic_server([tool_call("shell", {"command": "echo planted"}),
                           text("It printed planted."), text("Still here.")]) as srv:
        asked = silica("ask", "--allow-shell", "run echo please", env=srv.env, cwd=project)
        assert asked.returncode == 0, asked.stderr
        session = re.search(r"--resume (\S+)\)", asked.stderr).group(1)
        done = silica("chat", "--resume", session, env=srv.env, stdin="and now?\n",
                      cwd=project)
    assert done.returncode == 0, done.stderr
    before_prompt = done.stderr
    assert "you> run echo please" in before_prompt
    assert re.search(r'→ shell \{"command": "echo planted"\}', before_prompt)
    assert re.search(r"← shell: .*planted", before_prompt)
    assert "It printed planted." in before_prompt
    assert done.stdout.splitlines() == ["you> and now?", "Still here."]


def wide_png() -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (3000, 300), "blue").save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def test_tools_run_takes_every_provider_ask_takes_and_fits_images_as_it_does(
        user_tools, sandbox_off, project):
    body = f"print({json.dumps({'base64': wide_png(), 'media_type': 'image/png'})!r})"
    script_tool(user_tools, "wide.py", simple_spec("wide"), body)
    done = silica("tools", "run", "wide", "--provider", "gemini", "--json", cwd=project)
    assert done.returncode == 0, done.stderr
    image = next(b for b in json.loads(done.stdout)["content"] if b["type"] == "image")
    shown = Image.open(io.BytesIO(base64.b64decode(image["source"]["data"])))
    assert shown.width == 1536  # Gemini's fit (Anthropic's is 1568)
    wrong = silica("tools", "run", "wide", "--provider", "nosuch", cwd=project)
    assert wrong.returncode == 2
    assert "unknown provider 'nosuch'; known providers:" in wrong.stderr
    assert "gemini" in wrong.stderr and "Traceback" not in wrong.stderr


def test_exec_takes_every_provider_ask_takes(sandbox_off, project, tmp_path):
    picture = tmp_path / "wide.json"
    picture.write_text(json.dumps({"base64": wide_png(), "media_type": "image/png"}))
    done = silica("exec", "--provider", "gemini", "--json", "--", "cat", str(picture),
                  cwd=project)
    assert done.returncode == 0, done.stderr
    image = next(b for b in json.loads(done.stdout)["content"] if b["type"] == "image")
    shown = Image.open(io.BytesIO(base64.b64decode(image["source"]["data"])))
    assert shown.width == 1536  # Gemini's fit, as tools run --provider gemini gives
    wrong = silica("exec", "--provider", "nosuch", "--", "true", cwd=project)
    assert wrong.returncode == 2
    assert "unknown provider 'nosuch'; known providers:" in wrong.stderr
