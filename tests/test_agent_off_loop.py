"""Building a request (re-fitting every image with Pillow) runs off the event loop, so a
daemon's other sessions and its health check answer meanwhile. Observed with events, not
times: the fitting waits until the loop has answered."""

from __future__ import annotations

import asyncio
import io
import threading

from PIL import Image
from wire import anthropic_server, text

import silica.agent.loop as loop_module
from silica.agent.loop import Agent
from silica.config import Settings

STUCK = 30  # seconds before a wait gives up: only reached when the loop is blocked


def test_the_loop_answers_while_a_request_is_built(monkeypatch, tmp_path):
    photo = tmp_path / "big.png"
    buf = io.BytesIO()
    Image.new("RGB", (3840, 2160), (40, 90, 160)).save(buf, format="PNG")
    photo.write_bytes(buf.getvalue())
    fitting, answered = threading.Event(), threading.Event()
    seen: list[bool] = []
    real = loop_module.build_request

    def build_request(*args, **kwargs):
        fitting.set()
        seen.append(answered.wait(STUCK))  # the loop must run while this waits
        return real(*args, **kwargs)

    monkeypatch.setattr(loop_module, "build_request", build_request)

    async def other_work() -> None:  # e.g. another session's event, /api/health
        await asyncio.to_thread(fitting.wait, STUCK)
        answered.set()

    async def both() -> str:
        agent = Agent.start(Settings(provider="anthropic"))
        helper = asyncio.create_task(other_work())
        answer = await agent.send("what is this?", [photo])
        await helper
        return answer

    with anthropic_server([text("A blue picture.")]) as srv:
        srv.use(monkeypatch)
        assert asyncio.run(both()) == "A blue picture."
    assert seen == [True]
