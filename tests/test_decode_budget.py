"""The configured decoding budget (``[images] max_decoded_bytes``) holds for every decoder.

The sixel and kitty extractors turn escape sequences into pixels before any image check
runs; they decode within the budget in the user's config, not the default one, so an
image under the default but over the configured budget is refused before it is decoded.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from base64 import b64encode

from conftest import script_tool, simple_spec

ESC, ST = "\x1b", "\x1b\\"
BUDGET = 16 * 1024 * 1024  # configured; the default is 192 MiB
# Each under the default budget by the extractor's own measure, and far over 16 MiB.
SIXEL_SIDE = 3500  # 12 bytes of work a pixel: 140 MiB
KITTY_SIDE = 4000  # raw RGBA turned into PNG: about 122 MiB

SIXEL = (f"{ESC}Pq\"1;1;{SIXEL_SIDE};{SIXEL_SIDE}#0;2;100;0;0#0"
         + f"!{SIXEL_SIDE}~-" * (SIXEL_SIDE // 6) + ST)
KITTY = (f"{ESC}_Ga=T,f=32,s={KITTY_SIDE},v={KITTY_SIDE},o=z;"
         f"{b64encode(zlib.compress(bytes(KITTY_SIDE * KITTY_SIDE * 4), 9)).decode()}{ST}")

# ``silica tools run`` in this process, then its peak memory (VmHWM, KiB) on stderr.
RUN = """
import runpy, sys
sys.argv = ["silica", "tools", "run", "--json", sys.argv[1]]
try:
    runpy.run_module("silica", run_name="__main__")
finally:
    with open("/proc/self/status") as status:
        peak = status.read().split("VmHWM:")[1].split()[0]
    print(f"peak {peak}", file=sys.stderr)
"""


def run_tool(home, user_tools, name: str, printed: str) -> tuple[list[dict], int]:
    (home / "config.toml").write_text(f"[images]\nmax_decoded_bytes = {BUDGET}\n")
    script_tool(user_tools, f"{name}.py", simple_spec(name),
                body=f"import sys\nsys.stdout.write({printed!r})\n")
    done = subprocess.run([sys.executable, "-c", RUN, name], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    peak = int(done.stderr.rsplit("peak ", 1)[1].split()[0])
    return json.loads(done.stdout)["content"], peak


def test_a_sixel_over_the_configured_budget_is_refused_undecoded(home, user_tools):
    content, peak = run_tool(home, user_tools, "big_sixel", f"before\n{SIXEL}\nafter\n")
    assert peak < 90 * 1024  # KiB: the canvas was never made
    assert [block["type"] for block in content] == ["text"]
    assert "before" in content[0]["text"] and "after" in content[0]["text"]
    assert "sixel image dropped" in content[0]["text"]
    assert "over the decoding budget" in content[0]["text"]


def test_a_kitty_image_over_the_configured_budget_is_refused_undecoded(home, user_tools):
    content, peak = run_tool(home, user_tools, "big_kitty", f"before\n{KITTY}\nafter\n")
    assert peak < 90 * 1024  # KiB: the pixels were never inflated
    assert [block["type"] for block in content] == ["text"]
    assert "over the 16 MiB budget (max_decoded_bytes)" in content[0]["text"]
