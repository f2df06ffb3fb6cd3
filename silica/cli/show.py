"""Showing a ToolResult in the terminal: text as printed, images as a line of facts each,
drawn above it as ``[display] images`` says (``silica.display``: fitted to the terminal).

A text block is shown up to ``SHOW_CHARS`` characters and ``SHOW_LINES`` lines, then one line
saying how much was left out and the file that holds all of it, so showing a flood of output
takes as long as showing its start.

Blocks for the model only (``audience`` ``("assistant",)``) are not shown; one dim line
says how many were left out.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Annotated

from cyclopts import Parameter
from rich.console import Console

from silica.blocks import ImageBlock, TextBlock, ToolResult, for_user
from silica.cli.output import err, out, plain, say
from silica.fsutil import keep_by_content, keep_text_by_content
from silica.paths import silica_home

_EXT = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}
SHOW_CHARS = 2_000
SHOW_LINES = 40
_SHOWS = re.compile(r"[^ \t\n]")  # a character that prints something (␍ included)

ImagesFlag = Annotated[bool | None, Parameter(name="--images", negative="--no-images", help=(
    "Draw images in the terminal (--images: even when [display] images is \"off\"), or "
    "not (--no-images: a line of text each); default: [display] images in config.toml."))]
"""The ``--images/--no-images`` flag of every command that shows images."""


def images_setting(flag: bool | None, settings) -> str:
    """The ``[display] images`` setting in force for a command run with ``flag``
    (``silica.display.detect.choose_setting``); the notice about ``SILICA_INLINE_IMAGES``
    is printed once, on stderr."""
    from silica.display.detect import choose_setting

    setting, notice = choose_setting(settings.display.images, flag)
    if notice:
        _note(notice)
    return setting


@functools.cache  # once per run (a resident's run clears it)
def _note(notice: str) -> None:
    say(f"note: {notice}", console=err, style="dim")


def draw_image(console: Console, setting: str, data: bytes) -> None:
    """Draw image ``data`` on ``console``'s stream as ``setting`` says (nothing off a
    terminal, or for "off")."""
    if setting == "off":
        return
    from silica.display.draw import draw_image as draw

    draw(console.file, setting, data)


def clip_for_terminal(text: str, chars: int = SHOW_CHARS,
                      lines: int = SHOW_LINES) -> tuple[str, int]:
    """The start of ``text`` to show (at most ``chars`` characters and ``lines`` lines) and
    how many characters are left out (0 when only spaces and line ends are); linear in what
    is shown, not in ``len(text)``."""
    head = text[:chars]
    end = -1
    for _ in range(lines):
        end = head.find("\n", end + 1)
        if end < 0:
            break
    else:
        head = head[:end]
    if _SHOWS.search(text, len(head)) is None:
        return head, 0
    return head, len(text) - len(head)


def save_text(text: str | list[str], folder: Path | None = None) -> tuple[Path | None, str]:
    """Save ``text`` (or its pieces, joined as they are) under a name made from its content
    (in the folder ``save_image`` uses by default), never copying it whole; the path, or
    ``None`` and why it could not be written."""
    folder = folder or silica_home() / "images" / "cli"
    try:
        return keep_text_by_content(folder, [text] if isinstance(text, str) else text,
                                    ".txt"), ""
    except OSError as exc:
        return None, str(exc.strerror or exc)


def save_image(image: ImageBlock, folder: Path | None) -> Path | None:
    """Save ``image`` under a name made from its content; ``None`` if it cannot be written."""
    folder = folder or silica_home() / "images" / "cli"
    suffix = "." + _EXT.get(image.media_type, "bin")
    try:
        return keep_by_content(folder, image.data, suffix)
    except FileExistsError:
        say(f"warning: cannot save the image in {folder}: a file of that name is in the way; "
            "give --save-images a folder", console=err)
        return None
    except OSError as exc:
        say(f"warning: cannot save the image in {folder}: {exc.strerror or exc}", console=err)
        return None


def describe_image(image: ImageBlock, saved: Path | None) -> str:
    from silica.images.tokens import estimate_tokens

    w, h = image.width or 0, image.height or 0
    size = f"{w}x{h} px" if w and h else "size unknown"
    tokens = ", ".join(f"{estimate_tokens(w, h, p):,} {p}" for p in ("anthropic", "openai"))
    where = f", saved to {saved}" if saved else ""
    fitted = (f" (fitted from {image.original_bytes:,})"
              if image.original_bytes is not None else "")
    return (f"[image: {image.media_type}, {size}, {len(image.data):,} bytes{fitted}, "
            f"~tokens: {tokens}{where}]")


def show_result(result: ToolResult, saved: list[Path | None], images: str = "auto",
                *, full_output: Path | None = None) -> None:
    """Print ``result``: each image is drawn as the setting ``images`` says (``[display]
    images``; nothing off a terminal), and always described in one line beneath.

    A long text block is cut (``clip_for_terminal``) with a line naming where all of the
    result's text is: ``full_output`` if given, else a file ``save_text`` writes.

    ``saved`` holds an entry per image of ``result`` (``result.images``), shown or not; blocks
    for the model only are skipped (see the module docstring)."""
    from silica.agent.results import compact_undecodable

    console = err if result.is_error else out
    paths = iter(saved)
    problem = ""
    hidden = 0
    for block in result.blocks:
        if not for_user(block):
            hidden += 1
            if isinstance(block, ImageBlock):
                next(paths, None)  # ``saved`` follows every image, this one too
            continue
        if isinstance(block, TextBlock):
            shown, left = clip_for_terminal(block.text)
            # a tool's words: never markup, never escapes; undecodable runs as one marker
            console.print(plain(compact_undecodable(shown)))
            if left:
                if full_output is None:  # the blocks' text, as pieces: no copy of it all
                    texts = [compact_undecodable(b.text) for b in result.blocks
                             if isinstance(b, TextBlock) and for_user(b)]
                    full_output, problem = save_text(
                        [piece for i, t in enumerate(texts) for piece in ("\n" * bool(i), t)])
                where = (f"all of it is in {full_output}" if full_output else
                         f"it could not be saved: {problem}")
                say(f"[… {left:,} more characters not shown; {where}]", console=console,
                    style="dim")
        elif isinstance(block, ImageBlock):
            draw_image(console, images, block.data)
            console.print(plain(describe_image(block, next(paths, None))))
    if hidden:
        what = "block" if hidden == 1 else "blocks"
        say(f"[{hidden} {what} for the model only, not shown]", console=console, style="dim")

