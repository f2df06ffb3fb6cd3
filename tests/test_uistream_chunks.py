"""The AI SDK UI stream's two parsers, under hypothesis: a turn's events made chunks
(``silica.serve.uistream.TurnChunks``) keep the client's ordering rules whatever the events,
and a chat request body (``silica.serve.uichat.parse_chat``) is a request or a clear
``ApiError``, never anything else. The AI SDK's own parser reads real streams in
tests/test_uistream_npm.py."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from silica.serve.errors import ApiError
from silica.serve.replay import TurnLog, TurnLogs
from silica.serve.uichat import MAX_PARTS, ChatBody, parse_chat
from silica.serve.uistream import TurnChunks

TURN = "t1"
# the keys each chunk type may have (the AI SDK's uiMessageChunkSchema is strict)
CHUNK_KEYS = {
    "start": {"type", "messageId", "messageMetadata"},
    "start-step": {"type"},
    "text-start": {"type", "id"},
    "text-delta": {"type", "id", "delta"},
    "text-end": {"type", "id"},
    "tool-input-available": {"type", "toolCallId", "toolName", "input", "dynamic"},
    "tool-approval-request": {"type", "approvalId", "toolCallId"},
    "tool-output-available": {"type", "toolCallId", "output", "dynamic"},
    "tool-output-error": {"type", "toolCallId", "errorText", "dynamic"},
    "tool-output-denied": {"type", "toolCallId"},
    "file": {"type", "url", "mediaType"},
    "data-tool-note": {"type", "data"},
    "error": {"type", "errorText"},
    "finish-step": {"type"},
    "finish": {"type", "finishReason", "messageMetadata"},
}
REQUIRED = {"start": {"type"}, "finish": {"type"}}


def check_order(chunks: list[dict], *, inputs: set[str] | None = None) -> None:
    """The rules the AI SDK's client holds a stream to (processUIMessageStream), and ours:
    every text and step that opens closes, nothing after finish (``inputs``: tool calls
    the client's message already has, from a stream that paused: the step goes on)."""
    assert chunks and chunks[0]["type"] == "start"
    open_text: set[str] = set()
    step = inputs is not None
    inputs = set(inputs or ())
    finished = False
    for chunk in chunks:
        kind = chunk["type"]
        assert not finished, f"{kind} after finish"
        assert kind in CHUNK_KEYS, kind
        assert set(chunk) <= CHUNK_KEYS[kind], chunk
        assert set(chunk) >= REQUIRED.get(kind, CHUNK_KEYS[kind]), chunk
        if kind == "start-step":
            assert not step
            step = True
        elif kind == "finish-step":
            assert step and not open_text
            step = False
        elif kind == "text-start":
            assert step and chunk["id"] not in open_text
            open_text.add(chunk["id"])
        elif kind in ("text-delta", "text-end"):
            assert chunk["id"] in open_text, f"{kind} of a text part not open"
            if kind == "text-end":
                open_text.discard(chunk["id"])
        elif kind == "tool-input-available":
            assert step
            inputs.add(chunk["toolCallId"])
        elif kind.startswith("tool-"):
            assert chunk["toolCallId"] in inputs, f"{kind} before its input"
        elif kind == "finish":
            assert not step and not open_text
            finished = True
        json.dumps(chunk)  # JSON all through
    assert finished


# -- events ---------------------------------------------------------------------------------

ids = st.sampled_from(["a", "b", "c"])
texts = st.text(min_size=0, max_size=8)
image = st.fixed_dictionaries({"url": st.just("/sessions/s/images/x"),
                               "mime": st.just("image/png"), "width": st.integers(1, 9),
                               "height": st.integers(1, 9)})
turn_ids = st.sampled_from([TURN, TURN, TURN, "other"])


def event(kind: str, **fields) -> st.SearchStrategy:
    return st.tuples(st.just(kind), st.fixed_dictionaries({"turn_id": turn_ids, **fields}))


events = st.one_of(
    event("text_delta", text=texts),
    event("tool_call", call_id=ids, name=st.just("picture"), input=st.just({"x": 1})),
    event("tool_result", call_id=ids, name=st.just("picture"), is_error=st.booleans(),
          text=texts, images=st.lists(image, max_size=2)),
    event("image", call_id=ids, url=st.just("/sessions/s/images/x"), mime=st.just("image/png")),
    event("tool_note", call_id=ids, text=texts),
    event("approval", call_id=ids, id=st.sampled_from(["p1", "p2"])),
    event("approval_done", id=st.sampled_from(["p1", "p2"]),
          decision=st.sampled_from(["once", "always", "deny"])),
    event("error", code=st.just("provider_error"), message=texts),
    event("elicitation", id=ids),
    st.tuples(st.just("text_delta"), st.just("not a dict")),
)


def run(sequence) -> list[dict]:
    chunks = TurnChunks(TURN, base_url="http://127.0.0.1:1")
    out: list[dict] = []
    for name, data in [("message", {"turn_id": TURN, "session_id": "s", "turn": 1}),
                       *sequence, ("turn_end", {"turn_id": TURN, "stop_reason": "end_turn",
                                                "usage": {"input_tokens": 1}})]:
        shared = chunks.delta_only(name, data)  # the streams' shared bytes are the same
        made = chunks.feed(name, data)
        if shared is not None:
            assert made == [{"type": "text-delta", "id": shared, "delta": data["text"]}]
        out += made
    return out


@settings(max_examples=400)
@given(st.lists(events, max_size=30))
def test_any_events_make_a_stream_the_client_accepts(sequence):
    chunks = run(sequence)
    check_order(chunks)
    said = "".join(d["text"] for n, d in sequence if n == "text_delta" and isinstance(d, dict)
                   and d["turn_id"] == TURN)
    assert "".join(c["delta"] for c in chunks if c["type"] == "text-delta") == said
    outputs = [c["toolCallId"] for c in chunks
               if c["type"] in ("tool-output-available", "tool-output-error",
                                "tool-output-denied")]
    assert len(outputs) == len(set(outputs))  # one answer per call
    for chunk in chunks:
        if chunk["type"] == "file":
            assert chunk["url"].startswith("http://127.0.0.1:1/sessions/")


@settings(max_examples=300)
@given(st.lists(events, max_size=30), st.integers(0, 30))
def test_a_stream_that_goes_on_after_a_pause_is_accepted_too(sequence, cut):
    """What a client gets after an approval: the events it had fed silently, then the
    rest; the two streams together read as one message."""
    events_all = [("message", {"turn_id": TURN, "session_id": "s", "turn": 1}), *sequence,
                  ("turn_end", {"turn_id": TURN, "stop_reason": "end_turn", "usage": {}})]
    cut = min(cut, len(events_all) - 1) or 1
    first = TurnChunks(TURN)
    head = [c for name, data in events_all[:cut] for c in first.feed(name, data)]
    if not first.ended:
        head += first.pause()
    check_order(head)
    second = TurnChunks(TURN)
    for name, data in events_all[:cut]:
        second.feed(name, data)
    if second.ended:
        return
    tail = second.resume()
    for name, data in events_all[cut:]:
        tail += second.feed(name, data)
    # the client's message holds the parts of the first stream: inputs it already has
    known = {c["toolCallId"] for c in head if c["type"] == "tool-input-available"}
    check_order(tail, inputs=known)
    text_ids = {c["id"] for c in head if c["type"] == "text-start"}
    assert not text_ids & {c["id"] for c in tail if c["type"] == "text-start"}


def test_a_step_ends_where_the_model_speaks_again_after_tool_results():
    chunks = run([
        ("text_delta", {"turn_id": TURN, "text": "Let me look."}),
        ("tool_call", {"turn_id": TURN, "call_id": "a", "name": "picture", "input": {}}),
        ("tool_result", {"turn_id": TURN, "call_id": "a", "name": "picture",
                         "is_error": False, "text": "", "images": []}),
        ("text_delta", {"turn_id": TURN, "text": "Green."}),
    ])
    assert [c["type"] for c in chunks] == [
        "start", "start-step", "text-start", "text-delta", "text-end",
        "tool-input-available", "tool-output-available", "finish-step", "start-step",
        "text-start", "text-delta", "text-end", "finish-step", "finish"]
    assert chunks[-1]["finishReason"] == "stop"
    assert chunks[-1]["messageMetadata"]["usage"] == {"input_tokens": 1}


# -- the turn turn_log -----------------------------------------------------------------------


@settings(max_examples=200)
@given(st.lists(st.one_of(event("text_delta", text=texts),
                          event("tool_call", call_id=ids, name=st.just("x"),
                                input=st.just({}))), max_size=30),
       st.integers(0, 30))
def test_a_turn_log_replays_the_same_stream_as_the_live_events(sequence, split):
    """A client that came in mid-turn reads the turn_log (text pieces joined) and then the
    live events: the text it shows is what a client there from the start shows."""
    logs = TurnLogs()
    start = ("message", {"turn_id": TURN, "session_id": "s", "turn": 1})
    live = [start, *[(n, d) for n, d in sequence if d["turn_id"] == TURN]]
    split = min(split, len(live))
    for name, data in live[:split]:
        logs.heard("s", name, data)
    turn_log = logs.running("s")
    seen = turn_log.snapshot() if turn_log else []
    later = live[split:]
    for name, data in later:
        logs.heard("s", name, data)
    if turn_log is not None:
        assert len(turn_log.snapshot()) >= len(seen)  # later text never joins earlier entries
        assert turn_log.snapshot()[:len(seen)] == seen
    whole, joined = TurnChunks(TURN), TurnChunks(TURN)
    a = [c for n, d in live for c in whole.feed(n, d)]
    b = [c for n, d in (seen + later if split else live) for c in joined.feed(n, d)]

    def text(chunks):
        return "".join(c.get("delta", "") for c in chunks)

    assert text(a) == text(b)
    assert [c["toolCallId"] for c in a if "toolCallId" in c] == \
        [c["toolCallId"] for c in b if "toolCallId" in c]


def test_a_turn_log_ends_with_its_turn_and_keeps_no_more_than_its_budget(monkeypatch):
    import silica.serve.replay as replay_module

    monkeypatch.setattr(replay_module, "MAX_BYTES", 100)
    logs = TurnLogs()
    logs.heard("s", "message", {"turn_id": TURN})
    turn_log = logs.running("s")
    assert isinstance(turn_log, TurnLog)
    logs.heard("s", "text_delta", {"turn_id": TURN, "text": "x" * 200})
    assert turn_log.overflowed and turn_log.entries == []
    logs.heard("s", "turn_end", {"turn_id": TURN})
    assert logs.running("s") is None and turn_log.ended


# -- the chat request body -----------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=20)
parts = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": json_values | st.text()}),
    st.fixed_dictionaries({"type": st.just("file"), "mediaType": json_values,
                           "url": st.sampled_from(["data:image/png;base64,AAAA",
                                                   "data:image/jpeg;base64,AA",
                                                   "https://example.com/x.png", "ftp://x",
                                                   "data:,x"])}),
    st.fixed_dictionaries({"type": json_values}),
    json_values)
