"""Event ids and resume points, as a client gives them (``Last-Event-ID``, ``?after``,
Socket.IO's ``after``): parsed within bounds, never raising; the reset rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.requests import Request

from silica.serve.errors import ApiError
from silica.serve.eventlog import (
    MAX_ID,
    WINDOW,
    ZERO,
    IdClock,
    Span,
    Window,
    before,
    format_id,
    must_reset,
    parse_id,
)
from silica.serve.sse import resume_point

U64 = st.integers(min_value=0, max_value=2 ** 64 - 1)


@given(U64, U64)
def test_an_id_reads_back_as_it_was_written(ms, seq):
    assert parse_id(format_id((ms, seq))) == (ms, seq)


@given(st.one_of(st.text(max_size=200), st.binary(max_size=60), st.integers(), st.none()))
def test_anything_else_is_no_id_and_never_raises(value):
    key = parse_id(value)
    if key is not None:
        assert isinstance(value, str) and len(value) <= MAX_ID
        assert format_id(key) == value.strip()


def test_numbers_past_64_bits_and_long_ids_are_refused():
    assert parse_id(f"{2 ** 64}-0") is None
    assert parse_id("1-" + "0" * 40) is None
    assert parse_id("1-1") == (1, 1)


def request(headers: dict[str, str], query: str = "") -> Request:
    return Request({"type": "http", "query_string": query.encode(),
                    "headers": [(k.lower().encode(), v.encode("latin-1"))
                                for k, v in headers.items()]})


VISIBLE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=300)


@given(VISIBLE)
def test_a_last_event_id_header_is_an_id_or_a_400(value):
    try:
        key = resume_point(request({"Last-Event-ID": value}))
    except ApiError as exc:
        assert exc.status == 400 and exc.code == "invalid_event_id"
        assert value.strip() and parse_id(value) is None
        return
    assert key == (parse_id(value) if value.strip() else None)


@given(U64, U64, U64, U64)
def test_the_header_wins_over_the_query(a, b, c, d):
    got = resume_point(request({"Last-Event-ID": f"{a}-{b}"}, f"after={c}-{d}"))
    assert got == (a, b)
    assert resume_point(request({}, f"after={c}-{d}")) == (c, d)


@given(st.lists(st.booleans(), min_size=1, max_size=50))
def test_in_process_ids_only_grow(steps):
    clock = IdClock()
    ids = [parse_id(clock.next()) for _ in steps]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


@given(st.integers(min_value=1, max_value=3 * WINDOW), st.data())
def test_a_window_resets_exactly_the_ids_whose_next_events_are_gone(count, data):
    window = Window()
    keys = [(1000 + i, 0) for i in range(count)]
    for key in keys:
        window.add(key, "text_delta", {"text": "x"})
    kept = [entry[0] for entry in window.entries]
    index = data.draw(st.integers(min_value=0, max_value=count - 1))
    after = keys[index]
    gone = keys.index(kept[0]) > index + 1  # an event after it was dropped
    assert must_reset(after, window.span()) is gone
    if not gone:
        assert [e[0] for e in window.after(after)] == keys[index + 1:]
    assert must_reset(before(kept[0]), window.span()) is False


def test_ids_of_no_stream_or_from_elsewhere_reset():
    assert must_reset((5, 0), Span(None, None)) is True
    assert must_reset(ZERO, Span(None, None)) is False
    assert must_reset((9, 0), Span((1, 0), (4, 0))) is True  # after the newest: not ours
    assert must_reset((1, 0), Span((3, 0), (4, 0))) is True  # older stream, none trimmed
    assert must_reset((2, 0), Span((3, 0), (4, 0), dropped=(2, 0))) is False


@pytest.mark.parametrize("bad", ["", "x", "1", "-1-0", "1-0-0", "1_0"])
def test_a_query_that_is_not_an_id_is_a_400_or_nothing(bad):
    if not bad:
        assert resume_point(request({}, "after=")) is None
        return
    with pytest.raises(ApiError):
        resume_point(request({}, f"after={bad}"))
