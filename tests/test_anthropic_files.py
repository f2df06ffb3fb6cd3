"""The Anthropic Files API (``[anthropic] files_api = true``) through the real ``anthropic``
SDK, against a local Messages API that speaks ``/v1/files``: each image uploaded once per
session, a refused upload sent inline, a lost file uploaded again once, and a deleted
session's files deleted."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys

import pytest
from wire import anthropic_server, error, text
from wire.anthropic_wire import FILES_BETA, file_ids
from wire.samples import b64decode, png_block

from silica.agent.conversation import Conversation
from silica.agent.sessions import delete_session, save_session, session_exists, session_folder
from silica.blocks import ImageBlock, TextBlock
from silica.config import Settings
from silica.hookspecs import hookimpl
from silica.plugins import get_plugin_manager
from silica.providers.anthropic import AnthropicProvider
from silica.providers.anthropic_files import files_path
from silica.providers.base import ProviderError, Request, RequestMessage, RequestToolResult

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

FILES_ON = Settings.model_validate({"anthropic": {"files_api": True}})
SESSION = "20250601-120000-abcdef"
A = png_block(40, 30, (255, 0, 0))
A_AGED = png_block(20, 15, (255, 0, 0))  # the same screenshot after an aging step: new bytes
B = png_block(40, 30, (0, 0, 255))
C = png_block(40, 30, (0, 160, 0))
D = png_block(40, 30, (90, 90, 90))


@pytest.fixture(autouse=True)
def no_real_credentials(monkeypatch, tmp_path):
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL",
                "ANTHROPIC_PROFILE", "ANTHROPIC_CUSTOM_HEADERS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))


def chat(*turns: list, session_id: str = SESSION) -> Request:
    """A request whose user turns hold ``turns`` (blocks), each answered but the last; an
    image in a list of its own is a tool's result."""
    messages: list[RequestMessage] = []
    for n, blocks in enumerate(turns, start=1):
        if n > 1:
            messages.append(RequestMessage(role="assistant",
                                           content=[TextBlock(text=f"Seen turn {n - 1}.")]))
        content = [TextBlock(text=f"Turn {n}: what changed?")]
        for block in blocks:
            if isinstance(block, list):
                content.append(RequestToolResult(call_id=f"c{n}", name="screenshot",
                                                 content=[TextBlock(text="shot"), *block]))
            else:
                content.append(block)
        messages.append(RequestMessage(role="user", content=content))
    return Request(model="claude-sonnet-5-5", system="Be brief.", messages=messages,
                   max_tokens=64, session_id=session_id)


def send(provider: AnthropicProvider, request: Request) -> str:
    return asyncio.run(provider.complete(request)).text


def sent(srv) -> list:
    """The message requests the server received, as ``Received``."""
    return [r for r in srv.received if r.path.split("?")[0] == "/v1/messages"]


def uploaded(srv) -> list[bytes]:
    return [u.data for u in srv.files.uploads]


def inline(body) -> list[bytes]:
    """The bytes of every base64 image in a request body."""
    found: list[bytes] = []

    def walk(value) -> None:
        if isinstance(value, dict):
            source = value.get("source")
            if value.get("type") == "image" and isinstance(source, dict) \
                    and source.get("type") == "base64":
                found.append(b64decode(source["data"]))
            for inner in value.values():
                walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    walk(body)
    return found


def remembered(home) -> dict:
    return json.loads(files_path(SESSION, home).read_text())["files"]


def without_marks(value):
    if isinstance(value, dict):
        return {k: without_marks(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_marks(v) for v in value]
    return value


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "silica.providers" and r.levelno == logging.WARNING]


# -- uploads -----------------------------------------------------------------------------


def test_each_image_is_uploaded_once_per_session_and_named_by_its_file_id(monkeypatch, home):
    turns = [[A], [B], [[C]]]
    with anthropic_server([text("ok")] * 4) as srv:
        srv.use(monkeypatch)
        provider = AnthropicProvider(FILES_ON)
        for n in range(1, 4):
            assert send(provider, chat(*turns[:n])) == "ok"
        # an aging step gives the first screenshot new bytes: that variant is uploaded too
        aged = [[A_AGED], [B], [[C]], [D]]
        send(AnthropicProvider(FILES_ON), chat(*aged))  # a new process resuming the session
    # one turn's new images are uploaded at once, so only the turns' order is fixed
    got = uploaded(srv)
    assert got[:3] == [A.data, B.data, C.data]
    assert sorted(got[3:]) == sorted([A_AGED.data, D.data])
    requests = sent(srv)
    assert len(requests) == 4
    for request in requests:
        assert FILES_BETA in request.headers["anthropic-beta"]
        assert inline(request.body) == [] and '"base64"' not in request.raw.decode()
        assert SESSION not in request.raw.decode()  # the session id is silica's own
        assert set(file_ids(request.body)) <= set(srv.files.stored)
    by_data = {u.data: u.file_id for u in srv.files.uploads}
    assert file_ids(requests[2].body) == [by_data[A.data], by_data[B.data], by_data[C.data]]
    assert file_ids(requests[3].body) == [by_data[x.data] for x in (A_AGED, B, C, D)]
    # breakpoints still placed; the history a request repeats is the same, file ids and all
    first, second, third = (r.body for r in requests[:3])
    assert "cache_control" in first["system"][0]
    assert "cache_control" in third["messages"][-1]["content"][-1]
    assert without_marks(second["messages"][:1]) == without_marks(first["messages"])
    assert without_marks(third["messages"][:3]) == without_marks(second["messages"])
    ids = remembered(home)[srv.base_url]
    assert sorted(ids.values()) == sorted(u.file_id for u in srv.files.uploads)


