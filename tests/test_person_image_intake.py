"""A person's image has one rule and one limit however it arrives: ``ask --image FILE``
refuses an image over ``[images] max_size_bytes`` as a URL does, in the same words."""

from __future__ import annotations

import functools
import http.server
import io
import os
import random
import subprocess
import sys
import threading

import pytest
from PIL import Image
from wire import anthropic_server, text

LIMIT = "over the limit of 10,485,760 bytes per image ([images] max_size_bytes)"


@pytest.fixture(scope="module")
def big_png(tmp_path_factory):
    """A PNG of noise over 12 MB: past the default limit of 10 MiB."""
    rng = random.Random(21)
    img = Image.frombytes("RGB", (2100, 2100), rng.randbytes(2100 * 2100 * 3))
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=0)
    path = tmp_path_factory.mktemp("big") / "big.png"
    path.write_bytes(buf.getvalue())
    assert path.stat().st_size > 12 * 2**20
    return path


def ask(image: str, srv) -> subprocess.CompletedProcess:
    env = {**os.environ, **srv.env, "SILICA_PROVIDER": "anthropic"}
    return subprocess.run([sys.executable, "-m", "silica", "ask", "--image", image, "look"],
                          env=env, capture_output=True, text=True, timeout=120)


def test_a_file_over_the_limit_is_refused_as_a_url_is(big_png, home):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("[serve]\nfetch_private = true\n")  # a local server
    handler = functools.partial(http.server.SimpleHTTPRequestHandler,
                                directory=str(big_png.parent))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as files:
        threading.Thread(target=files.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{files.server_address[1]}/big.png"
        with anthropic_server([text("never")]) as srv:
            as_file = ask(str(big_png), srv)
            as_url = ask(url, srv)
            assert srv.requests == []  # nothing was sent
        files.shutdown()
    for done in (as_file, as_url):
        assert done.returncode != 0
        assert LIMIT in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
