"""A call's requests for input, as the MCP connection sees them: who answers them, for how
long, how many came, and what silica answered itself.

    asking = CallAsking(elicit, asyncio.get_running_loop(), timeout)   # on the caller's loop
    answer = await asking.ask(request)            # on the connection's loop, per request
    result = noted(result, asking.note(server))   # what silica declined, after the content

``ask`` runs the caller's ``Asker`` on the caller's loop (the connection lives on the
manager's own), pauses the call's own deadline while the person reads, declines past
``MAX_ASKS`` requests in one call or ``timeout`` seconds, and checks an accepted answer
against the form (``silica.mcp.elicit.check_answer``). ``ASKING`` is the call a request
belongs to, when the request comes in on that call's task (the 2026-07-28 protocol).
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from dataclasses import dataclass, field

from silica.blocks import TextBlock, ToolResult
from silica.elicitation import Answer, Asker, Elicitation
from silica.mcp.elicit import ElicitationError, check_answer

MAX_ASKS = 20  # requests for values one call may make; the rest are declined
ELICIT_TIMEOUT = 300.0  # seconds the person has to answer, unless the caller says


@dataclass(eq=False)
class CallAsking:
    """A call in flight as its server's requests for values see it: who answers them (the
    caller's ``Asker``, run on the caller's loop), for how long, how many came, and why
    silica answered some itself. Its methods run on the manager's loop."""

    asker: Asker | None
    loop: asyncio.AbstractEventLoop | None
    timeout: float = ELICIT_TIMEOUT
    asked: int = 0
    declined: dict[str, int] = field(default_factory=dict)
    deadline: asyncio.Timeout | None = None  # the call's: pushed back while the person reads
    _one: asyncio.Lock = field(default_factory=asyncio.Lock)  # one question at a time

    async def ask(self, request: Elicitation) -> Answer:
        self.asked += 1
        if self.asked > MAX_ASKS:
            return self.decline(f"more than {MAX_ASKS} requests for input in one call")
        async with self._one:  # a batch (2026-07-28) comes at once; the person reads one
            return await self._ask(request)

    async def _ask(self, request: Elicitation) -> Answer:
        if self.asker is None or self.loop is None:
            return self.decline("nobody can be asked here")
        loop, asker, deadline = asyncio.get_running_loop(), self.asker, self.deadline
        started = loop.time()
        paused = deadline.when() if deadline is not None and not deadline.expired() else None
        if deadline is not None and paused is not None:  # the call waits for the person
            deadline.reschedule(None)

        async def put() -> Answer:
            return await asker(request)

        asked = put()
        try:
            future = asyncio.run_coroutine_threadsafe(asked, self.loop)
        except RuntimeError:  # the caller's loop is closed: nobody waits for the answer
            asked.close()
            return self.decline("nobody can be asked here")
        try:
            async with asyncio.timeout(self.timeout):
                answer = await asyncio.wrap_future(future)
        except TimeoutError:
            future.cancel()
            return self.decline(f"no answer within {self.timeout:g} s")
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:  # the front end's bug: the server is told no
            return self.decline(f"asking failed: {exc}")
        finally:
            if deadline is not None and paused is not None and not deadline.expired():
                deadline.reschedule(paused + loop.time() - started)
        if answer.reason:
            self.declined[answer.reason] = self.declined.get(answer.reason, 0) + 1
        if answer.action != "accept":
            return Answer(answer.action, reason=answer.reason)
        try:
            return Answer("accept", check_answer(request, answer.content or {}))
        except ElicitationError as exc:
            return self.decline(f"the answer did not fit the form ({exc})")

    def decline(self, reason: str) -> Answer:
        self.declined[reason] = self.declined.get(reason, 0) + 1
        return Answer("decline", reason=reason)

    def note(self, server: str) -> str:
        """What silica answered on the person's behalf, for the end of the call's result."""
        said = [f"{reason} ({n} times)" if n > 1 else reason
                for reason, n in self.declined.items()]
        if not said:
            return ""
        return (f"[requests for input from the MCP server {server!r} that silica answered "
                f"itself: {'; '.join(said)}]")


ASKING: ContextVar[CallAsking | None] = ContextVar("silica_mcp_asking", default=None)


def noted(result: ToolResult, note: str) -> ToolResult:
    """``result`` with ``note`` after its content (the server's order is kept)."""
    if not note:
        return result
    return result.model_copy(update={"blocks": [*result.blocks, TextBlock(text=note)]})