def test_files_api_off_uploads_nothing(monkeypatch, home):
    with anthropic_server([text("ok"), text("ok")]) as srv:
        srv.use(monkeypatch)
        provider = AnthropicProvider(Settings())
        send(provider, chat([A]))
        send(provider, chat([A], [B]))
    assert srv.files.uploads == [] and [r.path for r in srv.received] == ["/v1/messages"] * 2
    assert inline(srv.requests[1]) == [A.data, B.data]
    assert "anthropic-beta" not in srv.received[1].headers
    assert not files_path(SESSION, home).exists()


def test_a_request_without_a_session_sends_images_inline(monkeypatch):
    with anthropic_server([text("ok")]) as srv:
        srv.use(monkeypatch)
        send(AnthropicProvider(FILES_ON), chat([A], session_id=""))
    assert srv.files.uploads == [] and inline(srv.requests[0]) == [A.data]


# -- uploads refused ---------------------------------------------------------------------


def test_a_refused_upload_sends_that_image_inline_with_one_warning(monkeypatch, caplog):
    with anthropic_server([text("ok"), text("ok")]) as srv:
        srv.use(monkeypatch)
        srv.files.refuse_uploads(error(413, "File too large for this account."))
        provider = AnthropicProvider(FILES_ON)
        assert send(provider, chat([A])) == "ok"
        assert send(provider, chat([A], [B])) == "ok"
    first, second = (r.body for r in sent(srv))
    assert inline(first) == [A.data] and file_ids(first) == []
    # A is not tried again (its bytes stay the same, turn after turn); B is uploaded
    assert uploaded(srv) == [B.data]
    assert inline(second) == [A.data] and file_ids(second) == [srv.files.uploads[0].file_id]
    [said] = warnings(caplog)
    assert "refused 1 image" in said and "File too large" in said and "base64" in said


def test_an_unavailable_files_api_sends_every_image_inline(monkeypatch, caplog):
    with anthropic_server([text("ok"), text("ok")]) as srv:
        srv.use(monkeypatch)
        srv.files.refuse_uploads(*[error(503, "Files are resting.")] * 3)  # 1 try + 2 retries
        provider = AnthropicProvider(FILES_ON)
        send(provider, chat([A]))
        send(provider, chat([A], [B]))
    attempts = [r for r in srv.received if r.path == "/v1/files"]
    assert len(attempts) == 3 and srv.files.uploads == []  # B is never tried
    assert inline(sent(srv)[1].body) == [A.data, B.data]
    [said] = warnings(caplog)
    assert "cannot take uploads" in said and "HTTP 503" in said and "files_api = false" in said


def test_an_upload_reply_without_a_usable_id_is_a_refusal(monkeypatch, caplog):
    from wire.server import Wire

    def odd(received):
        if received.path == "/v1/files":
            return Wire(200, "application/json", [json.dumps(
                {"id": "../../etc/passwd", "type": "file", "filename": "x", "mime_type": "x",
                 "size_bytes": 1, "created_at": "2025-06-01T12:00:00Z"}).encode()])
        return None

    with anthropic_server([text("ok")]) as srv:
        srv.use(monkeypatch)
        srv.routes.insert(0, odd)
        assert send(AnthropicProvider(FILES_ON), chat([A])) == "ok"
    assert inline(sent(srv)[0].body) == [A.data]
    assert "no usable file id" in warnings(caplog)[0]


# -- files the API lost --------------------------------------------------------------------


def test_an_expired_file_is_uploaded_again_and_the_request_sent_once_more(monkeypatch, home):
    with anthropic_server([text("ok"), text("still ok")]) as srv:
        srv.use(monkeypatch)
        provider = AnthropicProvider(FILES_ON)
        send(provider, chat([A]))
        srv.files.expire(srv.files.uploads[0].file_id)
        assert send(provider, chat([A], [B])) == "still ok"
    first_a, b, second_a = srv.files.uploads
    assert (first_a.data, b.data, second_a.data) == (A.data, B.data, A.data)
    requests = sent(srv)
    assert len(requests) == 3  # the turn before, the refused one, the one sent again
    assert file_ids(requests[1].body) == [first_a.file_id, b.file_id]
    assert file_ids(requests[2].body) == [second_a.file_id, b.file_id]
    assert sorted(remembered(home)[srv.base_url].values()) == sorted(
        [b.file_id, second_a.file_id])


