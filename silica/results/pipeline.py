"""From a finished subprocess to a ToolResult, through the registered result processors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pluggy

from silica.blocks import Block, TextBlock, ToolResult
from silica.images.limits import ANTHROPIC, ImageLimits
from silica.images.payload import ImagePayload
from silica.tools.model import RawOutput


@dataclass
class ResultDraft:
    """A result being built: processors rewrite ``text`` and append to ``images``."""

    text: str
    images: list[ImagePayload] = field(default_factory=list)


@dataclass(frozen=True)
class ResultProcessor:
    name: str
    order: int
    process: Callable[[ResultDraft], None]


def result_processors(pm: pluggy.PluginManager) -> list[ResultProcessor]:
    """Every registered processor, in the order they run."""
    found: list[ResultProcessor] = []

    def register(name: str, order: int, process: Callable[[ResultDraft], None]) -> None:
        found.append(ResultProcessor(name, order, process))

    pm.hook.silica_result_processors(register=register)
    return sorted(found, key=lambda p: p.order)


def build_result(raw: RawOutput, pm: pluggy.PluginManager,
                 limits: ImageLimits = ANTHROPIC) -> ToolResult:
    """Run the processors over ``raw.stdout``; images go through ``silica_prepare_image``,
    fitted to ``limits``.

    A non-zero exit, a timeout or cut output is reported in a final text block. A processor
    that raises is reported and skipped: the text stays as it was before it ran.
    """
    draft = ResultDraft(text=raw.stdout.decode("utf-8", errors="replace"))
    notes: list[str] = []
    for proc in result_processors(pm):
        before = (draft.text, list(draft.images))
        try:
            proc.process(draft)
        except Exception as exc:  # a faulty processor must not lose the tool's output
            draft.text, draft.images = before
            notes.append(f"[result processor {proc.name!r} failed and was skipped: {exc}]")
    blocks: list[Block] = []
    if draft.text.strip():
        blocks.append(TextBlock(text=draft.text))
    for payload in draft.images:
        block = pm.hook.silica_prepare_image(payload=payload, limits=limits)
        if block is not None:
            blocks.append(block)
    notes.extend(raw.problems())
    if notes:
        blocks.append(TextBlock(text="\n".join(notes)))
    if not blocks:
        blocks.append(TextBlock(text="(the tool printed nothing)"))
    return ToolResult(blocks=blocks, is_error=raw.failed)
