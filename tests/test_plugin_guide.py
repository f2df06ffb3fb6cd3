"""The plugin author's guide (docs/plugins.md) works as written.

Its two files are taken from the page, built into a package in a fresh virtual environment
beside silica (offline: no index, no build isolation), and used through the real
``silica`` command: the plugin's ``anthropic`` provider answers ``silica ask`` without any
network, and its processor sees a tool's output before the built-in JSON-image one.
"""

from __future__ import annotations

import json
import os
import re
import site
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import script_tool, simple_spec

DOC = Path(__file__).parent.parent / "docs" / "plugins.md"
GUIDE = "## A plugin author's guide"
PIXEL_PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4"
             "nGNgYGAAAAAEAAH2FzhVAAAAAElFTkSuQmCC")


def guide_files() -> dict[str, str]:
    """The fenced blocks of the guide whose first line names a file (``# name``)."""
    text = DOC.read_text()
    guide = text[text.index(GUIDE):]
    files = {}
    for block in re.findall(r"```(?:toml|python)\n(.*?)```", guide, re.S):
        first, _, rest = block.partition("\n")
        if re.fullmatch(r"# [\w.]+", first):
            files[first[2:]] = rest
    return files


@pytest.fixture(scope="module")
def plugin_python(tmp_path_factory) -> Path:
    """The python of a fresh venv that sees silica (this checkout) and has the plugin."""
    root = tmp_path_factory.mktemp("guide")
    package = root / "silica-canned"
    package.mkdir()
    files = guide_files()
    assert set(files) == {"pyproject.toml", "silica_canned.py"}
    for name, text in files.items():
        (package / name).write_text(text)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # silica and its dependencies as installed for these tests (silica from the checkout)
    (Path(purelib) / "silica-checkout.pth").write_text(
        "".join(f"import site; site.addsitedir({d!r})\n" for d in site.getsitepackages()))
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "--quiet", "--no-index", "--no-deps", "--no-build-isolation",
                           str(package)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return python


def silica(python: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return subprocess.run([str(python), "-m", "silica", *args], capture_output=True,
                          text=True, timeout=300, env=env)


def test_the_guides_plugin_replaces_the_anthropic_provider(plugin_python, home):
    done = silica(plugin_python, "ask", "hello", "--provider", "anthropic", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["answer"] == "canned answer: no model was asked"


def test_the_guides_processor_sees_the_output_before_the_json_images_one(
        plugin_python, user_tools):
    printed = json.dumps({"base64": PIXEL_PNG, "note": "a pixel"}) + "\n"
    script_tool(user_tools, "pixel.py", simple_spec("pixel"),
                body=f"import sys\nsys.stdout.write({printed!r})\n")
    done = silica(plugin_python, "tools", "run", "--json", "pixel")
    assert done.returncode == 0, done.stderr
    content = json.loads(done.stdout)["content"]
    assert [block["type"] for block in content] == ["text", "image"]
    first, rest = content[0]["text"].split("\n", 1)
    assert first == f"[the tool printed {len(printed)} bytes]"  # the image still in it
    assert PIXEL_PNG not in rest and "a pixel" in rest  # then taken out by json-images
