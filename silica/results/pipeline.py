"""From a finished subprocess to a ToolResult, through the registered result processors."""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import pluggy

from silica.blocks import Block, TextBlock, ToolResult
from silica.images.limits import ANTHROPIC, MB, ImageLimits
from silica.images.payload import ImagePayload
from silica.tools.model import RawOutput
from silica.words import counted


class ResultDraft:
    """A result being built: processors rewrite ``text`` and append to ``images``.

    The output arrives as the bytes the tool wrote, and is decoded (UTF-8, bad bytes
    replaced) the first time a processor reads ``text``: once. A processor that can work on
    bytes reads and sets ``output`` instead, and the output stays bytes for the next one
    (the terminal image processors do; what is left after them is decoded once). Either
    may be read and set at any time: ``output`` after ``text`` was set is that text in
    UTF-8, and ``errors`` says how ``output`` decodes (``"replace"`` for the tool's bytes,
    ``"surrogatepass"`` once they came from text, so that it decodes back to itself).
    """

    __slots__ = ("images", "limits", "_text", "_output", "_errors")

    def __init__(self, text: str | None = None, images: list[ImagePayload] | None = None,
                 *, output: bytes | bytearray | None = None,
                 limits: ImageLimits = ANTHROPIC) -> None:
        self.images: list[ImagePayload] = [] if images is None else images
        self.limits = limits  # what the result is built for: its decoding budgets too
        self._text = text if output is None else None
        self._output = output
        self._errors = "replace"
        if text is None and output is None:
            self._text = ""

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = str(self._output or b"", "utf-8", self._errors)  # one is set
            self._output = None  # the text is what counts now
        return self._text

    @text.setter
    def text(self, value: str) -> None:
        self._text, self._output = value, None

    @property
    def output(self) -> bytes | bytearray:
        if self._output is None:
            self._output = (self._text or "").encode("utf-8", "surrogatepass")
            self._errors = "surrogatepass"
        return self._output

    @output.setter
    def output(self, value: bytes | bytearray) -> None:
        """Bytes that decode as ``output`` did (pieces of it, and ASCII markers)."""
        self._output, self._text = value, None

    @property
    def errors(self) -> str:
        return "surrogatepass" if self._output is None else self._errors

    def state(self) -> tuple:
        """All of it, to put back with ``restore`` (a processor that failed)."""
        return self._text, self._output, self._errors, list(self.images)

    def restore(self, state: tuple) -> None:
        self._text, self._output, self._errors, images = state
        self.images = list(images)


@dataclass(frozen=True)
class ResultProcessor:
    name: str
    order: int
    process: Callable[[ResultDraft], None]


_processors: weakref.WeakKeyDictionary[pluggy.PluginManager,
                                      tuple[tuple, list[ResultProcessor]]] = \
    weakref.WeakKeyDictionary()


def result_processors(pm: pluggy.PluginManager) -> list[ResultProcessor]:
    """Every registered processor, in the order they run: ascending ``order``, then the
    order pluggy calls their plugins in. Of two registered under one name, the first pluggy
    calls wins (the plugin registered later, or a ``tryfirst`` one), so a plugin replaces a
    default processor by registering its name.

    The hook is called once per plugin manager, and again only when its plugins change.
    """
    caller = pm.hook.silica_result_processors
    impls = tuple(caller.get_hookimpls())
    cached = _processors.get(pm)
    if cached is not None and cached[0] == impls:
        return cached[1]
    found: dict[str, ResultProcessor] = {}

    def register(name: str, order: int, process: Callable[[ResultDraft], None]) -> None:
        found.setdefault(name, ResultProcessor(name, order, process))

    caller(register=register)
    processors = sorted(found.values(), key=lambda p: p.order)  # stable: pluggy's order
    _processors[pm] = (impls, processors)
    return processors


def build_result(raw: RawOutput, pm: pluggy.PluginManager,
                 limits: ImageLimits = ANTHROPIC, deadline: float | None = None) -> ToolResult:
    """Run the processors over ``raw.stdout``; images go through ``silica_prepare_image``,
    fitted to ``limits``, within the result's budget (see ``prepare_images``). The output is
    handed to them as bytes and decoded once, by the first that reads it as text (or here).

    ``deadline``: a ``time.monotonic()`` value past which no further image is prepared. A
    non-zero exit, a timeout or cut output is reported in a final text block. A processor
    that raises is reported and skipped: the text stays as it was before it ran.
    """
    draft = ResultDraft(output=raw.stdout, limits=limits)
    notes: list[str] = []
    for proc in result_processors(pm):
        before = draft.state()
        try:
            proc.process(draft)
        except Exception as exc:  # a faulty processor must not lose the tool's output
            draft.restore(before)
            notes.append(f"[result processor {proc.name!r} failed and was skipped: {exc}]")
    blocks: list[Block] = []
    text = draft.text
    if text and not text.isspace():  # not strip(): that would copy all of it
        blocks.append(TextBlock(text=text))
    blocks.extend(prepare_images(draft.images, pm, limits, deadline, subject=raw.subject))
    notes.extend(raw.problems())
    if notes:
        blocks.append(TextBlock(text="\n".join(notes)))
    if not blocks:
        blocks.append(TextBlock(text=f"({raw.subject} printed nothing)"))
    return ToolResult(blocks=blocks, is_error=raw.failed)


