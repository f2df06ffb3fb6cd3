"""The chafa examples in the README and the docs give a model the picture's own shape: run
through ``silica exec`` as written (off a terminal, as a model's command runs), the image
that comes out has the aspect ratio of the picture that went in."""

from __future__ import annotations

import base64
import io
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["README.md", "docs/exec.md", "docs/images.md"]


def chafa_examples() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        for line in re.findall(r"silica exec -- (chafa [^#`\n]*?)\s*(?:#|`|$)", text, re.M):
            found.append((page, line))
        for line in re.findall(r"`(chafa -f [^`]*)`", text):
            found.append((page, line))
    return found


def test_the_docs_show_chafa_examples():
    pages = {page for page, _ in chafa_examples()}
    assert {"README.md", "docs/exec.md", "docs/images.md"} <= pages


@pytest.mark.skipif(shutil.which("chafa") is None, reason="chafa is not installed")
@pytest.mark.parametrize("page, example", chafa_examples())
def test_a_chafa_example_keeps_the_pictures_shape(tmp_path, page, example):
    picture = tmp_path / "picture.png"
    Image.new("RGB", (640, 400), (200, 40, 40)).save(picture)
    words = [str(picture) if w.endswith(".png") else w for w in shlex.split(example)]
    done = subprocess.run([sys.executable, "-m", "silica", "exec", "--json", "--", *words],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [image] = [b for b in json.loads(done.stdout)["content"] if b["type"] == "image"]
    size = Image.open(io.BytesIO(base64.b64decode(image["source"]["data"]))).size
    if "--font-ratio" not in example:  # the page shows what goes wrong without it
        assert "squashed" in (ROOT / page).read_text(encoding="utf-8")
        assert size[0] / size[1] > 2 * 640 / 400 * 0.9
        return
    assert abs(size[0] / size[1] - 640 / 400) < 0.05, (example, size)
