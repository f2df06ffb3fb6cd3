"""Where a call's heavy work runs: off the event loop, in a small pool of its own.

Checking images (decoding, converting, fitting) can take a second or more of CPU. Run on
the event loop it would stall every other client of a server for that long, so the Toolbox
hands it to this pool. The pool is bounded, so many hostile calls at once queue here
instead of decoding side by side, and the wait counts against the call's deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from silica.blocks import ToolResult

WORKERS = 2
GRACE = 5.0  # seconds past the deadline before a call stops waiting for its work

T = TypeVar("T")
_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="silica-work")
    return _pool


async def off_loop(fn: Callable[[], T], *, deadline: float, what: str) -> T | ToolResult:
    """``fn()`` run in the work pool; an error ``ToolResult`` if it is not done by
    ``deadline`` (a ``time.monotonic()`` value) plus a short grace. The work itself is
    expected to watch the deadline too; a thread cannot be stopped from outside."""
    future = asyncio.get_running_loop().run_in_executor(_executor(), fn)
    try:
        return await asyncio.wait_for(asyncio.shield(future),
                                      max(0.0, deadline - time.monotonic()) + GRACE)
    except TimeoutError:
        return ToolResult.error(f"[{what} did not finish within the call's time; the result "
                                "was dropped. Emit fewer or smaller images]")