def prepare_images(payloads: list[ImagePayload], pm: pluggy.PluginManager,
                   limits: ImageLimits = ANTHROPIC,
                   deadline: float | None = None, *, subject: str = "the tool") -> list[Block]:
    """Each payload through ``silica_prepare_image``, in order, within one result's budget.
    ``subject`` names what emitted them in the advice of a notice ("Have the tool ...").

    Before an image is handed on, its header is read (``silica.images.budget.inspect``); no
    pixel is decoded here. An image is dropped, undecoded, with a notice starting
    ``[image dropped:`` in its place:

    - when ``deadline`` (``time.monotonic()``) has passed: it and all after it, in one notice;
    - past ``limits.max_images_per_result``: all after it, in one notice;
    - when it alone is over ``limits.max_pixels`` or ``limits.max_decoded_bytes``: its own
      notice, the one ``prepare_image`` gives (so no plugin ever decodes it);
    - when it would take the images prepared so far past ``limits.max_result_decoded_bytes``:
      one notice, where the first such image was, counts them all; a smaller one after it
      may still fit.

    Never returns base64 text; never raises for an image (a plugin's own error aside).
    """
    return [p.block for p in place_images(payloads, pm, limits, deadline, subject=subject)]


class PlacedImage(NamedTuple):
    """A block ``prepare_images`` made, with the index of the payload it stands in for
    (``image``; the first, for a notice that counts several) and whether it stands for that
    one alone."""

    image: int
    block: Block
    alone: bool


def place_images(payloads: list[ImagePayload], pm: pluggy.PluginManager,
                 limits: ImageLimits = ANTHROPIC, deadline: float | None = None, *,
                 subject: str = "the tool") -> list[PlacedImage]:
    """``prepare_images``, each block with where it belongs: a caller holding text between
    the images (an MCP result) puts each block back in its image's place."""
    if not payloads:
        return []
    from silica.images import budget  # Pillow is imported only when there are images

    blocks: list[PlacedImage | None] = []
    spent, over, over_at, over_index = 0, 0, -1, 0
    for index, payload in enumerate(payloads):
        left = len(payloads) - index
        if deadline is not None and time.monotonic() >= deadline:
            blocks.append(PlacedImage(index, _notice(
                f"the call's time ran out while checking images; {_images(left)} not checked "
                f"or sent. Have {subject} emit fewer or smaller images, or give it more time"),
                left == 1))
            break
        if index >= limits.max_images_per_result:
            blocks.append(PlacedImage(index, _notice(
                f"this result holds {len(payloads)} images, over the limit of "
                f"{limits.max_images_per_result} per result (max_images_per_result); the last "
                f"{_images(left)} not checked or sent. Have {subject} emit fewer images"),
                left == 1))
            break
        cost = budget.inspect(payload, limits)
        refusal = cost.refusal(limits) if cost is not None else None
        if refusal:
            blocks.append(PlacedImage(index, _notice(refusal), True))
            continue
        weight = cost.bytes if cost is not None else 0
        if spent + weight > limits.max_result_decoded_bytes:
            over += 1
            if over_at < 0:
                over_at, over_index = len(blocks), index
                blocks.append(None)  # the notice, once it is known how many it counts
            continue
        spent += weight
        block = pm.hook.silica_prepare_image(payload=payload, limits=limits)
        if block is not None:
            blocks.append(PlacedImage(index, block, True))
    if over:
        blocks[over_at] = PlacedImage(over_index, _notice(
            f"{_images(over)} not decoded or sent: with the images before, this result would "
            f"take over {limits.max_result_decoded_bytes / MB:,.0f} MiB to decode "
            f"(max_result_decoded_bytes). Have {subject} emit fewer or smaller images"),
            over == 1)
    return [block for block in blocks if block is not None]


def _notice(text: str) -> TextBlock:
    return TextBlock(text=f"[image dropped: {text}]")


def _images(count: int) -> str:
    return counted(count, "image was", "images were")
