"""Re-record the fixtures in this folder (see README.txt). Run from this folder.

Needs Pillow, chafa and timg (Debian), and term-image and textual-image (PyPI).
"""

from __future__ import annotations

import random
import subprocess
import sys
import warnings

from PIL import Image


def sources() -> None:
    gradient = Image.new("RGB", (8, 6))
    for x in range(8):
        for y in range(6):
            gradient.putpixel((x, y), (x * 30, y * 40, 100))
    gradient.save("gradient-8x6.png")
    halves = Image.new("RGB", (16, 8), (255, 0, 0))
    halves.paste((0, 0, 255), (8, 0, 16, 8))
    halves.save("halves-16x8.png")
    rng = random.Random(1337)
    noise = Image.frombytes("RGB", (40, 40), bytes(rng.randrange(256) for _ in range(4800)))
    noise.save("noise-40x40.png")


def shell(name: str, command: str) -> None:
    subprocess.run(f"{command} > {name}", shell=True, check=True)


def term_image(name: str, kind: str, path: str, width: int) -> None:
    warnings.simplefilter("ignore")
    from term_image.image import ITerm2Image, KittyImage

    cls = KittyImage if kind == "kitty" else ITerm2Image
    cls.forced_support = True
    image = cls.from_file(path)
    image.set_size(width=width)
    image.set_render_method("whole")
    with open(name, "w", encoding="utf-8", newline="") as out:
        out.write(f"before term-image\n{image}\nafter term-image\n")


TEXTUAL_IMAGE = """
import sys
from rich.console import Console
from textual_image.renderable.tgp import Image
console = Console(file=sys.stdout, force_terminal=True, width=40, color_system="truecolor")
print("before textual-image")
console.print(Image(sys.argv[1], width=int(sys.argv[2]), height=int(sys.argv[3])))
print("after textual-image")
"""


def main() -> None:
    sources()
    shell("chafa-kitty.out", "{ echo before chafa; chafa -f kitty -s 4x2 halves-16x8.png; "
          "echo after chafa; }")
    shell("chafa-iterm.out", "{ echo before chafa; chafa -f iterm -s 4x2 halves-16x8.png; "
          "echo after chafa; }")
    shell("timg-kitty.out", "{ echo before timg; timg -pk -g8x4 gradient-8x6.png; "
          "echo after timg; }")
    shell("timg-kitty-chunked.out", "{ echo before timg; timg -pk -g40x20 -U gradient-8x6.png; "
          "echo after timg; }")
    shell("timg-iterm2.out", "{ echo before timg; timg -pi -g8x4 gradient-8x6.png; "
          "echo after timg; }")
    term_image("term-image-kitty.out", "kitty", "gradient-8x6.png", 16)
    term_image("term-image-kitty-chunked.out", "kitty", "noise-40x40.png", 80)
    term_image("term-image-iterm2.out", "iterm2", "gradient-8x6.png", 16)
    with open("textual-image-tgp.out", "wb") as out:
        subprocess.run([sys.executable, "-c", TEXTUAL_IMAGE, "noise-40x40.png", "4", "2"],
                       stdin=subprocess.DEVNULL, stdout=out, check=True)


if __name__ == "__main__":
    main()
