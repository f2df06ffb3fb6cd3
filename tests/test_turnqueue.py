"""The turn queue's job entries (``silica.serve.turnqueue.Job``): what a front writes, a
worker reads back whole; anything else in the stream is no job, never an exception."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from silica.serve.turnqueue import Job, TurnQueue, lease_key

names = st.text(min_size=1, max_size=40)
refs = st.lists(st.dictionaries(st.text(max_size=10), st.text(max_size=20) | st.integers(),
                                max_size=4), max_size=3)


@given(names, names, st.integers(min_value=1, max_value=10**6), st.text(max_size=500), refs,
       st.none() | st.text(max_size=100), st.text(min_size=1, max_size=30))
def test_a_job_reads_back_as_it_was_written(session, turn, number, text, images, workspace,
                                            entry):
    job = Job(session, turn, number, text, images, workspace)
    assert Job.read(entry, job.fields()) == Job(session, turn, number, text, images,
                                                workspace, entry=entry)


junk = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=10), inner, max_size=3), max_leaves=10)


@given(st.dictionaries(st.text(max_size=10), st.text(max_size=200), max_size=3)
       | st.builds(lambda doc: {"job": json.dumps(doc)}, junk))
def test_anything_else_in_the_stream_is_no_job(fields):
    job = Job.read("1-0", fields)
    if job is not None:  # only a whole job, of the right types, is taken
        assert isinstance(job.session_id, str) and isinstance(job.turn_id, str)
        assert type(job.number) is int and isinstance(job.text, str)
        assert all(isinstance(ref, dict) for ref in job.images)
        assert job.workspace is None or isinstance(job.workspace, str)


def test_a_job_of_the_wrong_types_is_no_job():
    good = json.loads(Job("s", "t", 1, "hi").fields()["job"])
    for key, bad in (("session_id", 5), ("number", "1"), ("number", True), ("images", {}),
                     ("images", ["x"]), ("workspace", 3), ("text", None)):
        assert Job.read("1-0", {"job": json.dumps({**good, key: bad})}) is None
    assert Job.read("1-0", {"job": json.dumps({**good, "extra": 1})}) is None
    assert Job.read("1-0", {"job": "[1, 2"}) is None


# -- on a real redis-server ---------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    from redis_server import RedisServer

    server = RedisServer(tmp_path_factory.mktemp("turnqueue")).start()
    try:
        yield server.url
    finally:
        server.stop()


def test_the_lease_is_one_turns_and_a_late_beat_never_takes_it_back(redis_url):
    async def run():
        queue = await TurnQueue.connect(redis_url, lease=30.0)
        try:
            taken = await queue.take_lease("s1", "turn-a")
            second = await queue.take_lease("s1", "turn-b")
            await queue.drop_lease("s1", "turn-b")  # not the holder: nothing happens
            still = await asyncio.to_thread(queue.leased, "s1")
            await queue.add(Job("s1", "turn-a", 1, "hi"))
            [job] = await queue.read("w1", 10, block=0.1)
            await asyncio.to_thread(queue.beat, "w1", [job])
            ttl = await queue.client.pttl(lease_key("s1"))
            await queue.drop_lease("s1", "turn-a")  # the turn ends...
            await asyncio.to_thread(queue.beat, "w1", [job])  # ...and a beat comes after
            after = await asyncio.to_thread(queue.leased, "s1")
            await queue.done(job)
            left = await queue.client.xpending("silica:turns", "workers")
            return taken, second, still, ttl, after, left
        finally:
            await queue.close()

    taken, second, still, ttl, after, left = asyncio.run(run())
    assert (taken, second, still) == (True, False, True)
    assert 0 < ttl <= 60_000  # renewed to 2 * lease by the beat
    assert after is False  # the session is free for the next message
    assert left["pending"] == 0
