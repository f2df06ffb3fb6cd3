"""A long session keeps in memory what its next request needs, not what every turn made.

Through the real agent, the real ``anthropic`` SDK and the local Messages server: a
screenshot tool returns a different picture every turn, and after many turns the fitted
images the process holds are those the last request sent, not one for every image seen.
"""

from __future__ import annotations

import asyncio
import base64
import io

from conftest import script_tool, simple_spec
from PIL import Image
from wire import anthropic_server, text, tool_call

from silica.agent.loop import Agent
from silica.agent.render import FIT_CACHE
from silica.config import Settings

TURNS = 12


def picture(n: int) -> bytes:
    """A 1600x1000 PNG, different for each ``n`` (no two share a store id)."""
    img = Image.new("RGB", (1600, 1000), (n * 17 % 256, 90, 200 - n))
    img.putpixel((n, n), (255, 255, 255))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def sent_images(body: dict) -> tuple[list[bytes], int]:
    """The images a request body carries (decoded) and how many are ``[Earlier image`` text."""
    images, earlier = [], 0
    for message in body["messages"]:
        for block in message["content"]:
            inner = block.get("content", []) if block["type"] == "tool_result" else [block]
            for part in inner:
                if part.get("type") == "image":
                    images.append(base64.b64decode(part["source"]["data"]))
                elif "[Earlier image" in part.get("text", ""):
                    earlier += 1
    return images, earlier


def test_a_long_session_holds_only_the_fits_its_last_request_sent(monkeypatch, user_tools):
    shots = user_tools / "shots"
    shots.mkdir()
    for n in range(1, TURNS + 1):
        (shots / f"{n}.png").write_bytes(picture(n))
    body = f"""
        import base64, json, sys
        from pathlib import Path
        n = sys.argv[-1].split("=", 1)[-1]
        data = (Path({str(shots)!r}) / f"{{n}}.png").read_bytes()
        print(json.dumps({{"media_type": "image/png", "base64": base64.b64encode(data).decode()}}))
    """
    script_tool(user_tools, "screenshot.py", simple_spec("screenshot", n="string"), body=body)
    script = []
    for n in range(1, TURNS + 1):
        script += [tool_call("screenshot", {"n": str(n)}), text(f"answer {n}")]
    FIT_CACHE.clear()
    with anthropic_server(script) as srv:
        srv.use(monkeypatch)
        agent = Agent.start(Settings(provider="anthropic"))

        async def chat() -> None:  # one event loop for the session, as silica chat has
            for n in range(1, TURNS + 1):
                await agent.send(f"turn {n}: what is on the screen?")

        asyncio.run(chat())
    images, earlier = sent_images(srv.requests[-1])
    assert earlier >= TURNS // 2 and images  # the old ones went as text, the new as images
    folder = str(agent.store.folder)
    held = [key for key in FIT_CACHE._items if key[0] == folder]
    # one fit per image the last request sent: none for the images now sent as text, and
    # none left over from an earlier aging step (the full-size fit of a now low-res image)
    assert len(held) == len(images)
    assert FIT_CACHE.bytes == sum(len(data) for data in images)
