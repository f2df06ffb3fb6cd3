"""The last delta of a reply goes out before the turn's end-of-reply work: the session is
saved off the event loop while the reply's last ``text_delta`` reaches the listeners, and
``turn_end`` still comes after it, with the whole reply saved. Observed with events, not
times: the save waits until a listener has heard the whole reply. The provider's pieces are
handed on when its stream has ended, as when the last delta and the end of the stream
arrive in one read (nothing in between lets the event loop run)."""

from __future__ import annotations

import asyncio
import threading

from hypothesis import given, settings
from hypothesis import strategies as st
from wire import anthropic_server, text

import silica.agent.loop as loop_module
from silica.agent.loop import Agent
from silica.agent.sessions import load_session
from silica.config import Settings
from silica.serve.bus import EventBus
from silica.serve.events import Pump, agent_events
from silica.serve.sse import encode as sse_encode

STUCK = 30  # seconds before a wait gives up: only reached when the loop is blocked
REPLY = "The build is green on every platform."


def test_the_last_delta_reaches_listeners_while_the_reply_is_saved(monkeypatch):
    heard_all = threading.Event()
    waited: list[bool] = []
    real = loop_module.save_session

    def save_session(conversation, *args, **kwargs):
        if conversation.messages[-1].role == "assistant":  # the save after the reply
            waited.append(heard_all.wait(STUCK))  # the loop must fan out meanwhile
        return real(conversation, *args, **kwargs)

    monkeypatch.setattr(loop_module, "save_session", save_session)

    async def turn() -> tuple[str, list[str]]:
        bus = EventBus()
        agent = Agent.start(Settings(provider="anthropic"))
        sid = agent.conversation.id
        pump = Pump(bus, sid)
        agent.listen(agent_events(pump, bus, sid, "t1"))
        real_complete = agent.provider.complete

        async def complete(request, on_text=None):
            pieces: list[str] = []
            reply = await real_complete(request, pieces.append)
            for piece in pieces:  # the end of the stream came with the last piece
                on_text(piece)
            return reply

        monkeypatch.setattr(agent.provider, "complete", complete)
        pieces: list[str] = []
        async with bus.subscribe(sid) as stream:
            sending = asyncio.create_task(agent.send("how is the build?"))
            while "".join(pieces) != REPLY:
                got = await stream.next(STUCK)
                assert got is not None, "the reply's deltas never arrived"
                pieces.append(got[1]["text"])
            heard_all.set()
            answer = await sending
            saved = load_session(sid).messages[-1]
            assert saved.role == "assistant" and saved.content[0].text == REPLY
            return answer, pieces

    with anthropic_server([text(REPLY, chunks=["The build ", "is green ", "on every ",
                                                 "platform."])]) as srv:
        srv.use(monkeypatch)
        answer, pieces = asyncio.run(turn())
    assert answer == REPLY and len(pieces) == 4
    assert waited == [True]


# -- the pump: at once when nothing is before it, always in order ---------------------------


def test_an_event_on_an_idle_pump_reaches_the_streams_before_put_returns():
    async def run() -> list:
        bus = EventBus()
        pump = Pump(bus, "s1")
        async with bus.subscribe("s1") as one, bus.subscribe("s1") as two:
            pump.put("text_delta", {"turn_id": "t1", "text": "done."})
            queued = [one.queue.qsize(), two.queue.qsize()]  # no await since the put
            first, second = await one.next(1), await two.next(1)
        assert first == second  # one event, with one id, to both
        assert first[0] == "text_delta" and first[1]["text"] == "done."
        assert first[1]["event_id"]
        assert first.encoded(sse_encode) is second.encoded(sse_encode)  # encoded once
        return queued

    assert asyncio.run(run()) == [1, 1]


class SometimesLater(EventBus):
    """A bus that cannot always publish at once (as a shared bus cannot): the pump must
    then queue, and keep the order."""

    def __init__(self, now: list[bool]) -> None:
        super().__init__()
        self.now = now

    def publish_now(self, session_id, event, data, inline=None) -> bool:
        return (self.now.pop(0) if self.now else True) and \
            super().publish_now(session_id, event, data, inline)

    async def publish(self, session_id, event, data, inline=None) -> None:
        await asyncio.sleep(0)  # a round trip elsewhere
        await super().publish(session_id, event, data, inline)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=30))
def test_a_pump_keeps_the_order_whether_it_publishes_at_once_or_later(steps):
    async def run() -> list[int]:
        bus = SometimesLater([now for now, _ in steps])
        pump = Pump(bus, "s1")
        heard = []
        async with bus.subscribe("s1") as stream:
            for i, (_, pause) in enumerate(steps):
                pump.put("text_delta", {"turn_id": "t1", "text": str(i)})
                if pause:
                    await asyncio.sleep(0)
            await pump.drain()
            while not stream.queue.empty():
                heard.append(int((await stream.next(1))[1]["text"]))
        return heard

    assert asyncio.run(run()) == list(range(len(steps)))