messages = st.fixed_dictionaries({"id": st.text(max_size=4),
                                  "role": st.sampled_from(["user", "assistant", "system", 3]),
                                  "parts": st.lists(parts, max_size=5) | json_values})
bodies = st.fixed_dictionaries(
    {"id": st.sampled_from(["chat1", "../x", "", 5]),
     "messages": st.lists(messages, max_size=3) | json_values},
    optional={"trigger": st.sampled_from(["submit-message", "regenerate-message", None, 1]),
              "messageId": json_values, "model": json_values, "workspace": json_values,
              "other": json_values})


@settings(max_examples=500)
@given(bodies | json_values)
def test_any_body_is_a_request_or_a_clear_refusal(tmp_path_factory, body):
    home = tmp_path_factory.getbasetemp()
    try:
        parsed = parse_chat(body, home)
    except ApiError as exc:
        assert 400 <= exc.status < 500 and exc.code and exc.message
        return
    assert isinstance(parsed, ChatBody) and parsed.session_id == "chat1"
    assert (parsed.message is None) == bool(parsed.approvals)


@given(st.lists(st.text(max_size=20), min_size=1, max_size=5))
def test_the_last_user_message_is_taken_and_the_history_left_aside(tmp_path_factory, said):
    history = [{"id": "m0", "role": "user", "parts": [{"type": "text", "text": "old"}]},
               {"id": "m1", "role": "assistant", "parts": [{"type": "text", "text": "hi"}]}]
    last = {"id": "m2", "role": "user",
            "parts": [{"type": "text", "text": t} for t in said]
            + [{"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,AA",
                "filename": "a.png"}]}
    parsed = parse_chat({"id": "chat1", "messages": [*history, last],
                         "trigger": "submit-message"}, tmp_path_factory.getbasetemp())
    assert parsed.message == {"message": "\n".join(said), "images": [
        {"data": "data:image/png;base64,AA", "mime": "image/png", "name": "a.png"}]}


def test_too_many_parts_and_a_lying_data_url_are_refused(tmp_path):
    many = {"id": "chat1", "trigger": "submit-message", "messages": [
        {"id": "m", "role": "user", "parts": [{"type": "text", "text": "x"}] * 10_000}]}
    try:
        parse_chat(many, tmp_path)
    except ApiError as exc:
        assert exc.status == 413 and exc.code == "too_many_parts"
        assert f"{MAX_PARTS:,}" in exc.message
    else:
        raise AssertionError("10,000 parts were taken")
    lying = {"id": "chat1", "messages": [{"id": "m", "role": "user", "parts": [
        {"type": "file", "mediaType": "image/png", "url": "data:image/jpeg;base64,AA"}]}]}
    try:
        parse_chat(lying, tmp_path)
    except ApiError as exc:
        assert exc.status == 422 and exc.code == "invalid_image"
    else:
        raise AssertionError("a data: URL lying about its type was taken")