def test_a_file_lost_twice_is_a_clear_error_not_a_loop(monkeypatch):
    with anthropic_server([text("ok")]) as srv:
        srv.use(monkeypatch)
        provider = AnthropicProvider(FILES_ON)
        send(provider, chat([A]))
        srv.files.lose_next(2)
        with pytest.raises(ProviderError) as caught:
            send(provider, chat([A], [B]))
    message = str(caught.value)
    assert "still does not know a file" in message and "files_api = false" in message
    assert "Traceback" not in message
    assert len(sent(srv)) == 3  # one turn, then the request and its one retry
    assert uploaded(srv) == [A.data, B.data, A.data]


def test_an_error_about_something_else_is_not_retried(monkeypatch):
    with anthropic_server([error(404, "model: claude-sonnet-5-5 not found",
                                 retry_after=None)]) as srv:
        srv.use(monkeypatch)
        with pytest.raises(ProviderError, match="has no model"):
            send(AnthropicProvider(FILES_ON), chat([A]))
    assert len(sent(srv)) == 1 and uploaded(srv) == [A.data]


def test_an_unreadable_map_of_uploads_is_replaced_with_a_warning(monkeypatch, home, caplog):
    path = files_path(SESSION, home)
    path.parent.mkdir(parents=True)
    path.write_text('{"version": 1, "files": {"x": {"not-a-hash": 5}}}')
    with anthropic_server([text("ok")]) as srv:
        srv.use(monkeypatch)
        assert send(AnthropicProvider(FILES_ON), chat([A])) == "ok"
    assert uploaded(srv) == [A.data]
    assert list(remembered(home)) == [srv.base_url]
    assert any("ignoring" in w and str(path) in w for w in warnings(caplog))


# -- deleting a session ----------------------------------------------------------------------


def saved_session_with_uploads(monkeypatch, srv, home, *images: ImageBlock) -> None:
    save_session(Conversation(id=SESSION, provider="anthropic", model="claude-sonnet-5-5"),
                 home)
    srv.use(monkeypatch)
    send(AnthropicProvider(FILES_ON), chat(list(images)))


def silica(*args: str, srv) -> subprocess.CompletedProcess:
    env = {**os.environ, **srv.env}
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def test_deleting_a_session_deletes_its_remote_files(monkeypatch, home):
    with anthropic_server([text("ok")]) as srv:
        saved_session_with_uploads(monkeypatch, srv, home, A, B)
        done = silica("sessions", "delete", SESSION, srv=srv)
    assert done.returncode == 0, done.stderr
    assert f"deleted session {SESSION}" in done.stdout and done.stderr == ""
    assert sorted(srv.files.deleted) == sorted(u.file_id for u in srv.files.uploads)
    assert len(srv.files.deleted) == 2
    assert not session_exists(SESSION, home)
    assert not session_folder(SESSION, home).exists() and not files_path(SESSION, home).exists()


def test_a_failed_remote_delete_is_a_warning_and_the_session_still_goes(monkeypatch, home):
    with anthropic_server([text("ok")]) as srv:
        saved_session_with_uploads(monkeypatch, srv, home, A, B)
        srv.files.refuse_deletes(error(403, "This key may not delete files."))
        done = silica("sessions", "delete", SESSION, srv=srv)
    assert done.returncode == 0, done.stderr
    assert f"deleted session {SESSION}" in done.stdout
    assert "could not delete 2 of the Anthropic files" in done.stderr
    assert "This key may not delete files" in done.stderr
    assert all(u.file_id in done.stderr for u in srv.files.uploads)
    assert len(srv.files.delete_requests) == 1  # refused: no use trying the next one
    assert "Traceback" not in done.stderr
    assert not session_exists(SESSION, home) and not files_path(SESSION, home).exists()


def test_a_file_already_gone_counts_as_deleted(monkeypatch, home, caplog):
    with anthropic_server([text("ok")]) as srv:
        saved_session_with_uploads(monkeypatch, srv, home, A, B)
        srv.files.expire(srv.files.uploads[0].file_id)
        delete_session(SESSION, home)
    assert sorted(srv.files.delete_requests) == sorted(u.file_id for u in srv.files.uploads)
    assert warnings(caplog) == []  # the 404 for the expired one is no failure


def test_a_session_without_uploads_is_deleted_without_a_request(monkeypatch, home):
    save_session(Conversation(id=SESSION), home)
    with anthropic_server() as srv:
        srv.use(monkeypatch)
        delete_session(SESSION, home)
    assert srv.received == [] and not session_exists(SESSION, home)


def test_a_raising_cleanup_plugin_never_stops_a_deletion(home, caplog):
    class Broken:
        @hookimpl
        def silica_session_deleted(self, session_id):
            raise RuntimeError(f"cannot reach the archive for {session_id}")

    save_session(Conversation(id=SESSION), home)
    pm = get_plugin_manager()
    plugin = Broken()
    pm.register(plugin, name="broken-cleanup")
    try:
        deleted = delete_session(SESSION, home)
    finally:
        pm.unregister(plugin)
    assert deleted.id == SESSION and not session_exists(SESSION, home)
    [record] = [r for r in caplog.records if r.name == "silica.sessions"]
    assert "broken-cleanup" in record.getMessage() and "archive" in record.getMessage()
