"""What the model gets of a tool's result: text bounded, undecodable bytes compact, images
in the store. The whole text is saved beside the session when it is cut.

``keep_result(result, name=..., store=..., folder=..., max_chars=...) -> Kept``

- A run of U+FFFD (bytes that were not UTF-8, as the tool runner decodes them) becomes one
  ``[… N undecodable bytes …]`` marker (``compact_undecodable``).
- Past ``max_chars`` characters of text, the model gets the first and the last
  ``max_chars / 2`` with ``[… N of T characters cut; the whole output is in PATH …]`` in
  between; ``PATH`` is ``<folder>/<tool>-<sha256 prefix>.txt`` and holds all the text (with
  undecodable runs compacted). If it cannot be written, the marker says so and why.
- Images go into the ``ImageStore``; one the store cannot write becomes an
  ``[image not kept:`` notice saying why.
- Every block keeps its ``audience`` (an image's goes onto its ref or its notice), so the
  request builder can leave out what is for the person only.

What callers may rely on: ``keep_result`` never raises for a result; ``Kept.content`` holds
at most ``max_chars`` characters of the tool's text plus the markers, text and images in the
tool's order; ``Kept.notes`` says in words for the person what was cut or not kept.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from silica.blocks import ImageBlock, ImageRefBlock, TextBlock, ToolResult
from silica.fsutil import keep_text_by_content
from silica.images.store import ImageStore

UNDECODABLE_RUN = 32
"""U+FFFD characters in a row from which a run is shown as one marker (shorter than the run)."""

_RUN = "\ufffd" * UNDECODABLE_RUN
_REST_OF_RUN = re.compile("\ufffd*")
_NAME = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass(frozen=True)
class Kept:
    """A tool's result as the conversation keeps it.

    ``content``: the blocks of the ``ToolResultBlock``. ``images``: for each image of the
    result, in order, the file the store keeps it in (``None``: not kept). ``output``: the
    file holding the whole text when it was cut. ``notes``: what the person should be told.
    """

    content: list
    images: list[Path | None] = field(default_factory=list)
    output: Path | None = None
    notes: list[str] = field(default_factory=list)


def compact_undecodable(text: str) -> str:
    """``text`` with each run of ``UNDECODABLE_RUN`` or more U+FFFD replaced by one
    ``[… N undecodable bytes …]`` marker (one U+FFFD stands for about one byte)."""
    start = text.find(_RUN)
    if start < 0:
        return text
    parts: list[str] = []
    done = 0
    while start >= 0:  # str.find skips short runs at C speed; a regex would try each one
        run = _REST_OF_RUN.match(text, start)
        assert run is not None  # the pattern matches the empty string too
        end = run.end()
        parts += [text[done:start], f"[… {end - start:,} undecodable bytes …]"]
        done = end
        start = text.find(_RUN, done)
    parts.append(text[done:])
    return "".join(parts)


def keep_result(result: ToolResult, *, name: str, store: ImageStore, folder: Path,
                max_chars: int) -> Kept:
    """``result`` made ready for the conversation (see the module docstring); never raises
    for a result, whatever the disk does."""
    blocks = [b.model_copy(update={"text": compact_undecodable(b.text)})
              if isinstance(b, TextBlock) else b for b in result.blocks]
    notes: list[str] = []
    output: Path | None = None
    total = sum(len(b.text) for b in blocks if isinstance(b, TextBlock))
    if total > max_chars:
        texts = [b.text for b in blocks if isinstance(b, TextBlock)]  # joined on disk only
        output, problem = _save_output(
            [piece for i, t in enumerate(texts) for piece in ("\n" * bool(i), t)], name, folder)
        where = (f"the whole output is in {output}" if output else
                 f"the whole output could not be saved: {problem}")
        cut = total - max_chars
        blocks = _clip(blocks, max_chars, f"\n[… {cut:,} of {total:,} characters cut; {where} …]\n")
        notes.append(f"the output was {total:,} characters; the model got the first and last "
                     f"{max_chars // 2:,}; {where}")
    own = {id(b) for b in blocks}
    content = _with_audiences(blocks, store.put_message(blocks, alt=name, keep_going=True), own)
    notes += [b.text.strip("[]") for b in content
              if id(b) not in own and isinstance(b, TextBlock)]  # images not kept, and why
    return Kept(content=content, images=image_paths(result, content, store), output=output,
                notes=notes)


def _clip(blocks: list, limit: int, marker: str) -> list:
    """``blocks`` with their text (taken as one string) cut to its first and last
    ``limit / 2`` characters, ``marker`` where the cut is; images kept in place."""
    total = sum(len(b.text) for b in blocks if isinstance(b, TextBlock))
    head_end, tail_start = limit // 2, total - (limit - limit // 2)
    out: list = []
    pos = 0
    marked = False
    for block in blocks:
        if not isinstance(block, TextBlock):
            out.append(block)
            continue
        start, text = pos, block.text
        pos += len(text)
        if pos <= head_end or start >= tail_start:
            out.append(block)  # wholly inside the head or the tail
            continue
        head = text[:max(0, head_end - start)]
        tail = text[max(0, tail_start - start):]
        mark = "" if marked else marker
        marked = True
        if block.audience is not None and mark:  # the marker is for both, like the cut
            pieces = [block.model_copy(update={"text": head}), TextBlock(text=mark),
                      block.model_copy(update={"text": tail})]
        else:
            pieces = [block.model_copy(update={"text": head + mark + tail})]
        out.extend(piece for piece in pieces if piece.text.strip())
    return out


def _with_audiences(given: list, stored: list, own: set[int]) -> list:
    """``stored`` (what ``put_message`` made of ``given``) with each image's audience on the
    ref or notice in its place. Blocks of ``given`` come back as they were (``own``); the
    others stand for its images in order, the last maybe for all those past the store's
    limit, so each takes the audience of the next image."""
    audiences = iter([b.audience for b in given if isinstance(b, ImageBlock)])
    out = []
    for block in stored:
        if id(block) not in own:
            audience = next(audiences, None)
            if audience is not None:
                block = block.model_copy(update={"audience": audience})
        out.append(block)
    return out


def _save_output(pieces: list[str], name: str, folder: Path) -> tuple[Path | None, str]:
    """Write the text of ``pieces`` to ``folder``, named by tool and content, a slice at a
    time; the path, or why not."""
    stem = _NAME.sub("-", name).strip("-")[:40] or "tool"
    try:
        return keep_text_by_content(folder, pieces, ".txt", stem), ""
    except OSError as exc:
        return None, f"{exc.strerror or exc} ({folder})"


def image_paths(result: ToolResult, content: list, store: ImageStore) -> list[Path | None]:
    """For each image of ``result``, the store file of its ref in ``content`` (or ``None``)."""
    kept = {b.ref.id: store.path(b.ref) for b in content if isinstance(b, ImageRefBlock)}
    return [kept.get(hashlib.sha256(b.data).hexdigest()) for b in result.images]
